"""Figures every layer may draw: `save_figure`, which every PNG goes through, and the training curves.

Importing this module selects matplotlib's file-only Agg backend.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from interlingua.atomic_files import atomic_output  # noqa: E402
from interlingua.records import read_records, validations  # noqa: E402


def save_figure(fig, out_png: Path, *, tight: bool = True) -> Path:
    """Lay out (`tight`: matplotlib's tight layout, which draws the figure once more to measure its labels;
    else the figure keeps the margins it was given), write (creating the folder) and close a figure; returns
    the PNG's path."""
    if tight:
        fig.tight_layout()
    out_png = Path(out_png)
    try:
        with atomic_output(out_png) as f:
            fig.savefig(f, dpi=110, format="png")
    finally:
        plt.close(fig)
    return out_png


def plot_training_curves(metrics_jsonl: Path, out_png: Path) -> None:
    """Train loss / penalty (and the agreement loss, where it is on) over steps, and dev BLEU per
    direction at each validation. A run with neither penalty nor agreement (no attention bridge) gets its
    dev loss in the middle panel instead of a line at zero.

    Drawn with fixed margins rather than a tight layout: every training ends by drawing this figure, and
    measuring the labels cost a second drawing (0.55 s against 0.27 s for a short run's curves, one thread),
    for margins that come out the same for these three panels."""
    records = read_records(metrics_jsonl)
    train = [r for r in records if r.get("type") == "train"]
    valid = validations(records)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    fig.subplots_adjust(left=0.04, right=0.99, bottom=0.12, top=0.92, wspace=0.15)
    if train:
        steps = [r["step"] for r in train]
        axes[0].plot(steps, [r["loss"] for r in train], label="train token NLL")
        axes[0].set_title("training loss")
        agreed = [(r["step"], r["agreement"]) for r in train if "agreement" in r]
        if agreed or any(r["penalty"] for r in train):
            axes[1].plot(steps, [r["penalty"] for r in train], color="tab:orange",
                         label="bridge penalty ||AA^T - I||^2")
            axes[1].set_title("bridge penalty ||AA^T - I||^2")
        else:
            losses = [(v.step, v.mean_loss) for v in valid if v.mean_loss is not None]
            if losses:
                axes[1].plot(*zip(*losses), marker=".", color="tab:orange")
            axes[1].set_title("dev loss (mean of the selected directions)")
        if agreed:
            axes[1].plot(*zip(*agreed), color="tab:green", label="agreement loss per sentence")
            axes[1].set_title("penalty and agreement")
            axes[1].legend(fontsize=7)
    for ax in axes[:2]:
        ax.set_xlabel("step")
    if valid:
        steps = [v.step for v in valid]
        for name, last in valid[-1].directions.items():
            vals = [s.bleu if (s := v.directions.get(name)) else np.nan for v in valid]
            axes[2].plot(steps, vals, marker=".", label=name, linestyle="--" if last.zero_shot else "-")
        axes[2].plot(steps, [np.nan if v.mean_bleu is None else v.mean_bleu for v in valid], color="black",
                     linewidth=2.5, label="mean (selection)")
        axes[2].set_title("dev BLEU")
        axes[2].set_xlabel("step")
        axes[2].legend(fontsize=6, ncol=2)
    save_figure(fig, out_png, tight=False)
