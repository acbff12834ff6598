"""PNG score matrices (BLEU/chrF, retrieval and margin heat maps); the bridge attention heat maps are drawn in
sentence/heads.py."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from interlingua.figures import save_figure  # noqa: E402


def plot_score_matrix(matrix: Mapping[str, Mapping[str, float | None]], languages: list[str],
                      zero_shot: set[tuple[str, str]], title: str, out_png: Path, digits: int = 1) -> None:
    """Heat map of a source x target score matrix; zero-shot cells are starred. `digits`: decimals
    in the cells (1 for BLEU and percentages; cosine differences need 2)."""
    data = np.full((len(languages), len(languages)), np.nan)
    for i, s in enumerate(languages):
        for j, t in enumerate(languages):
            v = matrix.get(s, {}).get(t)
            if v is not None:
                data[i, j] = v
    fig, ax = plt.subplots(figsize=(1.2 * len(languages) + 2, 1.1 * len(languages) + 1.5))
    im = ax.imshow(data, cmap="viridis")
    ax.set_xticks(range(len(languages)), languages)
    ax.set_yticks(range(len(languages)), languages)
    ax.set_xlabel("target")
    ax.set_ylabel("source")
    for i, s in enumerate(languages):
        for j, t in enumerate(languages):
            if not np.isnan(data[i, j]):
                star = "*" if (s, t) in zero_shot else ""
                ax.text(j, i, f"{data[i, j]:.{digits}f}{star}", ha="center", va="center",
                        color="white" if data[i, j] < np.nanmean(data) else "black", fontsize=9)
    ax.set_title(title + ("\n(* zero-shot)" if zero_shot else ""), fontsize=10)
    fig.colorbar(im, ax=ax, fraction=0.046)
    save_figure(fig, out_png)


def plot_dev_bleu_against_loss(curves: Mapping[str, list[tuple[float, float]]], out_png: Path) -> Path:
    """Every run's validations as dev BLEU against dev loss, one line per run in training order: runs
    that lie on one curve trade loss for BLEU alike, so a gap in BLEU is one of training, not of kind."""
    fig, ax = plt.subplots(figsize=(7, 5))
    for name, points in curves.items():
        if points:
            loss, bleu = zip(*points)
            ax.plot(loss, bleu, marker="o", markersize=3, linewidth=1, label=name)
            ax.annotate("latest", (loss[-1], bleu[-1]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.invert_xaxis()  # training moves right: lower loss
    ax.set_xlabel("mean dev loss of the trained directions (lower: further in training)")
    ax.set_ylabel("mean dev BLEU of the trained directions (greedy)")
    ax.grid(alpha=0.3)
    if any(curves.values()):
        ax.legend(fontsize=8)
    ax.set_title("Dev BLEU against dev loss, every validation of every run", fontsize=10)
    return save_figure(fig, out_png)
