"""How language-agnostic aligned sentence vectors are: the vector half of `interlingua evaluate crosslingual`.

Input: one (n, d) array per language, row i of every array the same sentence. Per ordered pair
(src, tgt): top-1 translation retrieval (sentence/retrieval.py: plain cosine, per-language centred
cosine, and both with LASER's ratio margin), and the cosine margin, the mean over source sentences
of cos(x, its translation) - cos(x, the nearest other target sentence): positive where translations
are nearer than anything else. Over all languages: a linear language probe, fitted on half of the
sentence indices and scored on the other half, so no sentence is seen in training in one language
and tested in another. Percentages for accuracies, raw cosines for the rest.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from interlingua.evaluation.cosine import cosine_matrix
from interlingua.evaluation.sentence.classification import logreg
from interlingua.evaluation.sentence.protocol import EvaluationError
from interlingua.evaluation.sentence.retrieval import centered, retrieval_tables

RETRIEVAL_KEYS = {"cosine": "retrieval", "centered": "retrieval_centered", "margin": "retrieval_ratio_margin",
                  "centered_margin": "retrieval_centered_ratio_margin"}
"""sentence/retrieval.py's method -> the per-pair key of its top-1 accuracy (%)."""

MIN_SENTENCES = 4
"""Two sentences per half for the probe, and k = 4 neighbours for the ratio margin."""


def similarity_gaps(src: np.ndarray, tgt: np.ndarray) -> dict[str, float]:
    """Means over source rows: cosine to the translation (the same row), to an unrelated target (the
    mean over all other rows: the expectation for a random one), to the nearest unrelated target, and
    the margin (translation minus nearest unrelated)."""
    sim = cosine_matrix(src, tgt)
    translation = np.diag(sim).copy()
    others = sim.copy()
    np.fill_diagonal(others, -np.inf)
    nearest = others.max(axis=1)
    unrelated = (sim.sum(axis=1) - translation) / (len(sim) - 1)
    return {"margin": float(np.mean(translation - nearest)), "cos_translation": float(translation.mean()),
            "cos_unrelated": float(unrelated.mean()), "cos_nearest_unrelated": float(nearest.mean())}


def pair_vector_scores(vectors: Mapping[str, np.ndarray], k: int = 4) -> dict[tuple[str, str], dict[str, float]]:
    """Retrieval accuracies (%) and similarity gaps (plain, and `margin_centered` on per-language centred
    vectors) for every ordered pair of languages."""
    _check_aligned(vectors)
    tables = retrieval_tables(vectors, k=min(k, _size(vectors)))
    langs = list(vectors)
    out: dict[tuple[str, str], dict[str, float]] = {}
    for s in langs:
        for t in langs:
            if s == t:
                continue
            row = {key: tables[method][s][t] for method, key in RETRIEVAL_KEYS.items()}
            row.update(similarity_gaps(vectors[s], vectors[t]))
            row["margin_centered"] = similarity_gaps(centered(vectors[s]), centered(vectors[t]))["margin"]
            out[(s, t)] = row
    return out


def probe_halves(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Sentence indices split in two seeded random halves (training, test), each sorted."""
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[: n // 2]), np.sort(order[n // 2:])


def language_probe_accuracy(vectors: Mapping[str, np.ndarray], train: np.ndarray, test: np.ndarray,
                            seed: int = 0) -> float:
    """Test accuracy (%) of standardised logistic regression guessing the language from a vector, fitted
    on the `train` sentence indices of every language and scored on the `test` ones."""
    def stack(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = np.concatenate([np.asarray(v, dtype=np.float64)[idx] for v in vectors.values()])
        return x, np.repeat(np.arange(len(vectors)), len(idx))

    x_train, y_train = stack(train)
    x_test, y_test = stack(test)
    classifier = logreg(seed=seed).fit(x_train, y_train)
    return 100.0 * float(np.mean(classifier.predict(x_test) == y_test))


def language_probe(vectors: Mapping[str, np.ndarray], seed: int = 0) -> dict[str, float | int]:
    """The probe's accuracy beside chance (1 / languages). Not on centred vectors: with every language's
    mean removed a linear probe has no mean difference left to find (it is at chance by construction), and
    centring on all sentences makes each language's training half point away from its test half (below chance)."""
    _check_aligned(vectors)
    train, test = probe_halves(_size(vectors), seed)
    return {"accuracy": language_probe_accuracy(vectors, train, test, seed), "chance": 100.0 / len(vectors),
            "train_sentences": len(train), "test_sentences": len(test)}


def _size(vectors: Mapping[str, np.ndarray]) -> int:
    return len(next(iter(vectors.values())))


def _check_aligned(vectors: Mapping[str, np.ndarray]) -> None:
    """Two or more languages of one shape, with enough sentences for the probe's halves and the margin's k."""
    if len(vectors) < 2:
        raise EvaluationError(f"cross-lingual scores need two or more languages, got {list(vectors)}")
    shapes = {lang: np.shape(v) for lang, v in vectors.items()}
    if len(set(shapes.values())) != 1 or any(len(shape) != 2 for shape in shapes.values()):
        raise EvaluationError(f"cross-lingual scores need aligned (n, d) arrays of one shape, got {shapes}")
    if _size(vectors) < MIN_SENTENCES:
        raise EvaluationError(f"cross-lingual scores need at least {MIN_SENTENCES} aligned sentences, "
                              f"got {_size(vectors)}")
