"""metrics.jsonl, the training log: one JSON record per line, kept in step with the saved state.

Train records average a window of steps (loss per target token, penalty per step, tokens/s);
the window's running sums are part of the training state, so a resumed run writes the same
lines an uninterrupted one would. Validation records are `records.Validation`s (`validation.validate`),
read back with `records.read_validations`.

Every line is strict JSON: a number that is not finite (a diverged loss; a mean over no dev
sentences) is written as null, never as `NaN`, which most JSON readers refuse. Records are
appended; whole rewrites (a fresh start, trimming on resume) are atomic, and a last line cut short
by a kill or a full disk is dropped on resume (its step is redone).
"""
from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interlingua.atomic_files import write_text_atomic
from interlingua.figures import plot_training_curves
from interlingua.records import is_validation, log_lines, read_records

log = logging.getLogger(__name__)


@dataclass
class SyntheticStats:
    """A step's synthetic pairs (`train.synthetic`), summed over the processes: pairs per direction
    ("de->fr"), how many made sentences the language identifier checked and placed in another language,
    the NLL of the made pairs and its target tokens, and the seconds spent making them."""

    pairs: dict[str, int] = field(default_factory=dict)
    checked: int = 0
    off_target: int = 0
    unfinished: int = 0
    """Made sentences dropped because they reached their length limit (never ended)."""
    nll: float = 0.0
    target_tokens: int = 0
    seconds: float = 0.0
    weight: float = 0.0
    """The made pairs' weight in the step's loss, the real pairs' being 1 (`train.synthetic.weighting`)."""


def empty_window(streak: int = 0) -> dict[str, Any]:
    """Running sums of the steps since the last train record; `streak` (the non-finite steps in a row
    before it) goes on across windows."""
    return {"nll": 0.0, "tok": 0, "pen": 0.0, "n": 0, "tokens": 0, "time": 0.0, "agr": 0.0, "agr_n": 0,
            "syn": {}, "syn_checked": 0, "syn_off": 0, "syn_unfinished": 0, "syn_nll": 0.0, "syn_tok": 0,
            "syn_time": 0.0, "syn_weight": 0.0,
            "skipped": 0, "streak": streak}


def add_step(window: dict[str, Any], nll: float, target_tokens: int, penalty: float, tokens: int,
             seconds: float, agreement: float = 0.0, agreed: int = 0,
             synthetic: SyntheticStats | None = None, skipped: bool = False) -> dict[str, Any]:
    """The window with one more step in it (a new dict: the old one stays valid for a rewind);
    `agreement` is the step's summed agreement loss over its `agreed` sentences. A non-finite loss
    (or a `skipped` step: its update was not made) is counted as skipped, not added to the sums."""
    w = {**empty_window(), **window}
    if skipped or not math.isfinite(nll):
        return {**w, "n": w["n"] + 1, "tokens": w["tokens"] + tokens, "time": w["time"] + seconds,
                "skipped": w["skipped"] + 1, "streak": w["streak"] + 1}
    out = {**w, "nll": w["nll"] + nll, "tok": w["tok"] + target_tokens, "pen": w["pen"] + penalty,
           "n": w["n"] + 1, "tokens": w["tokens"] + tokens, "time": w["time"] + seconds,
           "agr": w["agr"] + agreement, "agr_n": w["agr_n"] + agreed, "streak": 0}
    if synthetic is not None:
        pairs = dict(w["syn"])
        for name, count in synthetic.pairs.items():
            pairs[name] = pairs.get(name, 0) + count
        out.update(syn=pairs, syn_checked=w["syn_checked"] + synthetic.checked,
                   syn_off=w["syn_off"] + synthetic.off_target,
                   syn_unfinished=w["syn_unfinished"] + synthetic.unfinished, syn_nll=w["syn_nll"] + synthetic.nll,
                   syn_tok=w["syn_tok"] + synthetic.target_tokens, syn_time=w["syn_time"] + synthetic.seconds,
                   syn_weight=w["syn_weight"] + synthetic.weight)
    return out


def train_record(step: int, window: dict[str, Any], lr: float, elapsed: float) -> dict[str, Any]:
    """A train line of metrics.jsonl; `agreement` (mean loss per sentence) only where it was computed; the
    synthetic pairs' figures (pairs per step and direction, their loss, off-target rate, share of the time
    spent making them, made sentences dropped per step as unfinished) only where pairs were made;
    `skipped_steps` only where a loss was not finite."""
    w = {**empty_window(), **window}
    trained = max(w["n"] - w["skipped"], 1)
    rec: dict[str, Any] = {"type": "train", "step": step, "loss": w["nll"] / max(w["tok"], 1) if w["tok"] else
                           (float("nan") if w["skipped"] else 0.0),
                           "penalty": w["pen"] / trained, "tokens_per_s": w["tokens"] / max(w["time"], 1e-9),
                           "lr": lr, "elapsed_s": round(elapsed, 2)}
    if w["agr_n"]:
        rec["agreement"] = w["agr"] / w["agr_n"]
    if w["syn"]:
        rec["synthetic_pairs"] = {name: count / w["n"] for name, count in sorted(w["syn"].items())}
        rec["synthetic_loss"] = w["syn_nll"] / max(w["syn_tok"], 1)
        rec["synthetic_time_share"] = w["syn_time"] / max(w["time"], 1e-9)
        rec["synthetic_loss_weight"] = w["syn_weight"] / w["n"]
        rec["synthetic_unfinished"] = w["syn_unfinished"] / w["n"]
        if w["syn_checked"]:
            rec["synthetic_off_target"] = w["syn_off"] / w["syn_checked"]
    if w["skipped"]:
        rec["skipped_steps"] = w["skipped"]
    return rec


def synthetic_time_share(window: dict[str, Any]) -> float:
    """The share of the window's time spent making synthetic pairs (`train.synthetic.max_time_share`)."""
    return float(window.get("syn_time", 0.0)) / max(float(window.get("time", 0.0)), 1e-9)


PLOT_INTERVAL_S = 30.0
"""The least wall-clock time between two drawings of `curves.png` during training: a drawing takes 0.3-0.8 s,
which a run validating every few seconds would otherwise spend at each validation. The last drawing, when
training finishes or is stopped by a signal, is never skipped (after a failure none is made)."""


class MetricsLog:
    """Appends records to `<work_dir>/metrics.jsonl` and redraws `curves.png` from it."""

    def __init__(self, work_dir: Path, draw: bool = True):
        self.path = Path(work_dir) / "metrics.jsonl"
        self.curves = Path(work_dir) / "curves.png"
        self.draw = draw  # `train.curves`
        self._drawn_at = time.monotonic()  # training starts about now: its first drawing waits an interval
        self._stale = False  # records appended since the last drawing

    def start_fresh(self) -> None:
        """A new run: a log left by one stopped before its first checkpoint is stale."""
        write_text_atomic(self.path, "")

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps(finite(record), allow_nan=False) + "\n"
        try:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line)
            self._stale = True
        except OSError as err:
            if err.filename is None:  # a full disk says nothing of which file
                raise OSError(err.errno, err.strerror, str(self.path)) from None
            raise

    def records(self) -> list[dict[str, Any]]:
        """Every record logged so far (none when there is no log yet)."""
        return read_records(self.path)

    def reconcile(self, step: int, validated: bool, window_open: bool) -> None:
        """Make the log match a state resumed at `step`: drop the lines written after it, and
        the lines of `step` itself that the state says are still owed (a validation not yet
        recorded, a train record whose window is still open); they will be written again."""
        if not self.path.exists():
            return
        kept = []
        for line in log_lines(self.path):
            rec = json.loads(line)
            if rec["step"] > step:
                continue
            if rec["step"] == step and (is_validation(rec) and not validated
                                        or rec.get("type") == "train" and window_open):
                continue
            kept.append(line)
        write_text_atomic(self.path, "".join(line + "\n" for line in kept))

    def plot(self, final: bool = False) -> None:
        """Redraw the training curves if `PLOT_INTERVAL_S` has passed since the last drawing, or, `final`, if
        anything was logged since; a log that cannot be drawn yet only warns. Never with `draw` off."""
        if not (self.draw and self._stale and (final or time.monotonic() - self._drawn_at >= PLOT_INTERVAL_S)):
            return
        try:
            plot_training_curves(self.path, self.curves)
        except (ValueError, KeyError, TypeError) as err:
            log.warning("could not plot curves: %s", err)
        self._drawn_at, self._stale = time.monotonic(), False


def finite(value: Any) -> Any:
    """`value` with NaN and infinities replaced by None, in nested dicts and lists (JSON has no such numbers)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
