"""The encoder analysis as markdown tables and PNG figures (per-layer curves, language-ID confusion)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from interlingua.figures import save_figure  # noqa: E402

if TYPE_CHECKING:
    from interlingua.evaluation.encoder_analysis import EncoderAnalysis


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def _per_layer(layers: list[str], columns: dict[str, list[float]], fmt=_pct) -> list[str]:
    """One row per layer, one column per key of `columns`."""
    return _table(["layer", *columns], [[name, *(fmt(col[i]) for col in columns.values())]
                                        for i, name in enumerate(layers)])


def markdown(r: EncoderAnalysis) -> str:
    m = r.means()
    head = [f"# Encoder analysis: {r.checkpoint or 'model'} ({r.encoder} encoder)", "",
            f"Probes trained on `{r.train_split}`, scored on `{r.split}` of {r.corpus}; languages: "
            f"{', '.join(r.languages)}. Layer `emb` is the embeddings as the first layer sees them, "
            f"layer {r.layers[-1]} the encoder output. Accuracies in %.", ""]
    summary = {"token id": m["token_accuracy"], "position": m["position_accuracy"]}
    if r.svcca:
        summary.update({"SVCCA": m["svcca"], "SVCCA random": m["svcca_random"],
                        "SVCCA - random": [a - b for a, b in zip(m["svcca"], m["svcca_random"])],
                        "retrieval": m["retrieval"]})
    fmt = {k: (_pct if k in ("token id", "position", "retrieval") else (lambda v: f"{v:.3f}")) for k in summary}
    rows = [[name, *(fmt[k](col[i]) for k, col in summary.items())] for i, name in enumerate(r.layers)]
    lines = head + ["## Averages per layer", "", *_table(["layer", *summary], rows), ""]
    lines += ["## Token-identity probe per language", "", *_per_layer(r.layers, r.token_accuracy),
              "| ceiling | " + " | ".join(_pct(r.token_ceiling[lang]) for lang in r.token_accuracy) + " |", "",
              "Ceiling: test tokens whose id occurs in the training split (unseen ids count as wrong).", ""]
    lines += ["## Position probe per language", "", *_per_layer(r.layers, r.position_accuracy), ""]
    if r.svcca:
        lines += ["## SVCCA per language pair (random reference in brackets)", "",
                  *_table(["layer", *(f"{p} ({r.pair_sentences[p]})" for p in r.svcca)],
                          [[name, *(f"{r.svcca[p][i]:.3f} ({r.svcca_random[p][i]:.3f})" for p in r.svcca)]
                           for i, name in enumerate(r.layers)]), ""]
        lines += ["## Retrieval accuracy per language pair (both directions)", "",
                  *_per_layer(r.layers, r.retrieval), ""]
    else:
        lines += ["SVCCA and retrieval need two languages with parallel test sentences.", ""]
    if r.confusion:
        lines += [f"## Language identification from the encoder output: {_pct(r.language_id_accuracy)}%", "",
                  "Rows: true language, columns: predicted (token counts).", "",
                  *_table(["", *r.languages], [[a, *map(str, row)] for a, row in zip(r.languages, r.confusion)]), ""]
    return "\n".join(lines)


def plot_layers(r: EncoderAnalysis, out_png: Path) -> Path:
    """Per-layer curves: probe accuracies, SVCCA beside random data, retrieval accuracy."""
    m = r.means()
    x = np.arange(len(r.layers))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    ax = axes[0]
    for name, table, color in (("token id", r.token_accuracy, "tab:blue"),
                               ("position", r.position_accuracy, "tab:red")):
        for row in table.values():
            ax.plot(x, row, color=color, alpha=0.3, linewidth=0.8)
        ax.plot(x, m["token_accuracy" if name == "token id" else "position_accuracy"], color=color, marker="o",
                label=f"{name} (mean; thin: per language)")
    ax.set_title("linear probes (test accuracy)")
    ax.set_ylim(0, 1.02)
    if r.svcca:
        axes[1].plot(x, m["svcca"], marker="o", label="between languages")
        axes[1].plot(x, m["svcca_random"], marker="o", linestyle="--", color="gray", label="random vectors")
        for row in r.retrieval.values():
            axes[2].plot(x, row, alpha=0.3, linewidth=0.8, color="tab:green")
        axes[2].plot(x, m["retrieval"], marker="o", color="tab:green", label="mean over pairs")
        axes[2].set_ylim(0, 1.02)
    axes[1].set_title("SVCCA of mean-pooled sentences")
    axes[2].set_title("cross-lingual retrieval (cosine NN)")
    for ax in axes:
        ax.set_xticks(x, r.layers)
        ax.set_xlabel("layer")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    return save_figure(fig, out_png)


def plot_confusion(r: EncoderAnalysis, out_png: Path) -> Path:
    """Row-normalised language-ID confusion matrix (paper 004, Figure 4)."""
    counts = np.asarray(r.confusion, dtype=float)
    share = counts / np.maximum(counts.sum(1, keepdims=True), 1)
    n = len(r.languages)
    fig, ax = plt.subplots(figsize=(1.0 * n + 2.5, 0.9 * n + 1.8))
    im = ax.imshow(share, cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(n), r.languages)
    ax.set_yticks(range(n), r.languages)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    for i in range(n):
        for j in range(n):
            ax.text(j, i, f"{share[i, j]:.2f}", ha="center", va="center", fontsize=8,
                    color="black" if share[i, j] > 0.5 else "white")
    ax.set_title(f"token language ID from the encoder output: {_pct(r.language_id_accuracy)}%", fontsize=10)
    fig.colorbar(im, ax=ax, fraction=0.046)
    return save_figure(fig, out_png)
