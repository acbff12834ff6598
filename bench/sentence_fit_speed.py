"""Speed of the sentence suite's fitting choices, each timed against the alternative it replaced.

Run: python bench/sentence_fit_speed.py [--reps 3] [--out bench/results/sentence_fit_speed.jsonl]

Synthetic features (seeded `make_classification`, so no model or data set is needed); every
pair of alternatives is timed interleaved, --reps rounds, one thread (as the suite fits), and
the median of each is compared:
- "probe_stack": the probes of one call trained as one stack of MLPs (`train_probes` with all
  members) against one `train_probes` call per member; --probe-train examples of --probe-dim
  features, a fixed number of dev checks (no early stop, so both do the same steps); the L2
  grid (4 members on shared features) with 2 and with 1,000 classes, and the k = 10 per-head
  probes (own features each) with 2 classes;
- "c_search": the C search of `tuned_logreg` (warm-started LogisticRegressionCV) against a
  GridSearchCV over the same C grid, folds and tolerance, on a TREC-sized problem (--lr-train
  examples, 6 classes, --lr-dim features), and whether both pick the same C;
- "logreg_tol": one `logreg` fit at tol 1e-3 (the suite's) against scikit-learn's default 1e-4,
  with the test accuracy of each.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _results import append_result  # noqa: E402
from sklearn.datasets import make_classification  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.model_selection import GridSearchCV  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from interlingua.evaluation.sentence.classification import C_GRID, _folds, tuned_logreg  # noqa: E402
from interlingua.evaluation.sentence.compute import single_thread  # noqa: E402
from interlingua.evaluation.sentence.probing import ProbeConfig, train_probes  # noqa: E402


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def interleaved(a, b, reps: int) -> tuple[list[float], list[float]]:
    """Seconds of `reps` calls of each, alternating which goes first."""
    ta, tb = [], []
    for r in range(reps):
        for fn, times in ((a, ta), (b, tb)) if r % 2 == 0 else ((b, tb), (a, ta)):
            times.append(timed(fn))
    return ta, tb


def features(n: int, d: int, classes: int, seed: int, members: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    X, y = make_classification(n_samples=n, n_features=d, n_informative=min(d, 64), n_redundant=0, n_classes=classes,
                               n_clusters_per_class=1, random_state=seed)
    X = (X - X.mean(0)) / X.std(0)
    Xs = np.stack([X + 0.1 * np.random.default_rng(seed + i).standard_normal(X.shape) for i in range(members)])
    return torch.from_numpy(Xs.astype(np.float32)), torch.from_numpy(y)


def probe_stack(args: argparse.Namespace, classes: int, members: int, shared: bool) -> dict:
    cfg = ProbeConfig(max_epochs=args.probe_checks, tenacity=args.probe_checks)
    n_dev = 1000
    X, y = features(args.probe_train + n_dev, args.probe_dim, classes, seed=classes, members=1 if shared else members)
    n = args.probe_train
    X_tr, y_tr, X_dev, y_dev = X[:, :n], y[:n], X[:, n:], y[n:]
    l2s = list(cfg.l2_grid) if shared else [1e-4] * members

    def stacked() -> None:
        train_probes(X_tr, y_tr, X_dev, y_dev, classes, l2s=l2s, cfg=cfg, seed=0)

    def separate() -> None:
        for i, l2 in enumerate(l2s):
            j = 0 if shared else i
            train_probes(X_tr[j:j + 1], y_tr, X_dev[j:j + 1], y_dev, classes, l2s=[l2], cfg=cfg, seed=0)

    ts, tp = interleaved(stacked, separate, args.reps)
    return {"kind": "probe_stack", "what": "L2 grid" if shared else f"k = {members} per-head probes",
            "members": len(l2s), "classes": classes, "train": args.probe_train, "dev": n_dev, "dim": args.probe_dim,
            "dev_checks": args.probe_checks, "stacked_s": [round(t, 3) for t in ts],
            "separate_s": [round(t, 3) for t in tp],
            "speedup_median": round(statistics.median(tp) / statistics.median(ts), 2)}


def grid_search(X: np.ndarray, y: np.ndarray, folds: int) -> float:
    """The C search `tuned_logreg` replaced: GridSearchCV over the same grid, folds and tolerance."""
    search = GridSearchCV(make_pipeline(StandardScaler(), LogisticRegression(tol=1e-3, max_iter=2000, random_state=0)),
                          {"logisticregression__C": list(C_GRID)}, cv=_folds(y, folds, 0), scoring="accuracy",
                          refit=True, n_jobs=1)
    with single_thread():
        search.fit(X, y)
    return float(search.best_params_["logisticregression__C"])


def c_search(args: argparse.Namespace) -> dict:
    X, y = make_classification(n_samples=args.lr_train, n_features=args.lr_dim, n_informative=min(args.lr_dim, 64),
                               n_redundant=0, n_classes=6, n_clusters_per_class=1, flip_y=0.2, random_state=0)
    chosen = {}

    def lrcv() -> None:
        chosen["lrcv"] = tuned_logreg(X, y, folds=5, seed=0).C

    def grid() -> None:
        chosen["grid"] = grid_search(X, y, folds=5)

    tl, tg = interleaved(lrcv, grid, args.reps)
    return {"kind": "c_search", "train": args.lr_train, "classes": 6, "dim": args.lr_dim, "folds": 5,
            "C_grid": list(C_GRID),
            "lrcv_s": [round(t, 3) for t in tl], "grid_search_s": [round(t, 3) for t in tg],
            "speedup_median": round(statistics.median(tg) / statistics.median(tl), 2),
            "C_lrcv": chosen["lrcv"], "C_grid_search": chosen["grid"], "same_C": chosen["lrcv"] == chosen["grid"]}


def logreg_tol(args: argparse.Namespace) -> dict:
    X, y = make_classification(n_samples=args.lr_train + 1000, n_features=args.lr_dim,
                               n_informative=min(args.lr_dim, 64), n_redundant=0, n_classes=3, n_clusters_per_class=1,
                               flip_y=0.2, random_state=1)
    X_tr, y_tr, X_te, y_te = X[:args.lr_train], y[:args.lr_train], X[args.lr_train:], y[args.lr_train:]
    acc = {}

    def fit(tol: float):
        def run() -> None:
            with single_thread():
                model = make_pipeline(StandardScaler(),
                                      LogisticRegression(C=1.0, tol=tol, max_iter=2000, random_state=0))
                acc[tol] = round(100 * float(model.fit(X_tr, y_tr).score(X_te, y_te)), 2)
        return run

    t3, t4 = interleaved(fit(1e-3), fit(1e-4), args.reps)
    return {"kind": "logreg_tol", "train": args.lr_train, "test": 1000, "classes": 3, "dim": args.lr_dim,
            "tol_1e-3_s": [round(t, 3) for t in t3], "tol_1e-4_s": [round(t, 3) for t in t4],
            "speedup_median": round(statistics.median(t4) / statistics.median(t3), 2),
            "test_acc_tol_1e-3": acc[1e-3], "test_acc_tol_1e-4": acc[1e-4]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--probe-dim", type=int, default=512, help="features of the probes (m2m_mono_xlong's vectors: 512)")
    ap.add_argument("--probe-train", type=int, default=2000,
                    help="probe training examples (the suite's per-head cap; its mean-vector probes train on 6,000: "
                         "the time per step, and so the ratio, does not depend on it)")
    ap.add_argument("--probe-checks", type=int, default=1,
                    help="dev checks (each after 4 passes over the training data)")
    ap.add_argument("--lr-dim", type=int, default=512)
    ap.add_argument("--lr-train", type=int, default=5452, help="TREC's training size")
    ap.add_argument("--only", choices=["probe_stack", "c_search", "logreg_tol"], default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    warm_X, warm_y = features(200, 16, 2, seed=0)  # first-call costs (allocator, kernels) out of the timings
    train_probes(warm_X, warm_y, warm_X, warm_y, 2, l2s=[1e-4], cfg=ProbeConfig(max_epochs=1), seed=0)
    if args.only in (None, "probe_stack"):
        append_result(args.out, probe_stack(args, classes=2, members=4, shared=True))
        append_result(args.out, probe_stack(args, classes=2, members=10, shared=False))
        append_result(args.out, probe_stack(args, classes=1000, members=4, shared=True))
    if args.only in (None, "c_search"):
        append_result(args.out, c_search(args))
    if args.only in (None, "logreg_tol"):
        append_result(args.out, logreg_tol(args))


if __name__ == "__main__":
    main()
