"""What training does when the world gets in the way: a full disk at a checkpoint, empty dev files.

A full disk is one `error:` line and exit 1 (no traceback), the checkpoints of the last good save
stay whole, and the run resumes from them; metrics.jsonl is strict JSON whatever happens (no NaN).
"""
from __future__ import annotations

import errno
import gzip
import json
import logging
from pathlib import Path

import pytest
import torch
import yaml
from conftest import MULTI30K, tiny_config, write_multiway_corpus

from interlingua.cli import main
from interlingua.model_files.checkpoint import Checkpoint
from interlingua.training.metrics import MetricsLog

TORCH_ENOSPC = ("[enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing file data/3: "
                "file write failed")


def _strict(line: str) -> dict:
    """A metrics line read by a strict JSON reader: NaN and Infinity are errors."""
    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in metrics.jsonl: {line}")
    return json.loads(line, parse_constant=refuse)


def _records(work: Path) -> list[dict]:
    return [_strict(line) for line in (work / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]


def _write_config(corpus: Path, work: Path, path: Path, **sections) -> Path:
    cfg = tiny_config(corpus, work, **{"train": {"max_steps": 4, "valid_every": 2, "log_every": 2}, **sections})
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def _errors(capsys) -> tuple[list[str], str]:
    err = capsys.readouterr().err
    return [line for line in err.splitlines() if line.startswith("error")], err


# -- a full disk ---------------------------------------------------------------------------

def _torch_save_fails(obj, f):
    """torch.save writing to a full disk: torch reports it as a RuntimeError."""
    f.write(b"PK\x03\x04 part of a checkpoint")
    raise RuntimeError(TORCH_ENOSPC)


def _write_fails(obj, f):
    """The file's own write failing with ENOSPC (and no file name)."""
    f.write(b"PK\x03\x04 part of a checkpoint")
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("failing_save", [_torch_save_fails, _write_fails], ids=["torch-runtime-error", "oserror"])
def test_a_full_disk_at_a_checkpoint_is_one_error_line(failing_save, multi30k_corpus, tmp_path, capsys, monkeypatch):
    work = tmp_path / "run"
    cfg = _write_config(multi30k_corpus, work, tmp_path / "cfg.yaml")
    assert main(["train", str(cfg)]) == 0
    capsys.readouterr()
    before = {name: (work / name).read_bytes() for name in ("best.pt", "last.pt")}

    with monkeypatch.context() as m:
        m.setattr(torch, "save", failing_save)
        code = main(["train", str(cfg), "--resume", "--set", "train.max_steps=6"])
    errors, err = _errors(capsys)
    assert code == 1, err[-3000:]
    assert "Traceback" not in err
    assert len(errors) == 1 and "no space left on device" in errors[0].lower(), errors
    assert str(work / "best.pt") in errors[0] or str(work / "last.pt") in errors[0], errors
    assert {name: (work / name).read_bytes() for name in before} == before  # the previous checkpoints, whole
    assert Checkpoint.read(work / "last.pt").training.step == 4
    assert not [p.name for p in work.iterdir() if p.name.endswith(".tmp")]

    # A kill mid-append leaves a cut-off line; the resumed run drops it with the orphan validation line.
    with open(work / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write('{"type": "train", "step": 6, "lo')
    assert main(["train", str(cfg), "--resume", "--set", "train.max_steps=6"]) == 0
    steps = [(r["type"], r["step"]) for r in _records(work)]
    assert steps == [("train", 2), ("valid", 2), ("train", 4), ("valid", 4), ("train", 6), ("valid", 6)]


def test_metrics_lines_are_strict_json():
    """A diverged loss is logged as null, not NaN."""
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        log = MetricsLog(Path(folder))
        log.append({"type": "train", "step": 1, "loss": float("nan"), "lr": 0.1,
                    "nested": {"x": [float("inf"), 1.5]}})
        assert log.records() == [{"type": "train", "step": 1, "loss": None, "lr": 0.1, "nested": {"x": [None, 1.5]}}]
        _strict((Path(folder) / "metrics.jsonl").read_text().strip())


# -- empty dev sets ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def train_lines() -> dict[str, list[str]]:
    if not (MULTI30K / "train.en.gz").is_file():
        pytest.skip("../shared/data/multi30k is not available")
    return {lang: gzip.open(MULTI30K / f"train.{lang}.gz", "rt", encoding="utf-8").read().splitlines()[:300]
            for lang in ("en", "de")}


def test_an_empty_dev_file_is_refused_before_training(train_lines, tmp_path, capsys):
    corpus = write_multiway_corpus(tmp_path, "small", {"train": train_lines, "val": {"en": [], "de": []}})
    work = tmp_path / "run"
    code = main(["train", str(_write_config(corpus, work, tmp_path / "cfg.yaml"))])
    errors, err = _errors(capsys)
    assert code == 2 and len(errors) == 1, err[-3000:]
    assert "empty dev file" in errors[0]
    assert str(tmp_path / "val.en") in errors[0] and str(tmp_path / "val.de") in errors[0]
    assert not (work / "last.pt").exists() and not (work / "metrics.jsonl").exists()


def test_a_direction_without_dev_sentences_is_warned_about_once_and_logged_as_null(train_lines, tmp_path, capsys,
                                                                                     caplog):
    """Dev lines whose German side is blank give en->de no dev pair: a warning, null BLEU, never NaN."""
    val = {"en": train_lines["en"][:20], "de": [""] * 20}
    corpus = write_multiway_corpus(tmp_path, "small", {"train": train_lines, "val": val})
    work = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger="interlingua"):
        assert main(["train", str(_write_config(corpus, work, tmp_path / "cfg.yaml"))]) == 0
    warned = [r.getMessage() for r in caplog.records if "no sentence pair" in r.getMessage()]
    assert len(warned) == 1 and "en->de" in warned[0] and "null" in warned[0]
    valid = [r for r in _records(work) if r["type"] == "valid"]
    assert [r["step"] for r in valid] == [2, 4]
    assert all(r["mean_bleu"] is None and r["directions"] == {} for r in valid)
    assert (work / "best.pt").exists()  # nothing to select on: the last checkpoint is also the best
    assert Checkpoint.read(work / "best.pt").training.step == 4
    out = capsys.readouterr()
    assert "step 4: dev mean BLEU n/a" in out.out + out.err
