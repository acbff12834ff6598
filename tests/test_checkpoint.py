import shutil

import pytest
import torch

from interlingua.config import parse_config
from interlingua.errors import CheckpointError, ConfigError
from interlingua.inference.translator import Translator
from interlingua.training.checkpoint import load_model, read_checkpoint
from interlingua.training.trainer import Trainer

from conftest import tiny_config


def test_round_trip_translates_identically(trained_model, tmp_path):
    copy = tmp_path / "copy.pt"
    shutil.copyfile(trained_model, copy)
    a = Translator(trained_model).translate(["a man is riding a bike ."], "en", "de")
    b = Translator(copy).translate(["a man is riding a bike ."], "en", "de")
    assert a == b and a[0]
    loaded = load_model(copy)
    assert loaded.config.model.bridge.heads == 4 and ("en", "de") in loaded.directions


def test_missing_and_corrupt_checkpoints(trained_model, tmp_path):
    with pytest.raises(CheckpointError, match="not found"):
        load_model(tmp_path / "none.pt")
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(trained_model.read_bytes()[:5000])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_model(truncated)
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\x00hello" * 100)
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_model(garbage)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    with pytest.raises(CheckpointError, match="not an interlingua checkpoint"):
        load_model(foreign)


def _params(path):
    return read_checkpoint(path)["model"]


def test_resume_continues_exactly_like_an_uninterrupted_run(multi30k_corpus, tmp_path):
    base = dict(directions={"mode": "explicit", "pairs": [["en", "de"], ["de", "en"]]},
                model={"dropout": 0.3}, train={"valid_every": 6, "max_steps": 12, "batch_size": 8,
                                              "softmax_sample": 50})  # its draws must resume too
    straight = parse_config(tiny_config(multi30k_corpus, tmp_path / "straight", **base))
    Trainer(straight).train()

    first = tiny_config(multi30k_corpus, tmp_path / "resumed", **base)
    first["train"] = {**first["train"], "max_steps": 6}
    Trainer(parse_config(first)).train()
    with pytest.raises(ConfigError, match="use --resume"):
        Trainer(parse_config(first))
    second = tiny_config(multi30k_corpus, tmp_path / "resumed", **base)
    Trainer(parse_config(second), resume=True).train()

    a, b = _params(tmp_path / "straight" / "last.pt"), _params(tmp_path / "resumed" / "last.pt")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    steps = [line for line in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == len((tmp_path / "straight" / "metrics.jsonl").read_text().splitlines())


def test_resume_refuses_a_different_model(multi30k_corpus, tmp_path):
    cfg = tiny_config(multi30k_corpus, tmp_path / "run", train={"max_steps": 2})
    Trainer(parse_config(cfg)).train()
    cfg["model"] = {**cfg["model"], "embed_dim": 32}
    with pytest.raises(ConfigError, match="section 'model' differs"):
        Trainer(parse_config(cfg), resume=True)


def test_interrupted_write_keeps_previous_checkpoint(trained_model, tmp_path, monkeypatch):
    from interlingua.training import checkpoint as ck
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
