"""How far a run's dev BLEU lies from another run's at the same dev loss.

Two runs whose validations lie on one dev-BLEU-against-dev-loss curve turn loss into BLEU alike: a gap
in BLEU between them is then one of training (one is further along), not of kind. A run below the
reference's curve gets less BLEU out of the same loss. The reference's curve is its training path:
the validations that lowered its dev loss, joined linearly (later ones, after it overfits, leave it).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from interlingua.records import Validation

Curve = Sequence[tuple[float, float]]
"""A run's validations in training order, as (mean dev loss, mean dev BLEU)."""


def dev_curve(history: Sequence[Validation]) -> list[list[float]]:
    """A run's validations as [step, mean dev loss, mean dev BLEU], those that have both."""
    return [[v.step, v.mean_loss, v.mean_bleu] for v in history if v.mean_loss is not None and v.mean_bleu is not None]


def training_path(curve: Curve) -> list[tuple[float, float]]:
    """The validations of `curve` that lowered its dev loss, in training order."""
    path: list[tuple[float, float]] = []
    for loss, bleu in curve:
        if not path or loss < path[-1][0]:
            path.append((loss, bleu))
    return path


def bleu_on_curve(reference: Curve, loss: float) -> float | None:
    """The reference's dev BLEU at dev loss `loss`, linear between the two validations of its training
    path either side of it; None where `loss` lies outside the path's range (no extrapolation)."""
    path = training_path(reference)
    if not path or not path[-1][0] <= loss <= path[0][0]:
        return None
    losses, bleus = zip(*reversed(path))  # ascending loss for np.interp
    return float(np.interp(loss, losses, bleus))


@dataclass(frozen=True)
class CurveOffset:
    """A run's validation of lowest dev loss, and the reference's dev BLEU at that loss."""

    loss: float
    bleu: float
    reference_bleu: float | None
    """None: the run's loss lies outside the reference's training path (lower or higher than any)."""

    @property
    def offset(self) -> float | None:
        """The run's BLEU minus the reference's at equal loss (negative: below the reference's curve)."""
        return None if self.reference_bleu is None else self.bleu - self.reference_bleu


def offset_from_curve(reference: Curve, run: Curve) -> CurveOffset | None:
    """Where `run` ends relative to `reference`: at the run's lowest dev loss (None: no validations)."""
    if not run:
        return None
    loss, bleu = min(run, key=lambda point: point[0])
    return CurveOffset(loss, bleu, bleu_on_curve(reference, loss))
