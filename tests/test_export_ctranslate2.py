"""CTranslate2 exports (`interlingua export ctranslate2`, `Model.export_ctranslate2`).

A shared Transformer model without a bridge must translate in CTranslate2 exactly as in interlingua:
the same greedy output token for token (a model trained for a few seconds, both directions, the
default per-sentence limits and one limit for a batch), and the same log-probabilities to 1e-5 for
every variant the export maps (pre/post-norm, sinusoidal/learned positions, tied/untied output
embeddings, the tag before the source or in place of BOS, different heads in encoder and decoder).
Whatever CTranslate2 cannot compute is one error naming it; OUT is replaced only when it holds a
previous export of the same kind."""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import ctranslate2
import numpy as np
import pytest
import torch
from conftest import tiny_config, write_multiway_corpus

import interlingua
from interlingua.cli import main
from interlingua.config import ModelConfig, parse_config
from interlingua.data.vocab import EOS, Vocab, decoder_start, language_tag, source_prefix
from interlingua.errors import InterlinguaError
from interlingua.model_files import ctranslate2_export
from interlingua.model_files.checkpoint import build_payload, load_checkpoint, save_atomic
from interlingua.model_files.ctranslate2_export import UnsupportedModelError, unsupported_features
from interlingua.modules.model import TranslationNetwork
from interlingua.modules.search import greedy_search

LANGS = ["xa", "xb"]
WORDS = list("abcdefgh")
TRANSFORMER = {"encoder": {"type": "transformer", "layers": 2, "heads": 2, "ff_dim": 48},
               "decoder": {"type": "transformer", "layers": 2, "heads": 4, "ff_dim": 40, "tie_embeddings": True}}
SHARED = {"embed_dim": 32, "shared": True, "tag_position": "decoder_start", "bridge": {"type": "none"}, **TRANSFORMER,
          "dropout": 0.0}


def sentences(lang: str, n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(lang[1] + rng.choice(WORDS) for _ in range(rng.randint(1, 9))) for _ in range(n)]


def synthetic_corpus(root: Path, n_train: int = 300) -> Path:
    rng = random.Random(3)
    texts = {}
    for split, n in (("train", n_train), ("val", 10)):
        sents = [[rng.choice(WORDS) for _ in range(rng.randint(2, 6))] for _ in range(n)]
        texts[split] = {lang: [" ".join(lang[1] + w for w in s) for s in sents] for lang in LANGS}
    return write_multiway_corpus(root, "synthetic", texts)


def experiment_config(root: Path, model: dict, **sections):
    return parse_config({**tiny_config(synthetic_corpus(root), root / "run", **sections),
                         "model": {**SHARED, **model}})


def synthetic_checkpoint(root: Path, model: dict, name: str = "model.pt", offset_lang: bool = False) -> Path:
    """A seeded, untrained xa<->xb model of `SHARED` updated with `model`, saved as a .pt checkpoint; its
    weights are scaled up so that outputs depend on the input."""
    root.mkdir(parents=True, exist_ok=True)
    cfg = experiment_config(root, model, preprocess={"vocab_size": 60, "joint_vocab": bool(model.get("shared", True)),
                                                      "max_len": 20},
                            directions={"mode": "explicit", "pairs": [["xa", "xb"], ["xb", "xa"]]})
    if cfg.model.shared:
        tags = [language_tag(lang) for lang in LANGS]
        joint = Vocab.train([f"{lang[1]}{w}" for lang in LANGS for w in WORDS] * 5, 40, user_symbols=tags, threads=1)
        vocabs = {lang: joint for lang in LANGS}
    else:
        vocabs = {lang: Vocab.train([f"{lang[1]}{w}" for w in WORDS] * 5, 20, threads=1) for lang in LANGS}
    torch.manual_seed(11)
    net = TranslationNetwork(cfg.model, {k: len(v) for k, v in vocabs.items()}, LANGS, LANGS)
    with torch.no_grad():
        for param in net.parameters():
            if param.dim() > 1:
                param.mul_(2.0)
    path = root / name
    save_atomic(build_payload(cfg, net, vocabs, [("xa", "xb"), ("xb", "xa")]), path)
    return path


def train_letter_code_transformer(root: Path) -> Path:
    """A shared Transformer, no bridge, the tag in place of BOS, tied embeddings, trained 200 steps on
    xa<->xb (a letter-for-letter code: about 3 s on one thread) so that it writes real, varied output."""
    from interlingua.training.trainer import train
    cfg = experiment_config(root, {}, preprocess={"vocab_size": 60, "joint_vocab": True, "max_len": 20,
                                                  "max_train_sentences": 300},
                            directions={"mode": "explicit", "pairs": [["xa", "xb"], ["xb", "xa"]]},
                            train={"max_steps": 200, "valid_every": 100000, "batch_size": 20, "lr": 0.01})
    return Path(train(cfg).best_checkpoint)


@pytest.fixture(scope="module")
def trained(letter_code_transformer) -> Path:
    """`train_letter_code_transformer`'s model, trained once per session (`tests/conftest.py`)."""
    return letter_code_transformer


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ct2") / "model"
    assert main(["export", "ctranslate2", str(trained), str(out)]) == 0
    return out


def ct2_translate(translator: ctranslate2.Translator, vocab: Vocab, model: interlingua.Model, texts: list[str],
                  tgt: str, max_len: int | None = None) -> list[list[int]]:
    """Token ids of CTranslate2's greedy translations, called as the export's README says: the limit is
    `max_len`, or per sentence interlingua's default (2 x source length + 10)."""
    prefixed = model.target_in_source
    tag = language_tag(tgt)
    sources = [([tag] if prefixed else []) + vocab.pieces(t) for t in texts]
    kwargs = {} if prefixed else {"target_prefix": [[tag]] * len(sources)}
    if max_len is not None:
        results = translator.translate_batch(sources, beam_size=1, min_decoding_length=0, max_decoding_length=max_len,
                                             max_batch_size=7, **kwargs)
    else:
        results = [translator.translate_batch([s], beam_size=1, min_decoding_length=0,
                                              max_decoding_length=2 * len(s) + 10, **{
                                                  k: v[:1] for k, v in kwargs.items()})[0] for s in sources]
    return [[vocab.piece_id(p) for p in r.hypotheses[0]] for r in results]


def our_ids(path: Path, texts: list[str], src: str, tgt: str, max_len: int) -> list[list[int]]:
    """interlingua's greedy output ids, one sentence at a time (encoder, decoder start, greedy search)."""
    loaded = load_checkpoint(path)
    net, vocab = loaded.network, loaded.vocabs[src]
    out = []
    with torch.inference_mode():
        for text in texts:
            ids = vocab.tokenize(text)
            prefix = source_prefix(vocab, tgt, True, net.cfg.tag_position)
            ids = ([prefix] if prefix is not None else []) + ids
            bridged = net.run_encoder(torch.tensor([ids]), torch.tensor([len(ids)]), src)
            decoder, state = net.start_decoding(bridged, tgt)
            start = decoder_start(vocab, tgt, True, net.cfg.tag_position)
            out.extend(greedy_search(decoder, state, max_len, start))
    return out


# -- the trained model: greedy output token for token ----------------------------------------------

@pytest.mark.parametrize("src,tgt", [("xa", "xb"), ("xb", "xa")])
def test_greedy_translations_equal_ours(exported, trained, src, tgt):
    model = interlingua.load(trained, "cpu")
    vocab = model.vocabs[src]
    texts = sentences(src, 40, seed=5) + [""]
    translator = ctranslate2.Translator(str(exported), device="cpu")
    for max_len in (None, 12):
        ours = model.translate(texts, src, tgt, max_len=max_len)
        theirs = ct2_translate(translator, vocab, model, texts, tgt, max_len)
        assert [vocab.decode(ids) for ids in theirs] == ours, max_len
    assert len(set(ours)) > 20 and ours[-1] == ""  # real, varied translations (and an empty line stays empty)
    ids = our_ids(trained, texts[:-1], src, tgt, 4)
    assert ct2_translate(translator, vocab, model, texts[:-1], tgt, 4) == ids
    assert any(len(x) < 4 for x in ids) and any(len(x) == 4 for x in ids)  # ended by EOS, and cut at the limit


def test_the_folder_holds_the_documented_files(exported, trained, monkeypatch, capsys):
    names = sorted(p.name for p in exported.iterdir())
    assert names == ["README.md", "config.json", "interlingua.json", "joint.spm.model", "model.bin",
                     "shared_vocabulary.json"]
    config = json.loads((exported / "config.json").read_text())
    assert config["decoder_start_token"] is None and config["layer_norm_epsilon"] == pytest.approx(1e-5)
    assert (config["unk_token"], config["bos_token"], config["eos_token"]) == ("<unk>", "<s>", "</s>")
    model = interlingua.load(trained, "cpu")
    vocab = model.vocabs["xa"]
    tokens = json.loads((exported / "shared_vocabulary.json").read_text())
    assert tokens == [vocab.id_to_piece(i) for i in range(len(vocab))]
    assert (exported / "joint.spm.model").read_bytes() == vocab.proto
    meta = json.loads((exported / "interlingua.json").read_text())
    assert meta["format"] == "interlingua-ctranslate2" and meta["tag_position"] == "decoder_start"
    assert meta["language_tags"] == {"xa": "<2xa>", "xb": "<2xb>"} and meta["quantization"] == "float32"
    readme = (exported / "README.md").read_text()
    assert 'target_prefix=[["<2xb>"]]' in readme and "min_decoding_length=0" in readme
    # the README's snippet, run as it stands (beside the folder), prints our translations
    snippet = readme.split("```python\n")[1].split("```")[0]
    texts = sentences("xa", 5, seed=9)
    assert 'texts = ["..."]' in snippet
    monkeypatch.chdir(exported.parent)
    capsys.readouterr()
    exec(snippet.replace('texts = ["..."]', f"texts = {texts!r}"), {})
    assert capsys.readouterr().out.splitlines() == model.translate(texts, "xa", "xb", max_len=50)
    assert not list(exported.parent.glob(".*"))  # no temporary folder left


# -- every variant the export maps: the same log-probabilities -------------------------------------

VARIANTS = {
    "pre-sinusoidal-tied": {},
    "post-learned-untied": {"encoder": {**TRANSFORMER["encoder"], "norm": "post", "positions": "learned",
                                        "max_positions": 64},
                            "decoder": {**TRANSFORMER["decoder"], "norm": "post", "positions": "learned",
                                        "max_positions": 64, "tie_embeddings": False}},
    "source_prefix-mixed-norms": {"tag_position": "source_prefix",
                                  "encoder": {**TRANSFORMER["encoder"], "norm": "post", "variational_dropout": True},
                                  "decoder": {**TRANSFORMER["decoder"], "heads": 8, "positions": "learned",
                                              "max_positions": 64}},
}


def our_log_probs(path: Path, src_ids: list[int], tgt_ids: list[int], src: str, tgt: str) -> np.ndarray:
    """log p(y_t | y_<t, x) of each of `tgt_ids` + EOS, teacher-forced."""
    loaded = load_checkpoint(path)
    net, vocab = loaded.network, loaded.vocabs[src]
    prefix = source_prefix(vocab, tgt, True, net.cfg.tag_position)
    ids = ([prefix] if prefix is not None else []) + src_ids
    with torch.inference_mode():
        bridged = net.run_encoder(torch.tensor([ids]), torch.tensor([len(ids)]), src)
        decoder, state = net.start_decoding(bridged, tgt)
        tgt_in = torch.tensor([[decoder_start(vocab, tgt, True, net.cfg.tag_position)] + tgt_ids])
        states, _ = decoder(tgt_in, state)
        logp = torch.log_softmax(decoder.generator(states[0]).float(), -1)
        return logp[torch.arange(len(tgt_ids) + 1), torch.tensor(tgt_ids + [EOS])].numpy()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_variant_scores_and_translates_as_ours(variant, tmp_path):
    path = synthetic_checkpoint(tmp_path / "m", VARIANTS[variant])
    model = interlingua.load(path, "cpu")
    out = model.export_ctranslate2(tmp_path / "ct2")
    assert out == tmp_path / "ct2"
    translator = ctranslate2.Translator(str(out), device="cpu")
    vocab = model.vocabs["xa"]
    texts = sentences("xa", 6, seed=2)
    targets = sentences("xb", 6, seed=3)
    prefixed = model.target_in_source
    sources = [(["<2xb>"] if prefixed else []) + vocab.pieces(t) for t in texts]
    scored = translator.score_batch(sources, [([] if prefixed else ["<2xb>"]) + vocab.pieces(t) for t in targets])
    for text, target, result in zip(texts, targets, scored):
        ours = our_log_probs(path, vocab.tokenize(text), vocab.tokenize(target), "xa", "xb")
        assert result.tokens[-1] == "</s>" and len(result.tokens) == len(ours)
        # float32 in both: ~3e-6 apart here; a LayerNorm epsilon of 1e-6 instead of our 1e-5 is already 1.5e-5
        np.testing.assert_allclose(result.log_probs, ours, rtol=0, atol=1e-5)
    ids = our_ids(path, texts, "xa", "xb", 10)
    assert ct2_translate(translator, vocab, model, texts, "xb", 10) == ids


def test_int8_export_loads_and_translates(trained, exported, tmp_path, capsys):
    out = tmp_path / "int8"
    assert main(["export", "ctranslate2", str(trained), str(out), "--quantization", "int8"]) == 0
    assert "int8" in capsys.readouterr().out
    assert json.loads((out / "interlingua.json").read_text())["quantization"] == "int8"
    assert ctranslate2.Translator(str(exported), device="cpu").compute_type == "float32"
    translator = ctranslate2.Translator(str(out), device="cpu")
    assert translator.compute_type == "int8_float32"  # the stored weights are int8
    model = interlingua.load(trained, "cpu")
    texts = sentences("xa", 10, seed=7)
    theirs = [model.vocabs["xb"].decode(ids) for ids in ct2_translate(translator, model.vocabs["xa"], model, texts,
                                                                      "xb", 12)]
    ours = model.translate(texts, "xa", "xb", max_len=12)
    assert all(theirs) and sum(a == b for a, b in zip(ours, theirs)) >= len(texts) // 2


# -- what CTranslate2 cannot compute: one clear error ----------------------------------------------

UNSUPPORTED = {
    "attention bridge": ({"bridge": {"type": "attention", "heads": 3, "hidden": 16}},
                         "bridge 'attention' (the attention bridge)"),
    "lstm encoder": ({"encoder": {"type": "bilstm", "hidden": 32, "layers": 1}}, "encoder kind 'bilstm'"),
    "lstm decoder": ({"decoder": {"type": "lstm", "hidden": 32, "layers": 1}}, "decoder kind 'lstm'"),
    "residual_drop_layer": ({"encoder": {**TRANSFORMER["encoder"], "residual_drop_layer": 2}},
                            "encoder.residual_drop_layer 2"),
    "position_query": ({"encoder": {**TRANSFORMER["encoder"], "residual_drop_layer": 1, "position_query": True}},
                       "encoder.position_query"),
    "per-language": ({"shared": False}, "per-language model (model.shared: false"),
    "projected embeddings": ({"encoder": {**TRANSFORMER["encoder"], "hidden": 48}},
                             "encoder embeddings projected from embed_dim 32"),
}


def cli(argv: list[str], capsys) -> tuple[int, list[str]]:
    code = main(argv)
    _, err = capsys.readouterr()
    return code, [line for line in err.splitlines() if line.strip()]


def one_error(code: int, lines: list[str], *needles: str) -> None:
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in lines[0], lines
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.mark.parametrize("feature", sorted(UNSUPPORTED))
def test_an_unsupported_feature_is_one_clear_error(feature, tmp_path, capsys):
    model, needle = UNSUPPORTED[feature]
    path = synthetic_checkpoint(tmp_path / "m", model)
    out = tmp_path / "ct2"
    code, lines = cli(["export", "ctranslate2", str(path), str(out)], capsys)
    one_error(code, lines, "cannot export this model to CTranslate2", needle)
    assert not out.exists() and not list(tmp_path.glob(".*"))
    with pytest.raises(UnsupportedModelError, match="cannot export this model to CTranslate2") as err:
        interlingua.load(path, "cpu").export_ctranslate2(out)
    assert needle in str(err.value) and not out.exists()


def test_an_added_language_is_refused():
    tags = [language_tag(lang) for lang in LANGS]
    joint = Vocab.train([f"{lang[1]}{w}" for lang in LANGS for w in WORDS] * 5, 40, user_symbols=tags, threads=1)
    added = Vocab(Vocab.train([f"c{w}" for w in WORDS] * 5, 20, threads=1).proto, offset=len(joint) - 4)
    problems = unsupported_features(ModelConfig(**SHARED), {"xa": joint, "xb": joint, "xc": added})
    assert len(problems) == 1 and "a language added with `interlingua extend`" in problems[0]
    assert unsupported_features(ModelConfig(**SHARED), {"xa": joint, "xb": joint}) == []


def test_missing_ctranslate2_is_one_error_saying_how_to_install(trained, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # `import ctranslate2` raises ImportError
    monkeypatch.setitem(sys.modules, "ctranslate2.converters", None)
    out = tmp_path / "ct2"
    code, lines = cli(["export", "ctranslate2", str(trained), str(out)], capsys)
    one_error(code, lines, "pip install 'interlingua[ctranslate2]'")
    with pytest.raises(InterlinguaError, match=r"pip install 'interlingua\[ctranslate2\]'"):
        interlingua.load(trained, "cpu").export_ctranslate2(out)
    assert not out.exists()


def test_an_unknown_quantization_is_refused(trained, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["export", "ctranslate2", str(trained), str(tmp_path / "o"), "--quantization", "int3"])
    assert exit_.value.code == 2
    with pytest.raises(InterlinguaError, match="unknown CTranslate2 quantization 'int3'"):
        interlingua.load(trained, "cpu").export_ctranslate2(tmp_path / "o", quantization="int3")
    capsys.readouterr()
    one_error(*cli(["export", "folder", str(trained), str(tmp_path / "o"), "--quantization", "int8"], capsys),
              "--quantization is for `export ctranslate2`")
    assert not (tmp_path / "o").exists()
    from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES

    from interlingua.cli import EXPORT_QUANTIZATIONS
    assert set(ctranslate2_export.QUANTIZATIONS) == set(ACCEPTED_MODEL_TYPES) == set(EXPORT_QUANTIZATIONS) - {"none"}


# -- OUT: new, empty or a previous export of the same kind -----------------------------------------

def test_out_is_replaced_only_when_it_is_a_previous_export(trained, tmp_path, capsys):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    code, lines = cli(["export", "ctranslate2", str(trained), str(foreign)], capsys)
    one_error(code, lines, "is not empty and is not a CTranslate2 export")
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]

    folder = tmp_path / "folder"  # a model folder (`export folder`) is another kind of export
    assert main(["export", "folder", str(trained), str(folder)]) == 0
    before = sorted(p.name for p in folder.iterdir())
    code, lines = cli(["export", "ctranslate2", str(trained), str(folder)], capsys)
    one_error(code, lines, "is not a CTranslate2 export")
    assert sorted(p.name for p in folder.iterdir()) == before
    from_folder, from_pt = tmp_path / "from-folder", tmp_path / "from-pt"  # MODEL may be a model folder
    assert main(["export", "ctranslate2", str(folder), str(from_folder)]) == 0
    assert main(["export", "ctranslate2", str(trained), str(from_pt)]) == 0
    assert (from_folder / "model.bin").read_bytes() == (from_pt / "model.bin").read_bytes()

    a_file = tmp_path / "file"
    a_file.write_text("x")
    one_error(*cli(["export", "ctranslate2", str(trained), str(a_file)], capsys), "is not a folder")

    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["export", "ctranslate2", str(trained), str(empty)]) == 0
    first = (empty / "model.bin").read_bytes()
    assert main(["export", "ctranslate2", str(trained), str(empty), "--quantization", "int8"]) == 0  # replaced
    assert (empty / "model.bin").read_bytes() != first
    (empty / "extra.txt").write_text("mine")
    code, lines = cli(["export", "ctranslate2", str(trained), str(empty)], capsys)
    one_error(code, lines, "also holds extra.txt")
    assert (empty / "extra.txt").read_text() == "mine"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_an_interrupted_export_leaves_the_previous_one(trained, tmp_path, monkeypatch):
    out = tmp_path / "ct2"
    interlingua.load(trained, "cpu").export_ctranslate2(out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ctranslate2_export, "render_readme", fail)
    with pytest.raises(OSError):
        interlingua.load(trained, "cpu").export_ctranslate2(out, quantization="int8")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ct2"]

