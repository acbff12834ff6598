"""Translation retrieval on a multi-way parallel set: find sentence i's translation among all candidates.

Two scores: plain cosine nearest neighbour, and LASER's ratio margin (Artetxe & Schwenk,
2019), which divides the cosine by the mean similarity of both sides to their k nearest
neighbours, so "hub" sentences close to everything stop winning. A third, `centered`, is cosine
after subtracting each language's mean vector over the candidate set: mean-pooled recurrent
states share a large language-specific component, and removing it (no labels needed) shows
how much of the remaining geometry is shared across languages; `centered_margin` scores the
centred vectors by ratio margin, the two label-free corrections together. Accuracy in percent.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from interlingua.evaluation.cosine import cosine_matrix
from interlingua.evaluation.sentence.protocol import CachedEmbedder, EvaluationError

__all__ = ["METHODS", "centered", "cosine_matrix", "multiway_retrieval", "ratio_margin", "retrieval_accuracy",
           "retrieval_tables"]


def _knn_mean(sim: np.ndarray, k: int, axis: int) -> np.ndarray:
    """Mean of the k largest similarities along `axis`."""
    top = -np.partition(-sim, k - 1, axis=axis)
    return np.take(top, np.arange(k), axis=axis).mean(axis=axis)


def ratio_margin(sim: np.ndarray, k: int = 4) -> np.ndarray:
    """margin(x, y) = cos(x, y) / (knn_mean(x)/2 + knn_mean(y)/2) over a source x target cosine matrix."""
    if not 1 <= k <= min(sim.shape):
        raise EvaluationError(f"margin needs 1 <= k <= {min(sim.shape)} (the smaller side), got k={k}")
    fwd = _knn_mean(sim, k, axis=1)  # each source's k nearest targets
    bwd = _knn_mean(sim, k, axis=0)  # each target's k nearest sources
    denom = (fwd[:, None] + bwd[None, :]) / 2.0
    return np.divide(sim, denom, out=np.zeros_like(sim), where=denom != 0)


METHODS = ("cosine", "margin", "centered", "centered_margin")


def centered(vectors: np.ndarray) -> np.ndarray:
    """One language's vectors minus their mean: the label-free removal of its language-specific offset."""
    return vectors - vectors.mean(axis=0, keepdims=True)


def retrieval_accuracy(src: np.ndarray, tgt: np.ndarray, *, method: str = "cosine", k: int = 4) -> float:
    """Share (%) of source rows i whose best-scoring target row is row i."""
    if len(src) != len(tgt):
        raise EvaluationError(f"retrieval needs aligned sets of one size, "
                              f"got {len(src)} sources and {len(tgt)} targets")
    if method not in METHODS:
        raise EvaluationError(f"unknown retrieval method '{method}' (use {', '.join(map(repr, METHODS))})")
    if method in ("centered", "centered_margin"):
        src, tgt = centered(src), centered(tgt)
    sim = cosine_matrix(src, tgt)
    if method in ("margin", "centered_margin"):
        sim = ratio_margin(sim, k)
    return 100.0 * float(np.mean(sim.argmax(axis=1) == np.arange(len(src))))


def retrieval_tables(vectors: Mapping[str, np.ndarray], *, k: int = 4) -> dict[str, dict[str, dict[str, float]]]:
    """Every method's accuracy for every ordered pair of aligned per-language vectors: {method: {src: {tgt: acc}}}."""
    langs = list(vectors)
    return {method: {s: {t: retrieval_accuracy(vectors[s], vectors[t], method=method, k=k) for t in langs if t != s}
                     for s in langs} for method in METHODS}


def multiway_retrieval(encoder: CachedEmbedder, texts: Mapping[str, list[str]], *, k: int = 4) -> dict:
    """Every method's accuracy for every ordered pair of the languages the embedder has: {method: {src: {tgt: acc}}}."""
    langs = [lang for lang in texts if encoder.has(lang)]
    missing = [lang for lang in texts if not encoder.has(lang)]
    sizes = {len(v) for v in texts.values()}
    if len(sizes) != 1:
        raise EvaluationError("multi-way retrieval needs the same number of sentences per language, "
                              f"got {sorted(sizes)}")
    vecs = {lang: encoder.mean(texts[lang], lang) for lang in langs}
    out: dict = {**retrieval_tables(vecs, k=k), "languages": langs, "missing_languages": missing, "k": k,
                 "n": sizes.pop()}
    for method in METHODS:
        cells = [v for row in out[method].values() for v in row.values()]
        out[f"{method}_mean"] = float(np.mean(cells)) if cells else None
    return out
