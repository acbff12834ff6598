"""A temporary file a killed writer left in a work_dir (`.last.pt.XXXXXXXX.tmp`: written, never renamed) is
removed, with a warning, when the next run on that work_dir starts or resumes; nothing else is touched."""
from __future__ import annotations

import logging

import pytest
from conftest import tiny_config

from interlingua.config import parse_config
from interlingua.training.trainer import train

STALE = ["data/.joint.model.k2v9q0x_.tmp", ".last.pt.ab12cd34.tmp", ".best.pt.zz99yy88.tmp",
         ".config.json.a1b2c3d4.tmp", "best_loss/.step2.pt.q1w2e3r4.tmp"]
KEPT = ["notes.tmp", ".last.pt.tmp", ".last.pt.short.tmp", "mine.last.pt.ab12cd34.tmp"]


def _plant(work) -> None:
    for name in STALE + KEPT:
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_bytes(b"PK\x03\x04 half a checkpoint")


def _check(work, caplog) -> None:
    assert not [name for name in STALE if (work / name).exists()]
    assert all((work / name).exists() for name in KEPT)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "temporary" in r.getMessage()]
    assert len(warned) == 1 and all(name.split("/")[-1] in warned[0] for name in STALE), warned


@pytest.mark.parametrize("resume", [False, True])
def test_stale_temporaries_are_removed_when_a_run_starts_or_resumes(multi30k_corpus, tmp_path, caplog, resume):
    work = tmp_path / "run"
    cfg = tiny_config(multi30k_corpus, work, train={"max_steps": 2, "valid_every": 2, "log_every": 2})
    if resume:
        train(parse_config(cfg))
        cfg = tiny_config(multi30k_corpus, work, train={"max_steps": 4, "valid_every": 2, "log_every": 2})
    else:
        work.mkdir()
    _plant(work)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        result = train(parse_config(cfg), resume=resume)
    assert result.steps == (4 if resume else 2)
    _check(work, caplog)
