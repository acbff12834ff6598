"""`train.tensorboard: true`: metrics.jsonl's scalars as TensorBoard event files, each step once after a resume.

The event files are read back with TensorBoard's own EventAccumulator (which applies the purges a
resumed session writes), and compared with metrics.jsonl.
"""
from __future__ import annotations

import builtins
import json

import pytest
from conftest import tiny_config

from interlingua.config import parse_config
from interlingua.data.prepare import prepare
from interlingua.errors import ConfigError
from interlingua.training.build import build_run
from interlingua.training.trainer import Trainer, train

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")

# Log lines every 4 steps, validations at 8, 16 and 24; two directions with the agreement loss on.
RUN = dict(directions={"mode": "explicit", "pairs": [["en", "de"], ["de", "en"]]},
           preprocess={"max_valid_sentences": 12},
           train={"max_steps": 24, "valid_every": 8, "log_every": 4, "batch_size": 8, "tensorboard": True,
                  "agreement": {"weight": 1.0}})
TRAIN_TAGS = {"train/loss", "train/penalty", "train/agreement", "train/lr", "train/tokens_per_s"}
DEV_TAGS = {"dev/mean_bleu", "dev/mean_loss", "dev/bleu/en-de", "dev/bleu/de-en"}


def _config(corpus, work, **train):
    sections = {**RUN, "train": {**RUN["train"], **train}}
    return parse_config(tiny_config(corpus, work, **sections))


def _events(work) -> dict[str, list[tuple[int, float]]]:
    acc = event_accumulator.EventAccumulator(str(work / "tensorboard"), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _expected(work) -> dict[str, list[tuple[int, float]]]:
    """metrics.jsonl's records as the scalars they should have become."""
    out: dict[str, list[tuple[int, float]]] = {}
    for rec in (json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()):
        if rec["type"] == "train":
            values = {f"train/{k}": rec[k] for k in ("loss", "penalty", "agreement", "lr", "tokens_per_s")}
        else:
            values = {"dev/mean_bleu": rec["mean_bleu"], "dev/mean_loss": rec["mean_loss"],
                      **{f"dev/bleu/{n}": r["bleu"] for n, r in rec["directions"].items()}}
        for tag, value in values.items():
            out.setdefault(tag, []).append((rec["step"], value))
    return out


def _assert_matches_metrics(work) -> None:
    events, expected = _events(work), _expected(work)
    assert set(events) == set(expected) == TRAIN_TAGS | DEV_TAGS
    for tag, points in expected.items():
        assert [s for s, _ in events[tag]] == [s for s, _ in points], tag  # every step once, in order
        assert [v for _, v in events[tag]] == pytest.approx([v for _, v in points], rel=1e-6), tag


@pytest.fixture(scope="module")
def data(multi30k_corpus, tmp_path_factory):
    return prepare(_config(multi30k_corpus, tmp_path_factory.mktemp("prepared")))


def test_the_event_files_hold_the_training_and_dev_scalars(multi30k_corpus, data, tmp_path):
    work = tmp_path / "run"
    train(_config(multi30k_corpus, work), data=data)
    events = _events(work)
    assert [s for s, _ in events["train/loss"]] == [4, 8, 12, 16, 20, 24]
    assert [s for s, _ in events["dev/bleu/en-de"]] == [8, 16, 24]
    _assert_matches_metrics(work)


def test_no_event_files_by_default(multi30k_corpus, data, tmp_path):
    work = tmp_path / "run"
    train(_config(multi30k_corpus, work, tensorboard=False, max_steps=2), data=data)
    assert not (work / "tensorboard").exists()


def _stop_at_the_third_save(trainer):
    """best.pt and last.pt at step 8, then the first save of step 16's validation, after its
    metrics line and scalars were written: stopped there, the resumed run redoes that validation."""
    real, calls = trainer.files.save, []

    def save(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)
    trainer.files.save = save


def _crash_after_step_16(trainer):
    """As if killed after step 24 but before its save: last.pt is put back to step 16's afterwards,
    so the events of 17..24 are written twice, once by the crashed session."""
    real = trainer.files.save

    def save(name, *args, **kwargs):
        path = real(name, *args, **kwargs)
        if name == "last.pt" and trainer.progress.step == 16:
            trainer.kept_last = path.read_bytes()
        return path
    trainer.files.save = save


@pytest.mark.parametrize("stop", [_stop_at_the_third_save, _crash_after_step_16])
def test_a_resumed_run_shows_every_step_once(stop, multi30k_corpus, data, tmp_path):
    work = tmp_path / "run"
    first = Trainer(build_run(_config(multi30k_corpus, work), data=data))
    stop(first)
    try:
        first.train()
    except KeyboardInterrupt:
        pass
    if hasattr(first, "kept_last"):
        (work / "last.pt").write_bytes(first.kept_last)
    assert len(list((work / "tensorboard").glob("events.out.tfevents.*"))) == 1
    train(_config(multi30k_corpus, work), resume=True, data=data)
    assert len(list((work / "tensorboard").glob("events.out.tfevents.*"))) == 2
    _assert_matches_metrics(work)
    assert [s for s, _ in _events(work)["dev/mean_bleu"]] == [8, 16, 24]


def test_tensorboard_turned_on_at_a_resume_gets_the_earlier_records(multi30k_corpus, data, tmp_path):
    work = tmp_path / "run"
    train(_config(multi30k_corpus, work, tensorboard=False, max_steps=12), data=data)
    train(_config(multi30k_corpus, work), resume=True, data=data)
    _assert_matches_metrics(work)


def test_a_fresh_run_drops_the_events_of_one_stopped_before_its_first_checkpoint(multi30k_corpus, data, tmp_path):
    work = tmp_path / "run"
    (work / "tensorboard").mkdir(parents=True)
    (work / "tensorboard" / "events.out.tfevents.1000000000.host.1.0").write_bytes(b"")
    train(_config(multi30k_corpus, work), data=data)
    assert len(list((work / "tensorboard").glob("events.out.tfevents.*"))) == 1
    _assert_matches_metrics(work)


def test_without_the_package_the_config_error_says_what_to_install(multi30k_corpus, tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_tensorboard(name, *args, **kwargs):
        if name.startswith("torch.utils.tensorboard") or name.startswith("tensorboard"):
            raise ImportError("No module named 'tensorboard'")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    with pytest.raises(ConfigError, match=r'pip install "interlingua\[tensorboard\]"'):
        build_run(_config(multi30k_corpus, tmp_path / "run"))
    assert not (tmp_path / "run" / "data").exists()  # refused before the corpus is prepared
