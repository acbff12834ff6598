"""The encoder analysis as markdown tables and PNG figures (per-layer curves, language-ID confusion)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from interlingua.evaluation.encoder_record import EncoderAnalysis  # noqa: E402
from interlingua.figures import save_figure  # noqa: E402


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def _per_layer(layers: list[str], columns: dict[str, list[float]], fmt=_pct) -> list[str]:
    """One row per layer, one column per key of `columns`."""
    return _table(["layer", *columns], [[name, *(fmt(col[i]) for col in columns.values())]
                                        for i, name in enumerate(layers)])


def _f3(v: float) -> str:
    return f"{v:.3f}"


CONFOUND_NOTE = ("† The paper's SVCCA keeping 99% of the variance, for continuity only: its score changes with "
                 "the number of directions it keeps (`kept`, mean over languages), which follows the layer's "
                 "spectrum (independent Gaussian data of 1000 rows: about 0.08 with 10 directions kept, 0.30 with "
                 "125), and its Gaussian reference keeps nearly every direction; do not compare it across layers.")


def _similarity_note(r: EncoderAnalysis) -> str:
    used = sorted({k for row in r.svcca_fixed_k.values() for k in row})
    ks = (f"k = {r.svcca_k} directions in every layer and pair" if used == [r.svcca_k] else
          f"k = {r.svcca_k} asked, {', '.join(map(str, used))} used (fewer where the states have lower rank; "
          "per pair and layer: `svcca_fixed_k` in the JSON)")
    return (f"Fixed-k SVCCA ({ks}) and linear CKA between the languages' mean-pooled sentence states, "
            f"each beside two references (means of {r.similarity_draws}): *permuted*, the same states with each "
            "sentence paired with another sentence's translation (each language's spectrum kept, the pairing "
            "broken), the one to read the score against; *Gaussian*, independent Gaussian data of the same shapes.")


def markdown(r: EncoderAnalysis) -> str:
    m = r.means()
    head = [f"# Encoder analysis: {r.checkpoint or 'model'} ({r.encoder} encoder)", "",
            f"Probes trained on `{r.train_split}`, scored on `{r.split}` of {r.corpus}; languages: "
            f"{', '.join(r.languages)}. Layer `emb` is the embeddings as the first layer sees them, "
            f"layer {r.layers[-1]} the encoder output. Accuracies in %.", ""]
    summary: list[tuple[str, list[float], Callable[[float], str]]] = [
        ("token id", m["token_accuracy"], _pct), ("position", m["position_accuracy"], _pct)]
    if r.svcca_fixed:
        summary += [(f"SVCCA k={r.svcca_k}", m["svcca_fixed"], _f3), ("permuted", m["svcca_fixed_permuted"], _f3),
                    ("Gaussian", m["svcca_fixed_gaussian"], _f3), ("CKA", m["cka"], _f3),
                    ("permuted ", m["cka_permuted"], _f3), ("Gaussian ", m["cka_gaussian"], _f3),
                    ("retrieval", m["retrieval"], _pct), ("SVCCA 99% †", m["svcca_99"], _f3),
                    ("Gaussian †", m["svcca_99_random"], _f3), ("kept †", m["svcca_99_kept"], lambda v: f"{v:.1f}")]
    rows = [[name, *(fmt(col[i]) for _, col, fmt in summary)] for i, name in enumerate(r.layers)]
    lines = head + ["## Averages per layer", "", *_table(["layer", *(h.strip() for h, _, _ in summary)], rows), ""]
    if r.svcca_fixed:
        lines += [_similarity_note(r), "", CONFOUND_NOTE, ""]
    lines += ["## Token-identity probe per language", "", *_per_layer(r.layers, r.token_accuracy),
              "| ceiling | " + " | ".join(_pct(r.token_ceiling[lang]) for lang in r.token_accuracy) + " |", "",
              "Ceiling: test tokens whose id occurs in the training split (unseen ids count as wrong).", ""]
    lines += ["## Position probe per language", "", *_per_layer(r.layers, r.position_accuracy), ""]
    if r.svcca_fixed:
        pairs = [f"{p} ({r.pair_sentences[p]})" for p in r.svcca_fixed]

        def per_pair(cell: Callable[[str, int], str]) -> list[str]:
            return _table(["layer", *pairs], [[name, *(cell(p, i) for p in r.svcca_fixed)]
                                              for i, name in enumerate(r.layers)])

        lines += [f"## Fixed-k SVCCA (k = {r.svcca_k}) per language pair (sentences); permuted / Gaussian "
                  "reference in brackets", "",
                  *per_pair(lambda p, i: f"{r.svcca_fixed[p][i]:.3f} ({r.svcca_fixed_permuted[p][i]:.3f} / "
                                         f"{r.svcca_fixed_gaussian[p][i]:.3f})"), ""]
        lines += ["## Linear CKA per language pair; permuted / Gaussian reference in brackets", "",
                  *per_pair(lambda p, i: f"{r.cka[p][i]:.3f} ({r.cka_permuted[p][i]:.3f} / "
                                         f"{r.cka_gaussian[p][i]:.3f})"), ""]
        lines += ["## Retrieval accuracy per language pair (both directions)", "",
                  *_per_layer(r.layers, r.retrieval), ""]
        lines += ["## SVCCA at 99% of the variance per language pair, confounded (†): Gaussian reference in "
                  "brackets, then the directions kept by each language", "",
                  *per_pair(lambda p, i: f"{r.svcca_99[p][i]:.3f} ({r.svcca_99_random[p][i]:.3f}), "
                                         f"kept {r.svcca_99_kept[p][i][0]} / {r.svcca_99_kept[p][i][1]}"), ""]
    else:
        lines += ["SVCCA, CKA and retrieval need two languages with parallel test sentences.", ""]
    if r.confusion:
        lines += [f"## Language identification from the encoder output: {_pct(r.language_id_accuracy)}%", "",
                  "Rows: true language, columns: predicted (token counts).", "",
                  *_table(["", *r.languages], [[a, *map(str, row)] for a, row in zip(r.languages, r.confusion)]), ""]
    return "\n".join(lines)


def plot_layers(r: EncoderAnalysis, out_png: Path) -> Path:
    """Per-layer curves: probe accuracies; fixed-k SVCCA and CKA beside their references; the
    confounded 99% SVCCA with the directions it kept; retrieval accuracy."""
    m = r.means()
    x = np.arange(len(r.layers))
    fig, axes = plt.subplots(1, 4, figsize=(20, 4))
    ax = axes[0]
    for name, table, color in (("token id", r.token_accuracy, "tab:blue"),
                               ("position", r.position_accuracy, "tab:red")):
        for row in table.values():
            ax.plot(x, row, color=color, alpha=0.3, linewidth=0.8)
        ax.plot(x, m["token_accuracy" if name == "token id" else "position_accuracy"], color=color, marker="o",
                label=f"{name} (mean; thin: per language)")
    ax.set_title("linear probes (test accuracy)")
    ax.set_ylim(0, 1.02)
    if r.svcca_fixed:
        for key, name, color in (("svcca_fixed", f"SVCCA k={r.svcca_k}", "tab:purple"), ("cka", "CKA", "tab:orange")):
            axes[1].plot(x, m[key], marker="o", color=color, label=name)
            axes[1].plot(x, m[f"{key}_permuted"], linestyle="--", color=color, alpha=0.7, label=f"{name}, permuted")
            axes[1].plot(x, m[f"{key}_gaussian"], linestyle=":", color=color, alpha=0.7, label=f"{name}, Gaussian")
        axes[1].set_ylim(0, 1.02)
        axes[2].plot(x, m["svcca_99"], marker="o", color="gray", label="between languages")
        axes[2].plot(x, m["svcca_99_random"], linestyle=":", color="gray", label="Gaussian")
        axes[2].set_ylim(0, 1.02)
        kept = axes[2].twinx()
        kept.plot(x, m["svcca_99_kept"], marker="s", color="tab:brown", alpha=0.6, label="directions kept (right)")
        kept.set_ylim(0, None)
        kept.set_ylabel("directions kept")
        kept.legend(fontsize=7, loc="lower right")
        for row in r.retrieval.values():
            axes[3].plot(x, row, alpha=0.3, linewidth=0.8, color="tab:green")
        axes[3].plot(x, m["retrieval"], marker="o", color="tab:green", label="mean over pairs")
        axes[3].set_ylim(0, 1.02)
    axes[1].set_title("between languages (mean-pooled sentences)")
    axes[2].set_title("SVCCA at 99% variance (confounded)")
    axes[3].set_title("cross-lingual retrieval (cosine NN)")
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
