"""The checkpoint files of a run's work_dir: `last.pt` (to resume from), `best.pt` (the best dev mean
BLEU so far), `best_loss/step*.pt` (the `train.average_best` lowest dev losses, weights only) and
`averaged.pt` (their mean, made when training ends).

Which files exist is decided from the training state's history alone, so a resumed run keeps
exactly the files an uninterrupted one would. Rank 0 alone writes them.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from interlingua.model_files.checkpoint import Checkpoint, TrainingState, average_checkpoints
from interlingua.records import Validation
from interlingua.training.run import Run

log = logging.getLogger(__name__)


class CheckpointFiles:
    def __init__(self, run: Run, before_write: Callable[[], None] | None = None):
        """`before_write`: called before each file is written (what is logged up to its state is then
        on disk with it)."""
        self.run = run
        self.work_dir = run.work_dir
        self.keep = run.cfg.train.average_best
        self.before_write = before_write

    def save(self, name: str, state: TrainingState | None) -> Path:
        """Write work_dir/`name`; with `state` None the weights only (for checkpoints that are only
        ever translated with or averaged)."""
        path = self.work_dir / name
        if not self.run.dist.is_main:
            return path
        if self.before_write is not None:
            self.before_write()
        run = self.run
        Checkpoint.of(run.cfg, run.network, run.data.vocabs, run.directions, state).save(path)
        return path

    def after_validation(self, state: TrainingState, best: bool) -> None:
        """The files of a validation whose record ends `state.history`: best.pt if it is the best so
        far (`best`), its place among the lowest dev losses, and last.pt."""
        if best:
            self.save("best.pt", state)
        self.keep_lowest_loss(state.history, state.step)
        self.save("last.pt", state)

    def keep_lowest_loss(self, history: Sequence[Validation], step: int) -> None:
        """With `train.average_best` n: this step's checkpoint joins best_loss/ if its mean dev loss is
        among the n lowest so far; files that fell out are removed."""
        if not self.keep or not self.run.dist.is_main:
            return
        kept = lowest_loss_steps(history, self.keep)
        folder = self.work_dir / "best_loss"
        folder.mkdir(exist_ok=True)
        if step in kept:
            self.save(f"best_loss/step{step}.pt", None)
        for path in folder.glob("step*.pt"):
            if int(path.stem[4:]) not in kept:
                path.unlink()

    def average_lowest_loss(self, history: Sequence[Validation]) -> Path | None:
        """`averaged.pt`: the mean of the kept lowest-dev-loss checkpoints (`train.average_best`)."""
        if not self.keep or not self.run.dist.is_main:
            return None
        paths = [self.work_dir / "best_loss" / f"step{s}.pt" for s in lowest_loss_steps(history, self.keep)]
        paths = [p for p in paths if p.exists()]
        if not paths:
            return None
        out = average_checkpoints(paths, self.work_dir / "averaged.pt")
        log.info("averaged %d lowest-dev-loss checkpoints (steps %s) into %s", len(paths),
                 ", ".join(p.stem[4:] for p in paths), out)
        return out


def lowest_loss_steps(history: Sequence[Validation], n: int) -> list[int]:
    """The steps of the `n` validations with the lowest mean dev loss (ties: the later step), lowest first."""
    scored = [(loss, -v.step) for v in history if (loss := score(v.mean_loss)) is not None]
    return [-neg for _, neg in sorted(scored)[:n]]


def score(value: Any) -> float | None:
    """A validation mean as a number to compare, or None where there is none (logged as null; NaN in
    histories saved before null was used)."""
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None
