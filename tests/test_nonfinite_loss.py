"""A loss that turns NaN mid-run: isolated steps are skipped and counted, a streak stops the run with one
error, and the checkpoints written before stay as they were (finite)."""
from __future__ import annotations

import json

import pytest
import torch
from conftest import tiny_config

from interlingua.config import parse_config
from interlingua.errors import TrainingDiverged
from interlingua.model_files.checkpoint import read_checkpoint
from interlingua.training.build import build_run
from interlingua.training.trainer import Trainer


def _nan_loss_from(trainer, steps):
    """Make the training loss NaN in the steps for which `steps(step number)` holds (not in validations)."""
    original = trainer.run.network.loss

    def loss(*args, **kwargs):
        out = original(*args, **kwargs)
        if trainer.run.network.training and steps(trainer.progress.step + 1):
            out.loss = out.loss * float("nan")
            out.nll = out.nll * float("nan")
        return out
    trainer.run.network.loss = loss


def _config(corpus, work, steps=20):
    return parse_config(tiny_config(corpus, work, train={"max_steps": steps, "valid_every": 6, "log_every": 5,
                                                         "batch_size": 8, "max_nonfinite_steps": 3}))


def _records(work):
    return [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()]


def test_an_isolated_nan_step_is_skipped_and_counted(multi30k_corpus, tmp_path):
    trainer = Trainer(build_run(_config(multi30k_corpus, tmp_path)))
    _nan_loss_from(trainer, lambda step: step == 4)
    trainer.train()
    weights = read_checkpoint(tmp_path / "last.pt")["model"]
    assert all(torch.isfinite(w).all() for w in weights.values())
    first = next(r for r in _records(tmp_path) if r["type"] == "train")
    assert first["step"] == 5 and first["skipped_steps"] == 1 and first["loss"] is not None
    assert not any(r["type"] == "stop" for r in _records(tmp_path))


def test_a_streak_of_nan_steps_stops_the_run_and_keeps_its_checkpoints(multi30k_corpus, tmp_path):
    trainer = Trainer(build_run(_config(multi30k_corpus, tmp_path)))
    _nan_loss_from(trainer, lambda step: step >= 7)  # after the validation at step 6
    with pytest.raises(TrainingDiverged, match=r"not finite .* 3 steps in a row .* step 9"):
        trainer.train()
    kept = read_checkpoint(tmp_path / "last.pt")
    assert kept["training"]["step"] == 6
    assert all(torch.isfinite(w).all() for w in kept["model"].values())
    stop = _records(tmp_path)[-1]
    assert stop == {"type": "stop", "step": 9, "reason": "non-finite loss", "nonfinite_steps": 3}
