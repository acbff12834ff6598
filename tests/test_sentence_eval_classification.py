"""SentEval classification protocol: a label oracle must score ~100%, an uninformative embedder ~chance."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from test_sentence_eval_fakes import RandomEmbedder, label_oracle, need_data

from interlingua.evaluation.sentence.classification import (
    cv_accuracy,
    evaluate_classification,
    majority_accuracy,
    task_majority,
    train_dev_test_accuracy,
)
from interlingua.evaluation.sentence.protocol import CachedEmbedder, EvaluationError
from interlingua.evaluation.sentence.tasks import (
    ClassificationTask,
    Labelled,
    MissingDataError,
    load_classification,
    subsample,
)


@pytest.fixture(scope="module")
def data_root():
    return need_data("senteval_downstream").parent


def test_loaders_read_the_documented_sizes(data_root):
    mr = load_classification(data_root, "MR")
    assert mr.protocol == "cv" and len(mr.train.texts) == 10662 and Counter(mr.train.labels) == {1: 5331, 0: 5331}
    trec = load_classification(data_root, "TREC")
    assert (len(trec.train.labels), len(trec.test.labels)) == (5452, 500)
    assert set(trec.train.labels) == {"ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"}
    sst = load_classification(data_root, "SST2", sst_train_limit=1000)
    assert (len(sst.train.labels), len(sst.dev.labels), len(sst.test.labels)) == (1000, 872, 1821)
    assert "1,000 of the 67,349" in sst.note


def test_missing_file_names_the_file(tmp_path):
    with pytest.raises(MissingDataError, match="rt-polarity.pos"):
        load_classification(tmp_path, "MR")


def test_label_oracle_scores_near_100_and_random_near_chance_on_mr(data_root):
    task = load_classification(data_root, "MR")
    task = ClassificationTask("MR", "cv", subsample(task.train, 600, seed=1))
    oracle = CachedEmbedder("oracle", label_oracle(task.train.texts, task.train.labels))
    good = evaluate_classification(task, oracle, folds=3, inner_folds=2)
    assert good["acc"] > 98.0
    rand = evaluate_classification(task, CachedEmbedder("random", RandomEmbedder(dim=16)), folds=3, inner_folds=2)
    assert 38.0 < rand["acc"] < 62.0
    assert len(good["C"]) == 3


def test_split_protocols_on_synthetic_data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 5))
    y = (X[:, 0] > 0).astype(int)
    res = train_dev_test_accuracy(X[:200], y[:200], X[200:250], y[200:250], X[250:], y[250:])
    assert res["acc"] > 90.0 and res["protocol"] == "C by dev accuracy"
    cv = cv_accuracy(X, y, folds=5, inner_folds=3)
    assert cv["acc"] > 90.0 and cv["n"] == 300
    with pytest.raises(EvaluationError, match="at least two classes"):
        cv_accuracy(X, np.zeros(300), folds=3)


def test_majority_baseline():
    assert majority_accuracy([1, 1, 0], [1, 0, 0, 0]) == 25.0
    task = ClassificationTask("x", "cv", Labelled(["t"] * 40, [0] * 30 + [1] * 10))
    assert task_majority(task, folds=5) == pytest.approx(75.0)
