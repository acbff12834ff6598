"""SentEval's classification protocol on frozen vectors: logistic regression, L2 tuned without test data.

- no split (MR, CR, SUBJ, MPQA): 10-fold cross-validation; C chosen by inner k-fold on each
  outer training part (SentEval's InnerKFoldClassifier);
- train + test (TREC): C chosen by k-fold on train, refit on all of train (KFoldClassifier);
- train + dev + test (SST2, SICK-E): C chosen on dev (SplitClassifier).
The C grid is SentEval's scikit-learn grid, 2^-2 .. 2^3. Unlike SentEval, features are
standardised (fit on the training part only) so one C grid suits embedders of any scale.
Accuracies are percentages, as SentEval reports them.
"""
from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from sklearn.linear_model import LogisticRegression, LogisticRegressionCV
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

from interlingua.evaluation.sentence.compute import single_thread
from interlingua.evaluation.sentence.protocol import CachedEmbedder, EvaluationError
from interlingua.evaluation.sentence.tasks import ClassificationTask

C_GRID = tuple(2.0 ** t for t in range(-2, 4))


def logreg(C: float = 1.0, seed: int = 0) -> Pipeline:
    """Standardise, then multinomial L2 logistic regression.

    tol=1e-3 (scikit-learn's default is 1e-4) fit 1.3x faster than 1e-4, test accuracy within
    0.1 point, on a synthetic 3-class problem of 5,452 x 512 (`python bench/sentence_fit_speed.py`,
    bench/results/sentence_fit_speed.jsonl)."""
    return make_pipeline(StandardScaler(), LogisticRegression(C=C, tol=1e-3, max_iter=2000, random_state=seed))


def _check(X: np.ndarray, y: ArrayLike) -> np.ndarray:
    labels = np.asarray(y)
    if X.ndim != 2 or len(X) != len(labels):
        raise EvaluationError(f"features must be (n, d) with one label per row, got {X.shape} and {len(labels)} labels")
    if len(np.unique(labels)) < 2:
        raise EvaluationError("a classifier needs at least two classes in its training labels")
    return labels


def _folds(y: np.ndarray, k: int, seed: int) -> StratifiedKFold:
    smallest = min(Counter(y.tolist()).values())
    return StratifiedKFold(n_splits=max(2, min(k, smallest)), shuffle=True, random_state=seed)


# scikit-learn >= 1.8 warns unless these are given; older versions do not know them
_LRCV_NEW_API = "use_legacy_attributes" in inspect.signature(LogisticRegressionCV).parameters
_LRCV_EXTRA = {"l1_ratios": (0.0,), "use_legacy_attributes": False} if _LRCV_NEW_API else {}


@dataclass
class Tuned:
    """A logistic regression refit with the C that scored best in k-fold CV on its training data."""

    model: Pipeline
    C: float
    cv_acc: float  # mean k-fold accuracy (%) at that C

    def score(self, X: np.ndarray, y: ArrayLike) -> float:
        return float(self.model.score(X, np.asarray(y)))


def tuned_logreg(X: np.ndarray, y: ArrayLike, *, folds: int = 5, seed: int = 0) -> Tuned:
    """Logistic regression with C picked by stratified k-fold accuracy on (X, y), refit on all of it.

    LogisticRegressionCV warm-starts along the C grid: 4.0x faster than GridSearchCV over the
    same grid, folds and tolerance, with the same C chosen, on a synthetic TREC-sized problem
    (5,452 x 512, 6 classes; `python bench/sentence_fit_speed.py`,
    bench/results/sentence_fit_speed.jsonl). The scaler is fit on all of (X, y)
    before the inner folds: it sees no labels, so the C search stays honest."""
    y = _check(X, y)
    search = LogisticRegressionCV(Cs=list(C_GRID), cv=_folds(y, folds, seed), scoring="accuracy", tol=1e-3,
                                  max_iter=2000, random_state=seed, refit=True, **_LRCV_EXTRA)
    with single_thread():
        model = make_pipeline(StandardScaler(), search).fit(X, y)
    scores = search.scores_
    scores = np.asarray(next(iter(scores.values())) if isinstance(scores, dict) else scores)
    mean = scores.reshape(scores.shape[0], -1, len(C_GRID)).mean(axis=0).max(axis=0)
    return Tuned(model, float(np.ravel(search.C_)[0]), 100.0 * float(mean.max()))


def fixed_logreg(X: np.ndarray, y: ArrayLike, *, C: float, seed: int = 0) -> Pipeline:
    """Logistic regression with a given C, fit on (X, y)."""
    y = _check(X, y)
    with single_thread():
        return logreg(C, seed).fit(X, y)


def cv_accuracy(X: np.ndarray, y: ArrayLike, *, folds: int = 10, inner_folds: int = 5, seed: int = 0) -> dict:
    """Mean test accuracy over outer folds, C tuned on inner folds of each outer training part."""
    y = _check(X, y)
    accs, devs, cs = [], [], []
    for tr, te in _folds(y, folds, seed).split(X, y):
        tuned = tuned_logreg(X[tr], y[tr], folds=inner_folds, seed=seed)
        accs.append(100.0 * tuned.score(X[te], y[te]))
        devs.append(tuned.cv_acc)
        cs.append(tuned.C)
    return {"acc": float(np.mean(accs)), "acc_std": float(np.std(accs)), "dev_acc": float(np.mean(devs)),
            "C": cs, "n": int(len(y)), "protocol": f"{len(accs)}-fold CV, C by inner {inner_folds}-fold"}


def train_test_accuracy(X_train: np.ndarray, y_train: ArrayLike, X_test: np.ndarray, y_test: ArrayLike,
                        *, folds: int = 10, seed: int = 0) -> dict:
    """C tuned by k-fold on the training set, then refit on all of it and scored on test."""
    tuned = tuned_logreg(X_train, y_train, folds=folds, seed=seed)
    return {"acc": 100.0 * tuned.score(X_test, y_test), "dev_acc": tuned.cv_acc, "C": tuned.C,
            "n_train": len(X_train), "n_test": len(X_test), "protocol": f"C by {folds}-fold CV on train"}


def train_dev_test_accuracy(X_train: np.ndarray, y_train: ArrayLike, X_dev: np.ndarray, y_dev: ArrayLike,
                            X_test: np.ndarray, y_test: ArrayLike, *, seed: int = 0) -> dict:
    """C chosen by dev accuracy; the model trained with it is scored on test.

    The C grid is walked upwards with warm starts (each fit starts from the previous
    solution), which cuts the fitting time without changing what is chosen."""
    y_train = _check(X_train, y_train)
    scaler = StandardScaler().fit(X_train)
    X_tr, X_dv, X_te = (scaler.transform(x) for x in (X_train, X_dev, X_test))
    clf = LogisticRegression(tol=1e-3, max_iter=2000, warm_start=True, random_state=seed)
    best = None
    with single_thread():
        for C in sorted(C_GRID):
            clf.set_params(C=C).fit(X_tr, y_train)
            dev = 100.0 * clf.score(X_dv, np.asarray(y_dev))
            if best is None or dev > best[0]:
                best = (dev, C, 100.0 * clf.score(X_te, np.asarray(y_test)))
    assert best is not None  # C_GRID is not empty
    dev, C, test = best
    return {"acc": float(test), "dev_acc": float(dev), "C": C, "n_train": len(X_train), "n_dev": len(X_dev),
            "n_test": len(X_test), "protocol": "C by dev accuracy"}


def majority_accuracy(train_labels: Sequence, test_labels: Sequence) -> float:
    """Accuracy (%) of always answering the most frequent training class: the floor to beat."""
    top = Counter(train_labels).most_common(1)[0][0]
    return 100.0 * float(np.mean([label == top for label in test_labels]))


def evaluate_classification(task: ClassificationTask, encoder: CachedEmbedder, *, folds: int = 10, inner_folds: int = 5,
                            seed: int = 0) -> dict:
    """Run one SentEval classification set for one embedder (English side)."""
    X = encoder.mean(task.train.texts, "en")
    if task.protocol == "cv":
        return cv_accuracy(X, task.train.labels, folds=folds, inner_folds=inner_folds, seed=seed)
    assert task.test is not None, f"task {task.name}: protocol '{task.protocol}' needs a test split"
    X_test = encoder.mean(task.test.texts, "en")
    if task.protocol == "train_test":
        return train_test_accuracy(X, task.train.labels, X_test, task.test.labels, folds=folds, seed=seed)
    if task.protocol == "train_dev_test":
        assert task.dev is not None, f"task {task.name}: protocol 'train_dev_test' needs a dev split"
        X_dev = encoder.mean(task.dev.texts, "en")
        return train_dev_test_accuracy(X, task.train.labels, X_dev, task.dev.labels, X_test, task.test.labels,
                                       seed=seed)
    raise EvaluationError(f"task {task.name}: unknown protocol '{task.protocol}'")


def task_majority(task: ClassificationTask, *, folds: int = 10, seed: int = 0) -> float:
    """Majority-class accuracy under the same protocol as the embedders (CV sets: mean over folds)."""
    if task.protocol != "cv":
        assert task.test is not None, f"task {task.name}: protocol '{task.protocol}' needs a test split"
        return majority_accuracy(task.train.labels, task.test.labels)
    y = np.asarray(task.train.labels)
    return float(np.mean([majority_accuracy(y[tr], y[te]) for tr, te in _folds(y, folds, seed).split(y, y)]))
