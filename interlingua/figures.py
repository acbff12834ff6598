"""Figures every layer may draw: `save_figure`, which every PNG goes through, and the training curves.

Importing this module selects matplotlib's file-only Agg backend.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from interlingua.atomic_files import atomic_output  # noqa: E402


def save_figure(fig, out_png: Path) -> Path:
    """Lay out, write (creating the folder) and close a figure; returns the PNG's path."""
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
    direction at each validation."""
    train: list[dict[str, Any]] = []
    valid: list[dict[str, Any]] = []
    for line in metrics_jsonl.read_text().splitlines():
        rec = json.loads(line)
        (train if rec.get("type") == "train" else valid).append(rec)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    if train:
        steps = [r["step"] for r in train]
        axes[0].plot(steps, [r["loss"] for r in train], label="train token NLL")
        axes[0].set_title("training loss")
        axes[1].plot(steps, [r["penalty"] for r in train], color="tab:orange", label="bridge penalty ||AA^T - I||^2")
        axes[1].set_title("bridge penalty ||AA^T - I||^2")
        agreed = [(r["step"], r["agreement"]) for r in train if "agreement" in r]
        if agreed:
            axes[1].plot(*zip(*agreed), color="tab:green", label="agreement loss per sentence")
            axes[1].set_title("penalty and agreement")
            axes[1].legend(fontsize=7)
    for ax in axes[:2]:
        ax.set_xlabel("step")
    if valid:
        steps = [r["step"] for r in valid]
        for name in valid[-1]["directions"]:
            vals = [r["directions"].get(name, {}).get("bleu", np.nan) for r in valid]
            axes[2].plot(steps, vals, marker=".", label=name,
                         linestyle="--" if valid[-1]["directions"][name].get("zero_shot") else "-")
        axes[2].plot(steps, [r["mean_bleu"] for r in valid], color="black", linewidth=2.5, label="mean (selection)")
        axes[2].set_title("dev BLEU")
        axes[2].set_xlabel("step")
        axes[2].legend(fontsize=6, ncol=2)
    save_figure(fig, out_png)
