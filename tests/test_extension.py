"""Adding a language to a trained shared model (`interlingua extend`) and fine-tuning it (`train --init`).

A synthetic multi-way corpus: each sentence is 2-6 words drawn from eight types; language `xL`
writes type `w` as the word `Lw` (`xa`: "aa", "ab", ...; the new language `xn`: "na", "nb", ...).
Two tiny shared models are trained on {xa,xc}<->xb for a few seconds: a Transformer decoder with
tied embeddings (tag in place of BOS) and an LSTM decoder (tag prefixed to the source). Each is
then extended with `xn` and must keep every old id, old output and old log-probability.
"""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import tiny_config, write_multiway_corpus

from interlingua import load
from interlingua.cli import main
from interlingua.config import parse_config
from interlingua.data.batching import make_batch
from interlingua.data.vocab import EOS, decoder_start, language_tag, source_prefix
from interlingua.evaluation.bleu_matrix import MatrixResult
from interlingua.experiment import run_experiments
from interlingua.inference.shortlist_build import build_shortlist
from interlingua.model_files.checkpoint import Checkpoint, build_payload, read_checkpoint, save_atomic
from interlingua.model_files.load import load_model
from interlingua.training.extension import extend_checkpoint
from interlingua.training.trainer import train

OLD = ["xa", "xb", "xc"]
NEW = "xn"
TYPES = list("abcdefgh")
NOISE = 0.02
MODELS = {
    "transformer_tied": {"embed_dim": 32, "shared": True, "tag_position": "decoder_start", "bridge": {"type": "none"},
                         "encoder": {"type": "transformer", "layers": 1, "heads": 2, "ff_dim": 64},
                         "decoder": {"type": "transformer", "layers": 1, "heads": 2, "ff_dim": 64,
                                     "tie_embeddings": True},
                         "dropout": 0.0},
    "lstm": {"embed_dim": 32, "shared": True, "tag_position": "source_prefix", "encoder": {"hidden": 32, "layers": 1},
             "bridge": {"heads": 4, "hidden": 32}, "decoder": {"hidden": 32, "layers": 1}, "dropout": 0.0},
}


def word(lang: str, w: str) -> str:
    return lang[1] + w


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("extension_corpus")
    rng = random.Random(5)
    texts = {}
    for split, n in (("train", 600), ("val", 20), ("test", 20), ("test_2016_flickr", 12)):
        sents = [[rng.choice(TYPES) for _ in range(rng.randint(2, 6))] for _ in range(n)]
        texts[split] = {lang: [" ".join(word(lang, w) for w in s) for s in sents] for lang in [*OLD, NEW]}
    return write_multiway_corpus(root, "synthetic", texts)


def config(corpus: Path, work: Path, model: dict, languages: list[str], steps: int) -> dict:
    cfg = tiny_config(corpus, work, preprocess={"vocab_size": 60, "joint_vocab": True, "max_train_sentences": None,
                                                "max_valid_sentences": 20, "max_len": 20},
                      train={"max_steps": steps, "valid_every": 1000, "log_every": 50, "batch_size": 16, "lr": 0.005,
                             "seed": 3, "threads": 1, "precision": "fp32"})
    cfg["model"] = model
    cfg["directions"] = {"mode": "pivot", "pivot": "xb", "languages": languages}
    return cfg


@pytest.fixture(scope="module", params=sorted(MODELS))
def trained(request, corpus, tmp_path_factory) -> tuple[str, Path, Path]:
    """(kind, old checkpoint, extended checkpoint)."""
    work = tmp_path_factory.mktemp(f"old_{request.param}")
    cfg = parse_config(config(corpus, work / "run", MODELS[request.param], OLD, 80))
    old = train(cfg).last_checkpoint
    ext = extend_checkpoint(old, NEW, work / "extended.pt", vocab_size=40, noise=NOISE, seed=1)
    return request.param, old, ext.out


def sentences(corpus: Path, lang: str, split: str = "test") -> list[str]:
    return (corpus.parent / f"{split}.{lang}").read_text().splitlines()


def test_old_ids_unchanged_and_tags_found_both_ways(trained, corpus):
    _, old_path, ext_path = trained
    old, ext = load(old_path, "cpu"), load(ext_path, "cpu")
    size = len(old.vocabs["xa"])
    for lang in OLD:
        texts = sentences(corpus, lang, "train")[:50]
        assert ext.vocabs[lang].tokenize_batch(texts) == old.vocabs[lang].tokenize_batch(texts)
        assert ext.vocabs[lang].piece_id(language_tag(lang)) == old.vocabs[lang].piece_id(language_tag(lang))
    new = ext.vocabs[NEW]
    ids = [i for s in new.tokenize_batch(sentences(corpus, NEW)) for i in s]
    assert min(ids) >= size and max(ids) < len(new)                  # appended after the old ids
    assert new.decode(new.tokenize("na nb nh")) == "na nb nh"
    assert new.piece_id(language_tag(NEW)) == size                  # the new tag, first of the new ids
    assert new.piece_id(language_tag("xa")) == old.vocabs["xa"].piece_id(language_tag("xa"))
    assert ext.vocabs["xa"].piece_id(language_tag(NEW)) == size     # old vocabularies find the new tag
    assert new.id_to_piece(size) == language_tag(NEW)
    assert load_model(ext_path).network.decoder_for(NEW).generator.out_features == len(new)


def test_old_outputs_and_log_probs_unchanged(trained, corpus):
    kind, old_path, ext_path = trained
    old, ext = load(old_path, "cpu"), load(ext_path, "cpu")
    for src, tgt in (("xa", "xb"), ("xb", "xc"), ("xa", "xc")):  # xa->xc: zero-shot
        texts = sentences(corpus, src)
        for beam in (1, 3):
            assert ext.translate(texts, src, tgt, beam=beam) == old.translate(texts, src, tgt, beam=beam), \
                (kind, src, tgt)
            # batches decoded at once in threads step the one shared decoder side by side
            assert ext.translate(texts, src, tgt, beam=beam, batch_size=2, workers=3) == old.translate(
                texts, src, tgt, beam=beam), (kind, src, tgt)
    # bit for bit: the step's log-probabilities and the teacher-forced loss of an old direction
    size = len(old.vocabs["xa"])
    logp, losses = {}, {}
    for name, path in (("old", old_path), ("ext", ext_path)):
        loaded = load_model(path)  # the network, in eval mode
        batch = _batch(loaded, corpus, "xa", "xb")
        with torch.inference_mode():
            bridged = loaded.network.run_encoder(batch.src, batch.src_lengths, "xa")
            decoder, state = loaded.network.start_decoding(bridged, "xb")
            logp[name], _ = decoder.step(batch.tgt_in[:, 0], state)
            losses[name] = loaded.network(batch).nll_sum
    assert torch.equal(logp["ext"][:, :size], logp["old"])
    assert torch.isneginf(logp["ext"][:, size:]).all()
    assert losses["ext"] == losses["old"]


def _batch(model, corpus: Path, src: str, tgt: str, split: str = "test", n: int = 20):
    """The first `n` pairs of `split` as a training batch of `model` (a `Model` or a loaded checkpoint: its config
    and vocabularies)."""
    shared, pos = model.config.model.shared, model.config.model.tag_position
    s = [np.asarray(x) for x in model.vocabs[src].tokenize_batch(sentences(corpus, src, split)[:n])]
    t = [np.asarray(x) for x in model.vocabs[tgt].tokenize_batch(sentences(corpus, tgt, split)[:n])]
    return make_batch(s, t, src, tgt, source_prefix(model.vocabs[src], tgt, shared, pos),
                      decoder_start(model.vocabs[tgt], tgt, shared, pos))


def test_new_rows_are_mean_plus_noise(trained):
    kind, old_path, ext_path = trained
    old, ext = load_model(old_path), load_model(ext_path)
    before, after = old.network.state_dict(), ext.network.state_dict()
    size = len(old.vocabs["xa"])
    grown = [k for k in after if after[k].shape != before[k].shape]
    expected = ({"encoders.shared.embedding.embed.weight", "decoders.shared.embedding.embed.weight",
                 "decoders.shared.generator.weight", "decoders.shared.generator.bias"}
                if kind == "transformer_tied" else
                {"encoders.shared.embed.weight", "decoders.shared.embed.weight",
                 "decoders.shared.generator.weight", "decoders.shared.generator.bias"})
    assert set(grown) == expected, grown
    for k in grown:
        a, b = after[k], before[k]
        assert torch.equal(a[:size], b)
        new_rows = a[size:].double()
        deviation = new_rows - b[EOS + 1:].double().mean(0)
        assert deviation.abs().max() < 6 * NOISE                    # near the mean of the old rows ...
        assert 0.5 * NOISE < deviation.std() < 1.5 * NOISE          # ... with noise of the asked size
        assert not torch.equal(new_rows[0], new_rows[1])            # and not all the same
    for k in after:
        if k not in grown:
            assert torch.equal(after[k], before[k]), k
    if kind == "transformer_tied":
        dec = ext.network.decoder_for(NEW)
        assert dec.generator.weight is dec.embedding.embed.weight   # still one Parameter


def test_extended_checkpoint_saves_loads_and_translates_the_new_language(trained, corpus, tmp_path):
    _, _, ext_path = trained
    ext = load(ext_path, "cpu")
    assert NEW in ext.languages.sources and NEW in ext.languages.targets
    assert (NEW, "xb") in ext.languages.zero_shot and ("xb", NEW) in ext.languages.zero_shot
    texts = sentences(corpus, "xb")[:5]
    into = ext.translate(texts, "xb", NEW, beam=2)
    back = ext.translate(sentences(corpus, NEW)[:5], NEW, "xa", beam=1)
    assert len(into) == len(back) == 5
    # the new language's outputs stay within its vocabulary
    batch = _batch(ext, corpus, "xb", NEW)
    loaded = load_model(ext_path)
    with torch.inference_mode():
        decoder, state = loaded.network.start_decoding(loaded.network.run_encoder(batch.src, batch.src_lengths, "xb"),
                                                       NEW)
        logp, _ = decoder.step(batch.tgt_in[:, 0], state)
    allowed = torch.zeros(logp.size(1), dtype=torch.bool)
    for a, b in ext.vocabs[NEW].id_ranges():
        allowed[a:b] = True
    assert torch.isfinite(logp[:, allowed]).all() and torch.isneginf(logp[:, ~allowed]).all()
    assert torch.allclose(logp.exp().sum(1), torch.ones(logp.size(0)), atol=1e-5)
    # save (build_payload) -> load again: the same vocabularies, offsets and translations
    again = tmp_path / "again.pt"
    save_atomic(build_payload(loaded.config, loaded.network, loaded.vocabs, loaded.directions), again)
    second = load(again, "cpu")
    assert ({k: (v.proto, v.offset) for k, v in second.vocabs.items()}
            == {k: (v.proto, v.offset) for k, v in ext.vocabs.items()})
    assert second.translate(texts, "xb", NEW, beam=2) == into
    assert read_checkpoint(again)["version"] == 2


def test_plain_checkpoints_unchanged(trained):
    _, old_path, _ = trained
    payload = read_checkpoint(old_path)
    assert payload["version"] == 1 and "vocab_offsets" not in payload
    assert load_model(old_path).network.output_rows == {}
    fixture = Path(__file__).parent / "fixtures" / "legacy_attention.pt"
    legacy = load_model(fixture)
    assert legacy.network.output_rows == {} and all(v.offset == 0 for v in legacy.vocabs.values())


def _nll(path: Path, corpus: Path, src: str, tgt: str) -> float:
    """The mean teacher-forced loss of the checkpoint at `path` on the val split's first src -> tgt pairs."""
    loaded = load_model(path)
    with torch.inference_mode():
        out = loaded.network(_batch(loaded, corpus, src, tgt, split="val"))
    return out.nll_sum / out.n_tokens


@pytest.mark.parametrize("trained", ["transformer_tied"], indirect=True)  # one kind is enough here
def test_train_init_fine_tunes_the_new_language(trained, corpus, tmp_path, capsys):
    kind, old_path, ext_path = trained
    cfg = config(corpus, tmp_path / "finetune", MODELS[kind], [*OLD, NEW], 150)
    cfg_path = tmp_path / "finetune.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    assert main(["train", str(cfg_path), "--init", str(ext_path)]) == 0
    assert "trained 150 steps" in capsys.readouterr().out
    before, after = load(ext_path, "cpu"), load(tmp_path / "finetune" / "last.pt", "cpu")
    for d in ((NEW, "xb"), ("xb", NEW)):
        b, a = _nll(ext_path, corpus, *d), _nll(tmp_path / "finetune" / "last.pt", corpus, *d)
        assert a < 0.75 * b, (d, b, a)  # measured: xn->xb 2.15 -> 1.21, xb->xn 5.03 -> 1.18
    assert ({k: (v.proto, v.offset) for k, v in after.vocabs.items()}
            == {k: (v.proto, v.offset) for k, v in before.vocabs.items()})
    assert set(after.languages.trained) >= {(NEW, "xb"), ("xb", NEW), ("xa", "xb")}
    # a lexical shortlist decodes into the new language within its vocabulary, as without one
    shortlisted = load(tmp_path / "finetune" / "last.pt", "cpu").use_shortlist(build_shortlist(after))
    into = shortlisted.translate(sentences(corpus, "xb")[:8], "xb", NEW, beam=3)
    assert len(into) == 8 and all(w[0] == NEW[1] for line in into for w in line.split()), into

    # the weights are the checkpoint's: one step at a vanishing learning rate leaves them where they were
    cfg["work_dir"] = str(tmp_path / "one_step")
    cfg["train"] = {**cfg["train"], "max_steps": 1, "lr": 1e-9}
    cfg_path.write_text(yaml.safe_dump(cfg))
    assert main(["train", str(cfg_path), "--init", str(ext_path)]) == 0
    one = load_model(tmp_path / "one_step" / "last.pt").network.state_dict()
    for k, v in load_model(ext_path).network.state_dict().items():
        assert torch.allclose(one[k], v, atol=1e-6), k
    assert Checkpoint.read(tmp_path / "one_step" / "last.pt").training.step == 1  # a fresh step count

    # the config's model section must be the checkpoint's
    cfg["model"] = {**cfg["model"], "embed_dim": 48}
    cfg["work_dir"] = str(tmp_path / "mismatch")
    cfg_path.write_text(yaml.safe_dump(cfg))
    assert main(["train", str(cfg_path), "--init", str(ext_path)]) == 2
    err = capsys.readouterr().err
    assert "model.embed_dim" in err and "Traceback" not in err
    # a language the checkpoint lacks
    cfg["model"] = MODELS[kind]
    cfg_path.write_text(yaml.safe_dump(cfg))
    assert main(["train", str(cfg_path), "--init", str(old_path)]) == 2
    err = capsys.readouterr().err
    assert "no vocabulary for xn" in err and "Traceback" not in err


def test_experiment_reports_the_added_language_beside_the_model_without_it(trained, corpus, tmp_path):
    kind, old_path, ext_path = trained
    old_recipe, new_recipe = tmp_path / "old.yaml", tmp_path / "added.yaml"
    old_recipe.write_text(yaml.safe_dump({**config(corpus, old_path.parent, MODELS[kind], OLD, 80), "name": "old"}))
    new_recipe.write_text(yaml.safe_dump({**config(corpus, tmp_path / "added", MODELS[kind], [*OLD, NEW], 40),
                                          "name": "added"}))
    assert main(["train", str(new_recipe), "--init", str(ext_path)]) == 0
    out = tmp_path / "report.md"
    old_run, new_run = run_experiments([old_recipe, new_recipe], [], out, max_test=12, pivot="xb")
    assert old_run["added"] is None and old_run["compute"]["steps"] == 80  # finished: scored, not retrained
    assert new_run["added"] == {"languages": [NEW], "from": str(old_path)}
    rows = {line.split(" | ")[0][2:]: line.split(" | ")
            for line in out.read_text().split("## Adding a language")[1].splitlines()
            if line.startswith("| old ") or line.startswith("| added ")}
    m = MatrixResult.from_json(new_run["matrix"])
    into_new = [m.bleu_cased[s][NEW] for s in ("xa", "xc")]  # zero-shot: only xb<->xn was trained
    assert rows["added"][5].endswith(f"/ {m.bleu_cased['xb'][NEW]:.1f}")  # new supervised: from / into
    assert rows["added"][6].endswith(f"/ {sum(into_new) / 2:.1f}")
    old_sup = MatrixResult.from_json(old_run["matrix"]).mean("bleu_cased", False)
    assert rows["old"][3] == f"{old_sup:.1f}" and rows["old"][5] == "-"
    assert rows["added"][3] == f"{m.mean('bleu_cased', False, lambda s, t: NEW not in (s, t)):.1f}"


def test_cli_extend_and_its_errors(trained, corpus, tmp_path, capsys):
    _, old_path, _ = trained
    out = tmp_path / "ext.pt"
    assert main(["extend", str(old_path), "--lang", NEW, "--out", str(out), "--vocab-size", "40", "--seed", "1"]) == 0
    assert f"added '{NEW}'" in capsys.readouterr().out and out.is_file()
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"not a checkpoint")
    per_language = tmp_path / "per_language.pt"
    cfg = parse_config(config(corpus, tmp_path / "pl", {**MODELS["lstm"], "shared": False}, ["xa", "xb"], 1))
    save_atomic(build_payload(cfg, *_per_language_model(cfg)), per_language)
    cases = [
        ([str(old_path), "--lang", "zz"], "not in corpus"),
        ([str(old_path), "--lang", "xa"], "already in the model"),
        ([str(per_language), "--lang", NEW], "needs a shared model"),
        ([str(tmp_path / "missing.pt"), "--lang", NEW], "checkpoint not found"),
        ([str(corrupt), "--lang", NEW], "not a readable checkpoint"),
        ([str(old_path), "--lang", NEW, "--corpus", str(tmp_path / "nothing.yaml")], "corpus file not found"),
    ]
    for args, message in cases:
        assert main(["extend", *args, "--out", str(tmp_path / "x.pt")]) == 2, args
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, (args, err)


def _per_language_model(cfg):
    from interlingua.data.vocab import Vocab
    from interlingua.modules.model import TranslationNetwork
    vocabs = {lang: Vocab.train([f"{lang[1]}a {lang[1]}b"] * 20, 12) for lang in ("xa", "xb")}
    model = TranslationNetwork(cfg.model, {k: len(v) for k, v in vocabs.items()}, ["xa", "xb"], ["xa", "xb"])
    return model, vocabs, [("xa", "xb"), ("xb", "xa")]
