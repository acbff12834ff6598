"""`train.patience`: training to convergence, judged by the dev loss of the trained directions.

The history (every validation record, in order, as checkpoints keep it) says how many validations
in a row have not lowered the lowest mean dev loss so far; a run stops once that reaches the
patience, and a resumed run whose history already says so refuses to go on (a resume must not
quietly train past the point it was stopped at as converged).
"""
from __future__ import annotations

from collections.abc import Sequence

from interlingua.records import Validation


def validations_without_improvement(history: Sequence[Validation]) -> int:
    """Validations since the one with the lowest mean dev loss (0: the last one was the lowest); records
    without a dev loss (no trained direction with dev pairs) are not counted."""
    best: float | None = None
    since = 0
    for rec in history:
        loss = rec.mean_loss
        if loss is None:
            continue
        if best is None or loss < best:
            best, since = loss, 0
        else:
            since += 1
    return since


def patience_spent(history: Sequence[Validation], patience: int | None) -> bool:
    """Whether `patience` validations in a row have gone by without a lower dev loss."""
    return patience is not None and validations_without_improvement(history) >= patience
