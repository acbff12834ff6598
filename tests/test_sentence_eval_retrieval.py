"""Translation retrieval: identical vectors give 100%; the ratio margin removes a hub that fools cosine."""
from __future__ import annotations

import numpy as np
import pytest
from test_sentence_eval_fakes import LookupEmbedder, RandomEmbedder, need_data

from interlingua.evaluation.sentence.protocol import CachedEmbedder, EvaluationError
from interlingua.evaluation.sentence.retrieval import (
    cosine_matrix,
    multiway_retrieval,
    ratio_margin,
    retrieval_accuracy,
)
from interlingua.evaluation.sentence.tasks import MULTI30K_LANGS, load_multi30k


def test_identical_vectors_are_found_by_both_scores():
    X = np.random.default_rng(0).normal(size=(1000, 64))
    assert retrieval_accuracy(X, X.copy(), method="cosine") == 100.0
    assert retrieval_accuracy(X, X.copy(), method="margin", k=4) == 100.0


def test_margin_beats_cosine_on_a_hub():
    # target 2 is a hub: closest to every source by cosine; the margin discounts it
    sim = np.array([[0.70, 0.20, 0.75],
                    [0.20, 0.70, 0.75],
                    [0.10, 0.10, 0.90]])
    assert list(sim.argmax(axis=1)) == [2, 2, 2]
    assert list(ratio_margin(sim, k=1).argmax(axis=1)) == [0, 1, 2]


def test_margin_formula_on_a_tiny_matrix():
    sim = np.array([[0.9, 0.5], [0.4, 0.8]])
    m = ratio_margin(sim, k=1)
    # k=1: denominators (max of row i + max of column j) / 2
    assert m[0, 1] == pytest.approx(0.5 / ((0.9 + 0.8) / 2))
    with pytest.raises(EvaluationError, match="k="):
        ratio_margin(sim, k=3)


def test_multiway_on_multi30k_test():
    root = need_data("multi30k").parent
    texts = {lang: load_multi30k(root, "test_2016_flickr", lang) for lang in MULTI30K_LANGS}
    assert {len(v) for v in texts.values()} == {1000}
    # the same vector for line i in every language: a perfect cross-lingual space
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(1000, 32)).astype(np.float32)
    table = {t: vecs[i] for lang in ("en", "de", "fr") for i, t in enumerate(texts[lang])}
    res = multiway_retrieval(CachedEmbedder("perfect", LookupEmbedder(table, ["en", "de", "fr"])), texts)
    assert res["missing_languages"] == ["cs"] and res["n"] == 1000
    pairs = {(s, t) for s in ("en", "de", "fr") for t in ("en", "de", "fr") if s != t}
    for method in ("cosine", "margin", "centered", "centered_margin"):
        cells = {(s, t): v for s, row in res[method].items() for t, v in row.items()}
        assert set(cells) == pairs and all(v == 100.0 for v in cells.values()), method
        assert res[f"{method}_mean"] == 100.0
    # a space with no information: each of 1000 candidates equally likely, about 0.1% correct
    rand = multiway_retrieval(CachedEmbedder("random", RandomEmbedder()), texts)
    for method in ("cosine", "margin", "centered", "centered_margin"):
        cells = [v for row in rand[method].values() for v in row.values()]
        assert len(cells) == 12 and max(cells) <= 1.0 and rand[f"{method}_mean"] < 0.5, (method, cells)
    # lines paired with the wrong translation (shifted by one): a perfect space for another pairing scores 0
    shifted = {t: vecs[(i + 1) % 1000] for i, t in enumerate(texts["de"])}
    shifted.update({t: vecs[i] for i, t in enumerate(texts["en"])})
    off = multiway_retrieval(CachedEmbedder("shifted", LookupEmbedder(shifted, ["en", "de"])), texts)
    assert off["cosine"]["en"]["de"] == 0.0 and off["cosine"]["de"]["en"] == 0.0


def test_centering_removes_a_shared_language_offset():
    # both languages = shared meaning + a large offset of their own: cosine is swamped by the
    # offsets, centering each side on its own mean recovers the pairing
    rng = np.random.default_rng(1)
    meaning = rng.normal(size=(300, 32))
    src = meaning + 0.5 * rng.normal(size=(300, 32)) + 20 * rng.normal(size=(1, 32))
    tgt = meaning + 0.5 * rng.normal(size=(300, 32)) + 20 * rng.normal(size=(1, 32))
    assert retrieval_accuracy(src, tgt, method="cosine") < 50.0
    assert retrieval_accuracy(src, tgt, method="centered") > 95.0
    assert retrieval_accuracy(src, tgt, method="margin") < 50.0
    centred = cosine_matrix(src - src.mean(0), tgt - tgt.mean(0))
    by_hand = 100.0 * np.mean(ratio_margin(centred, 4).argmax(1) == np.arange(300))
    assert retrieval_accuracy(src, tgt, method="centered_margin") == pytest.approx(by_hand) and by_hand > 95.0
    with pytest.raises(EvaluationError, match="centered"):
        retrieval_accuracy(src, tgt, method="nearest")
