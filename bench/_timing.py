"""Training-speed bookkeeping shared by the benchmarks, one rule for both sides.

Both sides are timed from wall-clock stamps on their own log lines: OpenNMT-py writes a
timestamp on every `Step N/M` report, and our runs get one on every `metrics.jsonl` record
(`StampedTrainer`). Rates are taken between consecutive log lines (steps, sentences and
src+tgt tokens per wall-clock second), so whatever runs between two lines (data loading,
logging, a checkpoint save, a validation) counts for both sides alike.
"""
from __future__ import annotations

import json
import re
import statistics
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from interlingua.training.trainer import Trainer

# OpenNMT-py 3.5 report line: "[2026-11-21 19:17:37,123 INFO] Step 50/  300; ...; bsz: 14/ 15/64; 1032/1101 tok/s; ..."
ONMT_STEP = re.compile(r"^\[(\S+ \S+) INFO\] Step\s+(\d+)/\s*\d+;.*?bsz:\s*(\d+)/\s*(\d+)/\s*(\d+);"
                       r"\s*(\d+)/\s*(\d+) tok/s;")


class StampedTrainer(Trainer):
    """The trainer, unchanged, with the wall-clock time (`wall`, seconds since the epoch) on every metrics record."""

    def log(self, record: dict) -> None:
        super().log({**record, "wall": round(time.time(), 3)})


@dataclass(frozen=True)
class Mark:
    """Where a run stood at one log line: step, wall-clock time, tokens in the interval that ends here."""

    step: int
    wall: float
    tokens: float
    sentences_per_step: int


def onmt_marks(log: str | Path) -> list[Mark]:
    """Step reports of an OpenNMT-py training log (its timestamps are local time, as `time.time()` sees them)."""
    marks: list[Mark] = []
    for line in Path(log).read_text(encoding="utf-8", errors="replace").splitlines():
        m = ONMT_STEP.search(line)
        if not m:
            continue
        wall = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        step = int(m.group(2))
        dt = wall - marks[-1].wall if marks else 0.0
        # its tok/s are over its own report interval; times the interval they give the tokens in it
        marks.append(Mark(step, wall, (int(m.group(6)) + int(m.group(7))) * dt, int(m.group(5))))
    return marks


def our_marks(metrics: str | Path, batch_size: int) -> list[Mark]:
    """Train records of one of our `metrics.jsonl` files written by `StampedTrainer`."""
    marks: list[Mark] = []
    prev_elapsed = 0.0
    for line in Path(metrics).read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        if r.get("type") != "train":
            continue
        if "wall" not in r:
            raise ValueError(f"{metrics} has no wall-clock stamps: train with bench/train_logged.py or StampedTrainer")
        # tokens_per_s is over the window's own step time; times that time it gives the tokens in the window
        marks.append(Mark(r["step"], r["wall"], r["tokens_per_s"] * (r["elapsed_s"] - prev_elapsed), batch_size))
        prev_elapsed = r["elapsed_s"]
    return marks


def window_rates(marks: list[Mark], warmup_steps: int) -> dict:
    """Median over log intervals starting at or after `warmup_steps`, and the whole window's rate."""
    pairs = [(a, b) for a, b in zip(marks, marks[1:]) if a.step >= warmup_steps and b.wall > a.wall]
    if not pairs:
        last = marks[-1].step if marks else None
        raise ValueError(f"no log interval after step {warmup_steps} (last logged step: {last})")
    iv = [(b.step - a.step, b.wall - a.wall, b.tokens, b.sentences_per_step) for a, b in pairs]
    steps, secs, toks = sum(x[0] for x in iv), sum(x[1] for x in iv), sum(x[2] for x in iv)
    return {"window_steps": [pairs[0][0].step, pairs[-1][1].step],
            "intervals": len(iv),
            "steps_per_s_median": round(statistics.median(x[0] / x[1] for x in iv), 4),
            "steps_per_s_window": round(steps / secs, 4),
            "sent_per_s_window": round(sum(x[0] * x[3] for x in iv) / secs, 2),
            "src_plus_tgt_tokens_per_s_median": round(statistics.median(x[2] / x[1] for x in iv)),
            "src_plus_tgt_tokens_per_s_window": round(toks / secs)}


def step_at(marks: list[Mark], wall: float) -> float | None:
    """Steps done at wall-clock time `wall`, interpolated between log lines (None outside the logged span)."""
    for a, b in zip(marks, marks[1:]):
        if a.wall <= wall <= b.wall:
            return a.step + (b.step - a.step) * (wall - a.wall) / max(b.wall - a.wall, 1e-9)
    return None


def budget_rates(marks: list[Mark], start: float, budget_s: float, warmup_s: float) -> dict:
    """Steps a run logged within [start, start + budget_s], and its rate from start + warmup_s to the end."""
    end = start + budget_s
    inside = [m for m in marks if m.wall <= end]
    s0, s1 = step_at(marks, start + warmup_s), step_at(marks, end)
    if s1 is None and inside:  # the run's last line came before the budget ended
        s1, end = inside[-1].step, inside[-1].wall
    rate = None if s0 is None or s1 is None else round((s1 - s0) / (end - start - warmup_s), 4)
    return {"last_logged_step": inside[-1].step if inside else 0, "steps_per_s_after_warmup": rate,
            "warmup_s": warmup_s}
