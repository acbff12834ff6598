import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import tiny_config

from interlingua.config import parse_config
from interlingua.errors import CheckpointError, ConfigError
from interlingua.inference.api import load
from interlingua.model_files.checkpoint import Checkpoint, TrainingState, load_checkpoint, read_checkpoint
from interlingua.records import Validation
from interlingua.training.build import build_run
from interlingua.training.trainer import train


def test_round_trip_translates_identically(trained_model, tmp_path):
    copy = tmp_path / "copy.pt"
    shutil.copyfile(trained_model, copy)
    a = load(trained_model).translate(["a man is riding a bike ."], "en", "de")
    b = load(copy).translate(["a man is riding a bike ."], "en", "de")
    assert a == b and a[0]
    loaded = load_checkpoint(copy)
    assert loaded.config.model.bridge.heads == 4 and ("en", "de") in loaded.directions


class _NotATensor:
    """An object torch.save pickles and a weights-only load refuses."""


def test_missing_and_corrupt_checkpoints(trained_model, tmp_path):
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "none.pt")
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(trained_model.read_bytes()[:5000])
    with pytest.raises(CheckpointError, match="truncated or corrupt.*no complete PyTorch zip archive"):
        load_checkpoint(truncated)
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\x00hello" * 100)
    with pytest.raises(CheckpointError, match="truncated or corrupt.*no complete PyTorch zip archive"):
        load_checkpoint(garbage)
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    with pytest.raises(CheckpointError, match="the file is empty"):
        load_checkpoint(empty)
    pickled = tmp_path / "pickled.pt"  # torch's own advice here would be to unpickle it (weights_only=False)
    torch.save({"object": _NotATensor()}, pickled)
    with pytest.raises(CheckpointError, match="Python objects besides tensors") as refused:
        load_checkpoint(pickled)
    assert "weights_only" not in str(refused.value)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    with pytest.raises(CheckpointError, match="not an interlingua checkpoint"):
        load_checkpoint(foreign)


def _params(path):
    return read_checkpoint(path)["model"]


def test_resume_continues_exactly_like_an_uninterrupted_run(multi30k_corpus, tmp_path):
    base = dict(directions={"mode": "explicit", "pairs": [["en", "de"], ["de", "en"]]},
                model={"dropout": 0.3}, train={"valid_every": 6, "max_steps": 12, "batch_size": 8,
                                              "softmax_sample": 50})  # its draws must resume too
    straight = parse_config(tiny_config(multi30k_corpus, tmp_path / "straight", **base))
    train(straight)

    first = tiny_config(multi30k_corpus, tmp_path / "resumed", **base)
    first["train"] = {**first["train"], "max_steps": 6}
    train(parse_config(first))
    with pytest.raises(ConfigError, match="use --resume"):
        build_run(parse_config(first))
    second = tiny_config(multi30k_corpus, tmp_path / "resumed", **base)
    train(parse_config(second), resume=True)

    a, b = _params(tmp_path / "straight" / "last.pt"), _params(tmp_path / "resumed" / "last.pt")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    steps = [line for line in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == len((tmp_path / "straight" / "metrics.jsonl").read_text().splitlines())


def test_resume_refuses_a_different_model(multi30k_corpus, tmp_path):
    cfg = tiny_config(multi30k_corpus, tmp_path / "run", train={"max_steps": 2})
    train(parse_config(cfg))
    cfg["model"] = {**cfg["model"], "embed_dim": 32}
    with pytest.raises(ConfigError, match="section 'model' differs"):
        build_run(parse_config(cfg), resume=True)


def test_interrupted_write_keeps_previous_checkpoint(trained_model, tmp_path, monkeypatch):
    from interlingua.model_files import checkpoint as ck
    target = tmp_path / "ckpt.pt"
    shutil.copyfile(trained_model, target)
    before = target.read_bytes()

    def boom(obj, f):
        f.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(ck.torch, "save", boom)
    with pytest.raises(KeyboardInterrupt):
        ck.save_atomic({"x": 1}, target)
    assert target.read_bytes() == before
    assert list(tmp_path.glob("*.tmp")) == []


# -- checkpoints that cannot be used: one clear error, also through the command line ------------

def _cli(argv, capsys, monkeypatch, stdin="a dog .\n"):
    import io
    import sys

    from interlingua.cli import main
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")), encoding="utf-8"))
    code = main(argv)
    err = capsys.readouterr().err
    return code, [line for line in err.splitlines() if line.strip()]


def _one_error_line(code, lines, path, needle):
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert str(path) in lines[0] and needle in lines[0] and "Traceback" not in lines[0]


def _rewritten(trained_model, dest, edit):
    payload = torch.load(trained_model, map_location="cpu", weights_only=True)
    edit(payload)
    torch.save(payload, dest)
    return dest


def test_config_that_does_not_match_the_weights(trained_model, tmp_path, capsys, monkeypatch):
    bad = _rewritten(trained_model, tmp_path / "mismatch.pt",
                     lambda p: p["config"]["model"].__setitem__("embed_dim", 32))
    with pytest.raises(CheckpointError, match="does not match its own config") as info:
        load_checkpoint(bad)
    message = str(info.value)
    assert "\n" not in message and "size mismatch" in message and str(bad) in message
    code, lines = _cli(["translate", "--model", str(bad), "--src", "en", "--tgt", "de"], capsys, monkeypatch)
    _one_error_line(code, lines, bad, "does not match its own config")


def test_newer_checkpoint_format_is_refused(trained_model, tmp_path, capsys, monkeypatch):
    from interlingua.model_files.checkpoint import VERSION
    newer = _rewritten(trained_model, tmp_path / "newer.pt", lambda p: p.__setitem__("version", VERSION + 1))
    with pytest.raises(CheckpointError,
                       match=rf"newer interlingua \(checkpoint format {VERSION + 1}, "
                             rf"this version reads up to {VERSION}\)"):
        read_checkpoint(newer)
    code, lines = _cli(["embed", "--model", str(newer), "--lang", "en", "-o", str(tmp_path / "v.npy")],
                       capsys, monkeypatch)
    _one_error_line(code, lines, newer, "newer interlingua")


@pytest.mark.parametrize("content", [b"", b"\x00hello" * 100, "truncated"], ids=["empty", "garbage", "truncated"])
def test_corrupt_checkpoint_through_the_cli(trained_model, tmp_path, capsys, monkeypatch, content):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(trained_model.read_bytes()[:5000] if content == "truncated" else content)
    for argv in (["translate", "--model", str(bad), "--src", "en", "--tgt", "de"],
                 ["embed", "--model", str(bad), "--lang", "en", "-o", str(tmp_path / "v.npy")]):
        code, lines = _cli(argv, capsys, monkeypatch)
        _one_error_line(code, lines, bad, "not a readable checkpoint (truncated or corrupt?)")


def _run_config(multi30k_corpus, tmp_path):
    import yaml
    work = tmp_path / "run"
    work.mkdir()
    cfg_path = tmp_path / "exp.yaml"
    cfg_path.write_text(yaml.safe_dump(tiny_config(multi30k_corpus, work)))
    return work, cfg_path


def test_resume_from_a_corrupt_last_checkpoint(multi30k_corpus, trained_model, tmp_path, capsys, monkeypatch):
    work, cfg_path = _run_config(multi30k_corpus, tmp_path)
    (work / "last.pt").write_bytes(trained_model.read_bytes()[:5000])
    code, lines = _cli(["train", str(cfg_path), "--resume"], capsys, monkeypatch)
    _one_error_line(code, lines, work / "last.pt", "not a readable checkpoint (truncated or corrupt?)")
    assert not (work / "data").exists()  # refused before any data preparation


def test_a_damaged_last_checkpoint_names_best_as_the_way_on(multi30k_corpus, tmp_path, capsys, monkeypatch):
    import yaml
    work = tmp_path / "run"
    cfg = tiny_config(multi30k_corpus, work, train={"max_steps": 4, "valid_every": 2})
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(cfg))
    train(parse_config(cfg))
    best_step = Checkpoint.read(work / "best.pt").training.step
    (work / "last.pt").write_bytes((work / "last.pt").read_bytes()[:5000])  # cut short, as by a failing disk
    capsys.readouterr()  # the first run's progress bars
    code, lines = _cli(["train", str(tmp_path / "exp.yaml"), "--resume"], capsys, monkeypatch)
    _one_error_line(code, lines, work / "last.pt", f"{work / 'best.pt'} holds the training state of step {best_step}: "
                                                   "copy it over last.pt to resume from that step")
    shutil.copy(work / "best.pt", work / "last.pt")  # the way on it names
    assert train(parse_config(cfg), resume=True).steps == 4


def test_resume_needs_a_checkpoint_with_training_state(multi30k_corpus, trained_model, tmp_path, capsys, monkeypatch):
    work, cfg_path = _run_config(multi30k_corpus, tmp_path)
    code, lines = _cli(["train", str(cfg_path), "--resume"], capsys, monkeypatch)
    _one_error_line(code, lines, work / "last.pt", "nothing to resume")

    _rewritten(trained_model, work / "last.pt", lambda p: p.pop("training"))
    with pytest.raises(CheckpointError, match="holds no training state to resume from"):
        build_run(parse_config(tiny_config(multi30k_corpus, work)), resume=True)
    code, lines = _cli(["train", str(cfg_path), "--resume"], capsys, monkeypatch)
    _one_error_line(code, lines, work / "last.pt", "holds no training state to resume from")


def test_resume_from_weights_that_do_not_fit_the_stored_config(multi30k_corpus, tmp_path, capsys, monkeypatch):
    cfg = tiny_config(multi30k_corpus, tmp_path / "run", train={"max_steps": 2})
    train(parse_config(cfg))
    last = tmp_path / "run" / "last.pt"
    payload = torch.load(last, map_location="cpu", weights_only=True)
    payload["config"]["model"]["embed_dim"] = 32  # the config now says 32, the weights are 48 wide
    torch.save(payload, last)
    cfg["model"] = {**cfg["model"], "embed_dim": 32}
    with pytest.raises(CheckpointError,
                       match=r"cannot resume .*last.pt: its training state does not fit this run .*size mismatch"):
        build_run(parse_config(cfg), resume=True)


LEGACY = Path(__file__).resolve().parent / "fixtures" / "legacy_attention.pt"


def test_a_training_state_reads_its_history_stored_as_json_text(tmp_path):
    """Checkpoints written before the history was a list hold it as JSON text; it reads as the list."""
    records = [{"type": "valid", "step": 4, "mean_bleu": None, "directions": {}}]  # no dev set: no mean_loss then
    old = {"step": 4, "max_steps": 8, "elapsed": 1.5, "best_bleu": None, "history": json.dumps(records),
           "log_window": {"n": 0}}
    state = TrainingState.from_payload(old, tmp_path / "old.pt")
    assert state.history == [Validation(step=4)] and state.validated
    assert state.lr_scheduler is None and state.init is None
    written = [{**records[0], "mean_loss": None}]
    assert state.to_payload()["history"] == written  # written as a list
    assert state.summary() == {"step": 4, "max_steps": 8, "elapsed_s": 1.5, "best_dev_bleu": None,
                               "dev": written[0], "init": None}
    with pytest.raises(CheckpointError, match="history is not readable"):
        TrainingState.from_payload({"history": "[not json"}, tmp_path / "old.pt")
    with pytest.raises(CheckpointError, match=r"old.pt: its training history is malformed .*'mean_bleu' is not a"):
        TrainingState.from_payload({"history": [{"step": 4, "mean_bleu": "high"}]}, tmp_path / "old.pt")


def test_a_checkpoint_round_trips_through_its_typed_form(tmp_path):
    ckpt = Checkpoint.read(LEGACY)
    assert ckpt.training is None and ckpt.vocab_offsets is None and ("en", "de") in ckpt.directions
    ckpt.training = TrainingState(step=3, max_steps=6, elapsed=2.0, best_bleu=1.5, init="base.pt",
                                  history=[Validation(step=3, mean_bleu=1.5)])
    ckpt.save(tmp_path / "again.pt")
    stored = torch.load(tmp_path / "again.pt", map_location="cpu", weights_only=True)
    assert isinstance(stored["training"]["history"], list) and stored["version"] == 1
    back = Checkpoint.read(tmp_path / "again.pt")
    assert back.training == ckpt.training
    assert (back.config, back.vocab_protos, back.encoder_langs, back.decoder_langs, back.directions) == \
        (ckpt.config, ckpt.vocab_protos, ckpt.encoder_langs, ckpt.decoder_langs, ckpt.directions)
    assert back.weights.keys() == ckpt.weights.keys()
    assert all(torch.equal(back.weights[k], v) for k, v in ckpt.weights.items())
    loaded = load_checkpoint(tmp_path / "again.pt")
    assert loaded.provenance.step == 3 and loaded.provenance.training["init"] == "base.pt"
    assert loaded.provenance.kind == "checkpoint" and loaded.provenance.source == tmp_path / "again.pt"
