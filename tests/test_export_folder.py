"""Model folders (`interlingua export folder`, `Model.save`): config.json + model.safetensors +
sentencepiece models + README.md, loaded without unpickling anything.

A folder must translate (greedy and beam search) and embed exactly as the checkpoint it came
from, for every kind of encoder, bridge and decoder (tied embeddings and added languages
included); a broken folder is one error naming the broken file; the model card reports what was
recorded and nothing else."""
from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import random
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_config, write_multiway_corpus
from safetensors import safe_open

import interlingua
from interlingua.cli import main
from interlingua.config import parse_config
from interlingua.data.vocab import EOS, Vocab, language_tag
from interlingua.errors import CheckpointError, InterlinguaError
from interlingua.evaluation.bleu_matrix import MatrixResult
from interlingua.model_files import folder as model_folder
from interlingua.model_files.checkpoint import Checkpoint, build_payload, read_checkpoint, save_atomic
from interlingua.model_files.export import export_folder
from interlingua.model_files.load import load_model
from interlingua.modules.model import TranslationNetwork
from interlingua.training.extension import extend_checkpoint

# The session's trained model (conftest) reads and writes en and de.
EN = ["A man is riding a bicycle down the street.", "Two dogs are playing in the snow.",
      "A woman sings on a stage.", ""]

LANGS = ["xa", "xb"]
WORDS = list("abcdefgh")
TEXTS = ["aa ab ac", "ad ae af ag ah", "ab ab", "ah ag af ae ad ac ab aa", ""]
"""`xa` sentences for the synthetic models (their words are `x` + letter)."""

# One model per combination of kinds that matters to the format: tied weights, shared modules,
# learned positions, no bridge, NTDV, mixed kinds. Untrained (seeded) weights translate as
# deterministically as trained ones, and faster to make.
KINDS = {
    "bilstm-attention-lstm_feed": {"decoder": {"type": "lstm", "hidden": 32, "layers": 1, "input_feed": True}},
    "bilstm-none-lstm": {"bridge": {"type": "none"}},
    "bilstm-ntdv-lstm": {"bridge": {"type": "ntdv", "heads": 2, "hidden": 16}},
    "transformer-attention-transformer_tied": {
        "encoder": {"type": "transformer", "layers": 1, "heads": 2, "ff_dim": 32, "positions": "learned"},
        "decoder": {"type": "transformer", "layers": 1, "heads": 2, "ff_dim": 32, "tie_embeddings": True}},
    "bilstm-attention-transformer": {"decoder": {"type": "transformer", "layers": 1, "heads": 2, "ff_dim": 32}},
    "shared_transformer-none-transformer_tied": {
        "shared": True, "tag_position": "decoder_start", "bridge": {"type": "none"},
        "encoder": {"type": "transformer", "layers": 1, "heads": 2, "ff_dim": 32},
        "decoder": {"type": "transformer", "layers": 1, "heads": 2, "ff_dim": 32, "tie_embeddings": True}},
}


def synthetic_corpus(root: Path, langs: list[str]) -> Path:
    rng = random.Random(3)
    texts = {}
    for split, n in (("train", 200), ("val", 10)):
        sents = [[rng.choice(WORDS) for _ in range(rng.randint(2, 6))] for _ in range(n)]
        texts[split] = {lang: [" ".join(lang[1] + w for w in s) for s in sents] for lang in langs}
    return write_multiway_corpus(root, "synthetic", texts)


def synthetic_checkpoint(root: Path, model: dict, name: str = "model.pt") -> Path:
    """A seeded, untrained xa<->xb model of the given model section, saved as a .pt checkpoint."""
    corpus = synthetic_corpus(root, LANGS)
    base = {"embed_dim": 32, "encoder": {"type": "bilstm", "hidden": 32, "layers": 1},
            "bridge": {"type": "attention", "heads": 3, "hidden": 16},
            "decoder": {"type": "lstm", "hidden": 32, "layers": 1}, "dropout": 0.0}
    cfg = parse_config({**tiny_config(corpus, root / "run"), "model": {**base, **model},
                        "preprocess": {"vocab_size": 60, "joint_vocab": bool(model.get("shared")), "max_len": 20},
                        "directions": {"mode": "explicit", "pairs": [["xa", "xb"], ["xb", "xa"]]}})
    tags = [language_tag(lang) for lang in LANGS] if cfg.model.shared else []
    if cfg.model.shared:
        joint = Vocab.train([f"{lang[1]}{w}" for lang in LANGS for w in WORDS] * 5, 40, user_symbols=tags, threads=1)
        vocabs = {lang: joint for lang in LANGS}
    else:
        vocabs = {lang: Vocab.train([f"{lang[1]}{w}" for w in WORDS] * 5, 20, threads=1) for lang in LANGS}
    torch.manual_seed(11)
    net = TranslationNetwork(cfg.model, {k: len(v) for k, v in vocabs.items()}, LANGS, LANGS)
    with torch.no_grad():  # untrained decoders would often end at once: let them write up to max_len
        for decoder in net.decoders.values():
            decoder.generator.bias[:EOS + 1] -= 5.0
    path = root / name
    save_atomic(build_payload(cfg, net, vocabs, [("xa", "xb"), ("xb", "xa")]), path)
    return path


def same_outputs(a: interlingua.Model, b: interlingua.Model, texts: list[str], src: str, tgt: str) -> None:
    """Byte-identical translations (greedy and beam) and identical sentence vectors."""
    for beam in (1, 3):
        first = a.translate(texts, src, tgt, beam=beam, max_len=12)
        assert first == b.translate(texts, src, tgt, beam=beam, max_len=12), beam
        assert any(first)
    assert np.array_equal(a.encode(texts, src), b.encode(texts, src))
    if a.heads is not None:
        assert np.array_equal(a.encode(texts, src, pooling="heads"), b.encode(texts, src, pooling="heads"))


def no_unpickling(monkeypatch) -> None:
    """Any torch.load or unpickling from here on fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model folder was unpickled")

    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)


def cli(argv: list[str], capsys, monkeypatch, stdin: str = "") -> tuple[int, str, list[str]]:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")), encoding="utf-8"))
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, [line for line in err.splitlines() if line.strip()]


def one_error(code: int, lines: list[str], *needles: str) -> None:
    assert code == 2, lines
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and not any("Traceback" in line for line in lines), lines
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])


# -- the trained model: through the command line -----------------------------------------------

@pytest.fixture(scope="module")
def exported(trained_model, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("export") / "model"
    assert main(["export", "folder", str(trained_model), str(out)]) == 0
    return out


def test_folder_holds_the_documented_files(exported, trained_model):
    meta = json.loads((exported / "config.json").read_text())
    assert sorted(p.name for p in exported.iterdir()) == ["README.md", "config.json", "de.spm.model", "en.spm.model",
                                                          "model.safetensors"]
    assert meta["format"] == "interlingua-model-folder" and meta["version"] == 1
    assert meta["tokenizers"] == {"de": "de.spm.model", "en": "en.spm.model"}
    payload = read_checkpoint(trained_model)
    assert meta["config"] == payload["config"] and meta["directions"] == payload["directions"]
    assert (meta["encoder_langs"], meta["decoder_langs"]) == (payload["encoder_langs"], payload["decoder_langs"])
    assert "vocab_offsets" not in meta
    assert (exported / "en.spm.model").read_bytes() == payload["vocabs"]["en"]
    with safe_open(exported / "model.safetensors", "pt") as f:
        assert sorted(f.keys()) == sorted(payload["model"])
        assert all(torch.equal(f.get_tensor(k), payload["model"][k]) for k in sorted(f.keys()))
    assert (exported / "model.safetensors").stat().st_mode & 0o777 == 0o666 & ~_umask()  # as any file written


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def test_folder_translates_and_embeds_like_the_checkpoint_without_unpickling(exported, trained_model, monkeypatch):
    from_pt = interlingua.load(trained_model, "cpu")
    no_unpickling(monkeypatch)
    from_folder = interlingua.load(exported, "cpu")
    again = interlingua.Model.load(exported, "cpu")
    assert from_folder.languages == from_pt.languages
    assert from_folder.step == from_pt.step == 600
    for src, tgt in (("en", "de"), ("de", "en")):
        texts = EN if src == "en" else from_pt.translate(EN, "en", "de")
        same_outputs(from_pt, from_folder, texts, src, tgt)
    assert again.translate(EN, "en", "de", beam=5) == from_pt.translate(EN, "en", "de", beam=5)


def test_cli_translate_and_embed_read_the_folder(exported, trained_model, capsys, monkeypatch, tmp_path):
    text = "".join(line + "\n" for line in EN)
    results = {}
    for name, model in (("pt", trained_model), ("folder", exported)):
        code, out, lines = cli(["translate", "--model", str(model), "--src", "en", "--tgt", "de", "--beam", "4",
                                "--device", "cpu"], capsys, monkeypatch, stdin=text)
        assert code == 0, lines
        code, _, lines = cli(["embed", "--model", str(model), "--lang", "en", "-o", str(tmp_path / f"{name}.npy"),
                              "--device", "cpu"], capsys, monkeypatch, stdin=text)
        assert code == 0, lines
        results[name] = out
    assert results["pt"] == results["folder"] and len(results["pt"].splitlines()) == len(EN)
    assert np.array_equal(np.load(tmp_path / "pt.npy"), np.load(tmp_path / "folder.npy"))


def test_serve_loads_the_folder(exported, trained_model, capsys, monkeypatch):
    import uvicorn
    # newer Starlette prefers httpx2 for its test client; httpx works with every version
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
        from fastapi.testclient import TestClient
    answers = {}

    def run(server, sockets=None):  # instead of serving: ask the app once, then return
        with TestClient(server.config.app) as client:
            answers["translate"] = client.post("/translate", json={"texts": EN[:2], "src": "en", "tgt": "de"}).json()
            answers["health"] = client.get("/health").json()

    monkeypatch.setattr(uvicorn.Server, "run", run)
    no_unpickling(monkeypatch)
    code, _, lines = cli(["serve", "--model", str(exported), "--port", "0", "--device", "cpu"], capsys, monkeypatch)
    assert code == 0, lines
    monkeypatch.undo()
    assert answers["translate"]["translations"] == interlingua.load(trained_model, "cpu").translate(EN[:2], "en", "de")
    assert answers["health"]["model"] == str(exported)


def test_model_card_reports_what_was_recorded(exported, trained_model):
    card = (exported / "README.md").read_text()
    history = Checkpoint.read(trained_model).training.history
    dev = next(v for v in history if v.step == 600)
    assert "# tiny" in card
    assert "- Reads (encoders): de, en" in card and "- Writes (decoders): de, en" in card
    assert "de->de (copy)" in card and "en->de" in card and "de->en" in card
    assert "- Zero-shot directions (an encoder and a decoder never trained together): none" in card
    assert "`bilstm`" in card and "`attention` bridge" in card and "`lstm`" in card
    params = sum(p.numel() for p in load_model(trained_model).network.parameters())
    assert f"{params:,} parameters" in card
    assert "Steps: 600 of 600 planned" in card
    assert str(parse_config(read_checkpoint(trained_model)["config"]).corpus) in card
    assert "the first 200 training lines" in card
    assert "As recorded at step 600 (the checkpoint's training state)" in card
    for name, r in dev.directions.items():
        assert f"| {name} | {'zero-shot' if r.zero_shot else 'trained'} | {r.bleu:.2f} | {r.chrf:.2f} |" in card
    assert f"Mean over the trained directions: {dev.mean_bleu:.2f}." in card
    assert "## Test BLEU\n\nNot recorded" in card


def test_an_untrained_copy_of_a_folder_reports_nothing_of_the_trained_weights(exported, tmp_path):
    """Fresh weights have no training step, dev BLEU or origin: the card of their folder says none."""
    fresh = interlingua.load(exported, "cpu").untrained_like(seed=1)
    card = (fresh.save(tmp_path / "fresh") / "README.md").read_text()
    assert "As recorded at step 600" not in card and "Exported from" not in card
    assert "Steps: 600 of 600 planned" not in card


# -- every kind of model, tied weights, added languages: from Python ---------------------------

@pytest.fixture(scope="module", params=sorted(KINDS))
def kind_checkpoint(request, tmp_path_factory) -> Path:
    return synthetic_checkpoint(tmp_path_factory.mktemp(request.param), KINDS[request.param])


@pytest.fixture(scope="module")
def plain_checkpoint(tmp_path_factory) -> Path:
    """One synthetic model (per-language BiLSTM encoders, attention bridge, LSTM decoders), no training state."""
    return synthetic_checkpoint(tmp_path_factory.mktemp("plain"), {})


def test_every_kind_round_trips_exactly(kind_checkpoint, tmp_path, monkeypatch):
    model = interlingua.load(kind_checkpoint, "cpu")
    assert model.save(tmp_path / "folder") == tmp_path / "folder"
    no_unpickling(monkeypatch)
    back = interlingua.load(tmp_path / "folder", "cpu")
    same_outputs(model, back, TEXTS, "xa", "xb")
    assert back.fingerprint == model.fingerprint  # the same weights: names, dtypes, shapes and values
    network = load_model(tmp_path / "folder").network
    weights = network.state_dict()
    if back.config.model.decoder.type == "transformer" and back.config.model.decoder.tie_embeddings:
        for decoder in network.decoders.values():  # still one tensor, stored once
            assert decoder.generator.weight is decoder.embedding.embed.weight
        with safe_open(tmp_path / "folder" / "model.safetensors", "pt") as f:
            assert len(list(f.keys())) < len(weights)
    if back.config.model.shared:
        meta = json.loads((tmp_path / "folder" / "config.json").read_text())
        assert meta["tokenizers"] == {"xa": "joint.spm.model", "xb": "joint.spm.model"}


def test_an_added_language_round_trips(tmp_path, monkeypatch):
    for sub in ("old", "new"):
        (tmp_path / sub).mkdir()
    old = synthetic_checkpoint(tmp_path / "old", KINDS["shared_transformer-none-transformer_tied"])
    corpus = synthetic_corpus(tmp_path / "new", [*LANGS, "xn"])
    ext = extend_checkpoint(old, "xn", tmp_path / "extended.pt", corpus=corpus, vocab_size=20, seed=1).out
    assert main(["export", "folder", str(ext), str(tmp_path / "folder")]) == 0
    meta = json.loads((tmp_path / "folder" / "config.json").read_text())
    assert meta["vocab_offsets"] == read_checkpoint(ext)["vocab_offsets"] and meta["vocab_offsets"]["xn"] > 0
    assert meta["tokenizers"]["xn"] == "xn.spm.model" and meta["tokenizers"]["xa"] == "joint.spm.model"
    assert meta["extended"][0]["lang"] == "xn"
    assert "Language added after training: xn" in (tmp_path / "folder" / "README.md").read_text()
    pt = interlingua.load(ext, "cpu")
    rows = load_model(ext).network.output_rows.keys()
    no_unpickling(monkeypatch)
    folder = interlingua.load(tmp_path / "folder", "cpu")
    same_outputs(pt, folder, TEXTS, "xa", "xn")
    same_outputs(pt, folder, ["na nb nc", "nh ng"], "xn", "xb")
    assert load_model(tmp_path / "folder").network.output_rows.keys() == rows


def test_exporting_a_folder_again_gives_the_same_folder(kind_checkpoint, tmp_path):
    first = export_folder(kind_checkpoint, tmp_path / "one")
    files = {p.name: p.read_bytes() for p in first.iterdir()}
    second = export_folder(first, tmp_path / "two")
    assert {p.name: p.read_bytes() for p in second.iterdir()} == files
    assert export_folder(first, first) == first  # in place: read whole, then replaced
    assert {p.name: p.read_bytes() for p in first.iterdir()} == files


# -- the model card's sources -------------------------------------------------------------------

def write_results(folder: Path, stem: str, bleu: float, title: str) -> Path:
    """An `evaluate bleu` result pair (.json, .md), as `write_matrix` writes it, without the plots."""
    res = MatrixResult("test_2016_flickr", ["xa", "xb"], {"xa": {"xb": bleu}, "xb": {"xa": bleu + 1}},
                       {"xa": {"xb": 1.0}, "xb": {"xa": 1.0}}, [], 1, None, signature="sig",
                       bleu_cased={"xa": {"xb": bleu - 1}, "xb": {"xa": bleu}})
    folder.mkdir(exist_ok=True)
    (folder / f"{stem}.md").write_text(res.to_markdown(title))
    (folder / f"{stem}.json").write_text(json.dumps(res.to_json()))
    return folder / f"{stem}.json"


def test_card_test_bleu_only_from_results_of_this_checkpoint(plain_checkpoint, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    ckpt = run / "best.pt"
    shutil.copyfile(plain_checkpoint, ckpt)
    old = write_results(run / "eval", "bleu_old_beam1", 11.0, "best.pt on old")
    os.utime(old, (ckpt.stat().st_mtime - 100, ckpt.stat().st_mtime - 100))  # scored before these weights
    write_results(run / "eval", "bleu_other_beam1", 22.0, "last.pt on test_2016_flickr")
    write_results(run / "eval", "bleu_test_2016_flickr_beam1", 33.0, "best.pt on test_2016_flickr")
    card = (export_folder(ckpt, tmp_path / "folder") / "README.md").read_text()
    assert ("From `eval/bleu_test_2016_flickr_beam1.json` beside the checkpoint: "
            "split `test_2016_flickr`, beam 1") in card
    assert "| xa-xb | trained | 33.00 | 32.00 |" in card and "| xb-xa | trained | 34.00 | 33.00 |" in card
    assert "11.00" not in card and "22.00" not in card
    # no training state (a translation-only checkpoint): nothing is made up
    assert "Steps: not recorded" in card and "## Dev BLEU\n\nNot recorded" in card


def test_card_dev_bleu_from_metrics_jsonl_when_the_state_lacks_it(plain_checkpoint, tmp_path):
    payload = read_checkpoint(plain_checkpoint)
    payload["training"] = {"step": 40, "max_steps": 50, "elapsed": 90.0, "best_bleu": None, "history": "[]"}
    (tmp_path / "run").mkdir()
    save_atomic(payload, tmp_path / "run" / "last.pt")
    records = [{"type": "valid", "step": 20, "mean_bleu": 1.0, "directions": {"xa-xb": {"bleu": 1.0, "chrf": 2.0,
                                                                                       "zero_shot": False}}},
               {"type": "valid", "step": 40, "mean_bleu": 7.5, "directions": {"xa-xb": {"bleu": 7.5, "chrf": 30.25,
                                                                                       "zero_shot": False}}}]
    (tmp_path / "run" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    card = (export_folder(tmp_path / "run" / "last.pt", tmp_path / "folder") / "README.md").read_text()
    assert "As recorded at step 40 (metrics.jsonl beside the checkpoint)" in card
    assert "| xa-xb | trained | 7.50 | 30.25 |" in card and "Mean over the trained directions: 7.50." in card
    assert "Steps: 40 of 50 planned, 90 s of training" in card


# -- broken folders: one error naming the file, also through the command line -------------------

@pytest.fixture
def folder(plain_checkpoint, tmp_path) -> Path:
    return export_folder(plain_checkpoint, tmp_path / "folder")


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:1000])


BREAKAGES = {
    "truncated weights": ("model.safetensors", _truncate, "not a readable safetensors file"),
    "garbage weights": ("model.safetensors", lambda p: p.write_bytes(b"\x00hello" * 100), "not a readable safetensors"),
    "missing weights": ("model.safetensors", Path.unlink, "is missing: it holds the model's weights"),
    "missing config": ("config.json", Path.unlink, "config.json is missing"),
    "corrupt config": ("config.json", _truncate, "is not readable JSON"),
    "missing tokenizer": ("xb.spm.model", Path.unlink, "is missing: it is the sentencepiece model of 'xb'"),
    "corrupt tokenizer": ("xa.spm.model", lambda p: p.write_bytes(b"garbage" * 10), "not a readable sentencepiece"),
    "empty tokenizer": ("xa.spm.model", lambda p: p.write_bytes(b""), "not a readable sentencepiece"),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_a_broken_folder_is_one_clear_error(folder, breakage, capsys, monkeypatch):
    name, damage, needle = BREAKAGES[breakage]
    damage(folder / name)
    shown = folder if breakage == "missing config" else folder / name
    with pytest.raises(CheckpointError) as info:
        interlingua.load(folder, "cpu")
    assert str(shown) in str(info.value) and "\n" not in str(info.value)
    no_unpickling(monkeypatch)
    for argv in (["translate", "--model", str(folder), "--src", "xa", "--tgt", "xb", "--device", "cpu"],
                 ["export", "folder", str(folder), str(folder.parent / "again")]):
        code, _, lines = cli(argv, capsys, monkeypatch, stdin="aa ab\n")
        one_error(code, lines, str(shown), needle)


def test_weights_of_another_model_and_newer_formats_are_refused(folder, tmp_path):
    other = synthetic_checkpoint(tmp_path, {"embed_dim": 16}, "other.pt")
    export_folder(other, tmp_path / "other")
    shutil.copyfile(tmp_path / "other" / "model.safetensors", folder / "model.safetensors")
    with pytest.raises(CheckpointError, match="does not match config.json"):
        interlingua.load(folder, "cpu")
    meta = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**meta, "version": 99}))
    with pytest.raises(CheckpointError, match="newer interlingua"):
        interlingua.load(folder, "cpu")
    (folder / "config.json").write_text(json.dumps({**meta, "tokenizers": {"xa": "../xa.spm.model"}}))
    with pytest.raises(CheckpointError, match="outside the folder"):
        interlingua.load(folder, "cpu")


# -- damage nothing else notices: the header's dtypes, non-finite weights, swapped files -------------

@pytest.fixture
def shipped(exported, tmp_path) -> Path:
    """A copy of the trained model's folder, to damage."""
    return Path(shutil.copytree(exported, tmp_path / "shipped"))


def _header(path: Path) -> tuple[int, dict]:
    """(the header's length, the header) of a safetensors file."""
    data = path.read_bytes()
    size = int.from_bytes(data[:8], "little")
    return size, json.loads(data[8:8 + size])


def _refused(folder: Path, capsys, monkeypatch, *needles: str) -> None:
    """Loading `folder` is one `CheckpointError` holding `needles`, and one line from the command line."""
    with pytest.raises(CheckpointError) as info:
        interlingua.load(folder, "cpu")
    assert "\n" not in str(info.value)
    for needle in needles:
        assert needle in str(info.value), (needle, str(info.value))
    code, _, lines = cli(["translate", "--model", str(folder), "--src", "en", "--tgt", "de", "--device", "cpu"],
                         capsys, monkeypatch, stdin="a dog runs .\n")
    one_error(code, lines, *needles)


def test_config_json_records_the_sha256_of_every_other_file(exported):
    recorded = json.loads((exported / "config.json").read_text())["sha256"]
    assert recorded == {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                        for p in exported.iterdir() if p.name != "config.json"}


def test_a_dtype_changed_in_the_header_is_refused_naming_the_tensor(shipped, capsys, monkeypatch):
    path = shipped / "model.safetensors"
    size, header = _header(path)
    name = next(k for k, v in header.items() if k != "__metadata__" and v["dtype"] == "F32")
    header[name]["dtype"] = "I32"  # the same 4 bytes per value: safetensors reads it without complaint
    text = json.dumps(header, separators=(",", ":")).encode()
    data = path.read_bytes()
    path.write_bytes(len(text).to_bytes(8, "little") + text + data[8 + size:])
    _refused(shipped, capsys, monkeypatch, str(path), f"'{name}'", "int32", "float32")


def test_non_finite_weights_are_refused_naming_the_tensor(shipped, capsys, monkeypatch):
    path = shipped / "model.safetensors"
    size, header = _header(path)
    name = sorted(k for k in header if k != "__metadata__")[-1]
    start, _ = header[name]["data_offsets"]
    data = bytearray(path.read_bytes())
    data[8 + size + start: 8 + size + start + 8] = np.array([np.nan, np.inf], dtype="<f4").tobytes()
    path.write_bytes(bytes(data))
    _refused(shipped, capsys, monkeypatch, str(path), f"'{name}'", "2 non-finite")
    # recording the damaged file's own SHA-256 does not make it loadable
    meta = json.loads((shipped / "config.json").read_text())
    meta["sha256"]["model.safetensors"] = hashlib.sha256(bytes(data)).hexdigest()
    (shipped / "config.json").write_text(json.dumps(meta))
    _refused(shipped, capsys, monkeypatch, str(path), f"'{name}'", "non-finite")


def test_another_languages_tokenizer_is_refused_naming_the_file(shipped, capsys, monkeypatch):
    shutil.copyfile(shipped / "en.spm.model", shipped / "de.spm.model")
    _refused(shipped, capsys, monkeypatch, str(shipped / "de.spm.model"), "SHA-256")


def test_every_recorded_file_is_verified(shipped, capsys, monkeypatch):
    with (shipped / "README.md").open("a") as f:
        f.write("\nBest model ever.\n")
    _refused(shipped, capsys, monkeypatch, str(shipped / "README.md"), "SHA-256")


def test_a_folder_exported_before_checksums_still_loads(shipped, exported, caplog):
    meta = json.loads((shipped / "config.json").read_text())
    del meta["sha256"]
    (shipped / "config.json").write_text(json.dumps(meta))
    with caplog.at_level("INFO"):
        model = interlingua.load(shipped, "cpu")
    assert "records no SHA-256" in caplog.text
    assert model.translate(EN, "en", "de") == interlingua.load(exported, "cpu").translate(EN, "en", "de")


def test_a_checkpoint_with_non_finite_weights_is_refused(trained_model, tmp_path, capsys, monkeypatch):
    payload = read_checkpoint(trained_model)
    name = sorted(payload["model"])[0]
    payload["model"][name] = payload["model"][name].clone()
    payload["model"][name].view(-1)[0] = float("nan")
    save_atomic(payload, tmp_path / "nan.pt")
    with pytest.raises(CheckpointError, match=f"{name}' holds 1 non-finite"):
        interlingua.load(tmp_path / "nan.pt", "cpu")


def test_a_run_folder_is_not_a_model_folder(trained_model, capsys, monkeypatch):
    code, _, lines = cli(["translate", "--model", str(trained_model.parent), "--src", "en", "--tgt", "de"], capsys,
                         monkeypatch, stdin="a dog .\n")
    one_error(code, lines, "config.json", "give one of its checkpoints", str(trained_model.parent / "best.pt"))
    with pytest.raises(CheckpointError, match="is a folder: this needs a .pt checkpoint"):
        read_checkpoint(trained_model.parent)


# -- where an export may write, whole or not at all ---------------------------------------------

def test_export_never_replaces_what_it_did_not_write(plain_checkpoint, tmp_path, capsys, monkeypatch):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    code, _, lines = cli(["export", "folder", str(plain_checkpoint), str(busy)], capsys, monkeypatch)
    one_error(code, lines, str(busy), "is not empty")
    assert [p.name for p in busy.iterdir()] == ["notes.txt"]
    a_file = tmp_path / "file"
    a_file.write_text("x")
    code, _, lines = cli(["export", "folder", str(plain_checkpoint), str(a_file)], capsys, monkeypatch)
    one_error(code, lines, "is not a folder")

    out = export_folder(plain_checkpoint, tmp_path / "out")
    (out / "README.md").write_text("stale")
    assert export_folder(plain_checkpoint, out) == out  # a previous export is replaced whole
    assert (out / "README.md").read_text().startswith("# tiny")
    (out / "LICENSE").write_text("mine")
    with pytest.raises(InterlinguaError, match="also holds LICENSE"):
        export_folder(plain_checkpoint, out)
    empty = tmp_path / "empty"
    empty.mkdir()
    export_folder(plain_checkpoint, empty)
    assert (empty / "config.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_an_interrupted_export_leaves_the_previous_one(plain_checkpoint, tmp_path, monkeypatch):
    out = export_folder(plain_checkpoint, tmp_path / "out")
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def boom(meta: dict) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(model_folder, "render_card", boom)
    with pytest.raises(KeyboardInterrupt):
        export_folder(plain_checkpoint, out)
    with pytest.raises(KeyboardInterrupt):
        export_folder(plain_checkpoint, tmp_path / "new")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary folder left, no "new"
