"""Similarity: cosine STS must equal scipy's correlations; the relatedness model must learn a clean signal."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr
from test_sentence_eval_fakes import HashedBagOfWords, LookupEmbedder, need_data

from interlingua.evaluation.sentence.features import cosine_rows, pair_features
from interlingua.evaluation.sentence.protocol import CachedEmbedder, EvaluationError
from interlingua.evaluation.sentence.similarity import (
    aggregate,
    correlations,
    relatedness_regression,
    score_distribution,
    sts_cosine,
    trainable_relatedness,
)
from interlingua.evaluation.sentence.tasks import STS_SUBSETS, Pairs, load_sick, load_sts, load_stsb, subsample


@pytest.fixture(scope="module")
def data_root():
    return need_data("senteval_downstream", "STS").parent.parent


def test_sts_loader_drops_unscored_pairs_and_skips_smt(data_root):
    sts15 = load_sts(data_root, "STS15")
    assert len(sts15["answers-forums"]) == 375  # 2000 lines, 1625 without a gold score
    assert set(load_sts(data_root, "STS13")) == set(STS_SUBSETS["STS13"]) and "SMT" not in STS_SUBSETS["STS13"]
    stsb = load_stsb(data_root)
    assert [len(stsb[s]) for s in ("train", "dev", "test")] == [5749, 1500, 1379]
    sick = load_sick(data_root, "relatedness")
    assert [len(sick[s]) for s in ("train", "dev", "test")] == [4500, 500, 4927]
    assert 1.0 <= min(sick["train"].gold) and max(sick["train"].gold) <= 5.0


def test_cosine_sts_matches_scipy(data_root):
    pairs = {k: subsample(v, 150, seed=0) for k, v in load_sts(data_root, "STS14").items()}
    fake = HashedBagOfWords(dim=32)
    res = sts_cosine(CachedEmbedder("bow", fake), pairs)
    for name, p in pairs.items():
        u, v = fake.encode(p.a, "en"), fake.encode(p.b, "en")
        cos = np.array([a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
                        if np.linalg.norm(a) * np.linalg.norm(b) else 0.0
                        for a, b in zip(u, v)])
        assert res["subsets"][name]["pearson"] == pytest.approx(pearsonr(cos, p.gold)[0], abs=1e-6)
        assert res["subsets"][name]["spearman"] == pytest.approx(spearmanr(cos, p.gold)[0], abs=1e-6)
    n = np.array([res["subsets"][k]["n"] for k in pairs])
    r = np.array([res["subsets"][k]["pearson"] for k in pairs])
    assert res["all"]["pearson"]["mean"] == pytest.approx(r.mean())
    assert res["all"]["pearson"]["wmean"] == pytest.approx((r * n).sum() / n.sum())


def test_cosine_and_pair_features():
    u = np.array([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    v = np.array([[2.0, 0.0], [1.0, 0.0], [-1.0, -1.0]])
    np.testing.assert_allclose(cosine_rows(u, v), [1.0, 0.0, -1.0])
    assert pair_features(u, v).shape == (3, 8) and pair_features(u, v, "senteval").shape == (3, 4)
    with pytest.raises(EvaluationError, match="unknown pair features"):
        pair_features(u, v, "concat")
    assert correlations([1, 1, 1], [1, 2, 3])["pearson"] == 0.0
    assert aggregate({"a": {"pearson": 0.5, "spearman": 0.4, "n": 1}, "b": {"pearson": 1.0, "spearman": 1.0, "n": 3}}
                     )["pearson"] == {"mean": 0.75, "wmean": 0.875}


def test_score_distribution_is_tai_et_al():
    dist = score_distribution([1.0, 2.4, 5.0], 1, 5)
    np.testing.assert_allclose(dist, [[1, 0, 0, 0, 0], [0, 0.6, 0.4, 0, 0], [0, 0, 0, 0, 1]], atol=1e-6)
    np.testing.assert_allclose(dist @ np.arange(1, 6), [1.0, 2.4, 5.0], atol=1e-6)


def test_relatedness_model_recovers_a_clean_score():
    rng = np.random.default_rng(0)

    def make(n):
        X = rng.normal(size=(n, 6)).astype(np.float32)
        return X, np.clip(2.5 + X[:, 0] + 0.1 * rng.normal(size=n), 0, 5)

    res = relatedness_regression(make(600), make(200), make(300), score_range=(0, 5), epochs_per_round=5)
    assert res["pearson"] > 0.9 and res["dev_pearson"] > 0.9


def test_trainable_relatedness_end_to_end_with_an_oracle():
    rng = np.random.default_rng(1)
    splits, table = {}, {}
    for split, n in (("train", 300), ("dev", 100), ("test", 150)):
        a = [f"{split} a{i}" for i in range(n)]
        b = [f"{split} b{i}" for i in range(n)]
        gold = rng.uniform(1, 5, size=n)
        for i in range(n):  # the cosine of the pair tracks the gold score
            angle = (5 - gold[i]) / 4 * np.pi / 2
            table[a[i]] = np.array([1.0, 0.0, 0.0], np.float32)
            table[b[i]] = np.array([np.cos(angle), np.sin(angle), 0.0], np.float32)
        splits[split] = Pairs(a, b, gold.tolist())
    res = trainable_relatedness(CachedEmbedder("oracle", LookupEmbedder(table)), splits, score_range=(1, 5))
    assert res["pearson"] > 0.9 and res["n_test"] == 150
