"""Looking inside the bridge: per-head attention heat maps and head entropy (paper 000, Sec. 5.3).

Inputs are plain arrays: one attention matrix A (k heads x n tokens, rows summing to 1)
per sentence, as `Model.attention` returns. Entropy (nats) of a head's distribution
over tokens is split, as in Table 13, into the first n_i heads (up to the sentence's length
n_i) and the heads beyond it, where the penalty term is said to spread attention.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from scipy.stats import entropy  # noqa: E402

from interlingua.evaluation.sentence.protocol import EvaluationError  # noqa: E402
from interlingua.figures import save_figure  # noqa: E402


def check_attention(attention: np.ndarray, n_tokens: int | None = None) -> np.ndarray:
    """A (k, n) non-negative matrix whose rows are distributions over the sentence's tokens."""
    A = np.asarray(attention, dtype=np.float64)
    if A.ndim != 2 or 0 in A.shape:
        raise EvaluationError(f"attention must be a non-empty (heads, tokens) matrix, got shape {A.shape}")
    if n_tokens is not None and A.shape[1] != n_tokens:
        raise EvaluationError(f"attention has {A.shape[1]} token columns but {n_tokens} tokens were given")
    if not np.isfinite(A).all() or (A < 0).any():
        raise EvaluationError("attention weights must be finite and non-negative")
    sums = A.sum(axis=1)
    if not np.allclose(sums, 1.0, atol=2e-2):  # loose enough for attention computed in bf16
        raise EvaluationError(f"each head's attention must sum to 1 over the tokens (got row sums {sums.min():.3f}"
                              f"..{sums.max():.3f}); pass the sentence's real tokens only, no padding")
    return A


def head_entropies(attention: np.ndarray) -> np.ndarray:
    """Entropy (nats) of each head's attention distribution: (k,)."""
    return entropy(check_attention(attention), axis=1)


def head_entropy_stats(attentions: Sequence[np.ndarray]) -> dict:
    """Mean head entropy over all (sentence, head) pairs: all heads, heads 1..n_i, heads n_i+1..k.

    n_i is sentence i's token count (the attention's column count). 'beyond_length' has no
    entries for sentences at least as long as the bridge has heads."""
    groups: dict[str, list[float]] = {"all_heads": [], "up_to_length": [], "beyond_length": []}
    ks = set()
    for A in attentions:
        ent = head_entropies(A)
        k, n = np.asarray(A).shape
        ks.add(k)
        groups["all_heads"] += ent.tolist()
        groups["up_to_length"] += ent[: min(n, k)].tolist()
        groups["beyond_length"] += ent[n:].tolist()
    if not groups["all_heads"]:
        raise EvaluationError("head entropy needs at least one attention matrix")
    if len(ks) != 1:
        raise EvaluationError(f"all attention matrices must have the same number of heads, got {sorted(ks)}")
    out: dict[str, Any] = {
        name: {"mean": float(np.mean(v)) if v else None, "std": float(np.std(v)) if v else None, "count": len(v)}
        for name, v in groups.items()}
    out["heads"] = ks.pop()
    out["sentences"] = len(attentions)
    return out


def plot_head_heatmap(attention: np.ndarray, tokens: Sequence[str], out_png: Path, *, title: str = "") -> Path:
    """Heat map of one bridge's attention for one sentence: heads (rows) x tokens (columns)."""
    return plot_head_heatmaps({"": attention}, tokens, out_png, title=title)


def plot_head_heatmaps(attentions: Mapping[str, np.ndarray], tokens: Sequence[str], out_png: Path, *,
                       title: str = "") -> Path:
    """Heat maps of several bridges (e.g. k = 1, 10, 25, 50) on one sentence, stacked as in Figure 7."""
    mats = {name: check_attention(A, len(tokens)) for name, A in attentions.items()}
    if not mats:
        raise EvaluationError("no attention matrices to plot")
    heights = [max(1.0, 0.25 * A.shape[0]) for A in mats.values()]
    width = max(5.0, 0.45 * len(tokens) + 2.5)
    fig, axes = plt.subplots(len(mats), 1, figsize=(width, sum(heights) + 1.2 * len(mats) + 0.8),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (name, A) in zip(axes[:, 0], mats.items()):
        im = ax.imshow(A, cmap="Blues", aspect="auto", vmin=0.0, vmax=max(float(A.max()), 1e-6),
                       interpolation="nearest")
        ax.set_yticks(range(A.shape[0]),
                      [str(i + 1) if A.shape[0] <= 25 or i % 5 == 4 else "" for i in range(A.shape[0])],
                      fontsize=7)
        ax.set_ylabel(f"{name + ': ' if name else ''}head (k={A.shape[0]})", fontsize=8)
        ax.set_xticks(range(len(tokens)), list(tokens), rotation=60, ha="right", fontsize=8)
        fig.colorbar(im, ax=ax, fraction=0.025, pad=0.01)
    if title:
        fig.suptitle(title, fontsize=10)
    return save_figure(fig, out_png)


def plot_per_head_accuracy(accuracy: Mapping[str, Sequence[float]], out_png: Path, *, title: str = "") -> Path:
    """Probing accuracy of each head alone, one line per task (paper 000, Figure 5)."""
    if not accuracy:
        raise EvaluationError("no per-head accuracies to plot")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for task, accs in accuracy.items():
        ax.plot(np.arange(1, len(accs) + 1), accs, marker=".", label=task)
    ax.set_xlabel("attention head")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    return save_figure(fig, out_png)
