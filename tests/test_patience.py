"""`train.patience`: stop after N validations without a lower dev loss, and refuse to resume past it."""
from __future__ import annotations

import json

import pytest
from conftest import tiny_config

from interlingua.config import parse_config
from interlingua.errors import ConfigError
from interlingua.records import Validation
from interlingua.training import run as run_mod
from interlingua.training.patience import patience_spent, validations_without_improvement
from interlingua.training.trainer import train


def records(*losses):
    return [Validation(step=2 * (i + 1), mean_loss=loss) for i, loss in enumerate(losses)]


def test_validations_are_counted_from_the_lowest_dev_loss():
    assert validations_without_improvement([]) == 0
    assert validations_without_improvement(records(3.0, 2.0)) == 0
    assert validations_without_improvement(records(3.0, 2.0, 2.5, 2.1)) == 2
    assert validations_without_improvement(records(3.0, 2.0, 2.5, 1.9)) == 0
    assert validations_without_improvement(records(3.0, 3.0)) == 1  # equal is no improvement
    assert validations_without_improvement(records(None, 3.0, None)) == 0  # no dev loss: not counted
    assert patience_spent(records(3.0, 2.0, 2.5, 2.1), 2) and not patience_spent(records(3.0, 2.0, 2.5, 2.1), 3)
    assert not patience_spent(records(3.0, 2.0, 2.5, 2.1), None)


LOSSES = {2: 3.0, 4: 2.0, 6: 2.5, 8: 2.1, 10: 1.5, 12: 1.4}


def scripted_validation(self, step):
    """Dev losses that stop improving after step 4, improve again at steps 10 and 12, then no more."""
    return Validation(step=step, mean_bleu=10.0 + step, mean_loss=LOSSES.get(step, 2.0))


def test_patience_stops_at_the_right_validation_and_resume_refuses_to_go_on(multi30k_corpus, tmp_path,
                                                                             monkeypatch):
    monkeypatch.setattr(run_mod.Run, "validate", scripted_validation)
    cfg = tiny_config(multi30k_corpus, tmp_path / "run", train={"max_steps": 40, "valid_every": 2, "patience": 2})
    result = train(parse_config(cfg))
    assert result.steps == 8  # validations at 6 and 8 did not beat step 4's loss
    valid = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["type"] == "valid"]
    assert [r["step"] for r in valid] == [2, 4, 6, 8]
    with pytest.raises(ConfigError, match="stopped at step 8 .* train.patience"):
        train(parse_config(cfg), resume=True)
    # with more patience the same run goes on, exactly from where it stopped
    more = tiny_config(multi30k_corpus, tmp_path / "run", train={"max_steps": 40, "valid_every": 2, "patience": 3})
    assert train(parse_config(more), resume=True).steps == 18  # the lowest at 12; 14, 16 and 18 did not beat it


def test_the_runner_counts_a_patience_stop_as_finished_and_resumes_a_run_cut_short(multi30k_corpus, tmp_path,
                                                                                   monkeypatch):
    """`interlingua experiment` goes on with a run a session's end cut short, and leaves one that
    stopped because its dev loss had converged as it is (a resume would be refused)."""
    from interlingua.experiment import finished
    monkeypatch.setattr(run_mod.Run, "validate", scripted_validation)
    cfg = parse_config(tiny_config(multi30k_corpus, tmp_path / "run",
                                   train={"max_steps": 40, "valid_every": 2, "patience": 2, "max_minutes": 1e-9}))
    train(cfg)  # stops at the first step boundary: the time budget, not the patience
    assert finished(tmp_path / "run", cfg.train)
    longer = cfg.model_copy(update={"train": cfg.train.model_copy(update={"max_minutes": None})})
    assert not finished(tmp_path / "run", longer.train)  # with more time it is not done: the runner resumes it
    resumed = train(longer, resume=True)
    assert resumed.steps > 1 and patience_spent(resumed.history, 2)
    assert finished(tmp_path / "run", longer.train)
    assert not finished(tmp_path / "run", longer.train.model_copy(update={"patience": 3}))
    assert not finished(tmp_path / "other", longer.train)
