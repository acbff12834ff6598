"""`train.clock: cpu` counts this process's CPU time, so time spent waiting (another job on the core, here a
sleep) does not use up a run's budget; `wall` counts it."""
from __future__ import annotations

import time

import pytest
from conftest import tiny_config

from interlingua.config import parse_config
from interlingua.training.build import build_run
from interlingua.training.trainer import Trainer


@pytest.mark.parametrize("clock", ["wall", "cpu"])
def test_the_clock_counts_what_it_says(multi30k_corpus, tmp_path, clock):
    cfg = parse_config(tiny_config(multi30k_corpus, tmp_path, train={"max_steps": 4, "valid_every": 4, "log_every": 4,
                                                                     "batch_size": 4, "clock": clock}))
    trainer = Trainer(build_run(cfg))
    original = trainer.run.network.loss

    def slow_loss(*args, **kwargs):
        time.sleep(0.25)  # waiting, as for a core another process holds
        return original(*args, **kwargs)
    trainer.run.network.loss = slow_loss
    trainer.train()
    elapsed = trainer.progress.elapsed
    assert elapsed >= 1.0 if clock == "wall" else elapsed < 0.6, elapsed
