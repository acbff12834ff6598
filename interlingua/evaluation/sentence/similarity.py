"""Semantic similarity: unsupervised cosine on STS12-16, trainable relatedness on STS-B and SICK-R.

Unsupervised: cosine of the two sentence vectors against the gold score, Pearson and Spearman
per subset, aggregated per year as SentEval does (plain mean and mean weighted by subset size).
Trainable: SentEval's relatedness model (Tai et al., 2015): a softmax layer over the integer
score points, trained to match the gold score's two-point distribution, the prediction being
the expected score; early stopping on dev Pearson. Correlations are plain fractions (not %).
"""
from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from numpy.typing import ArrayLike
from scipy.stats import pearsonr, spearmanr
from sklearn.preprocessing import StandardScaler

from interlingua.evaluation.sentence.compute import single_thread
from interlingua.evaluation.sentence.features import cosine_rows, pair_features
from interlingua.evaluation.sentence.protocol import CachedEmbedder, EvaluationError
from interlingua.evaluation.sentence.tasks import Pairs


def correlations(pred: ArrayLike, gold: ArrayLike) -> dict:
    """Pearson and Spearman of predictions against gold; a constant prediction scores 0 (as SentEval)."""
    pred = np.asarray(pred, dtype=np.float64)
    gold = np.asarray(gold, dtype=np.float64)
    if pred.shape != gold.shape or pred.ndim != 1 or len(pred) < 2:
        raise EvaluationError(f"need two equal-length 1-D score lists of 2+ items, got {pred.shape} and {gold.shape}")
    if np.ptp(pred) == 0 or np.ptp(gold) == 0:
        return {"pearson": 0.0, "spearman": 0.0, "n": int(len(pred))}
    return {"pearson": float(pearsonr(pred, gold)[0]), "spearman": float(spearmanr(pred, gold)[0]), "n": int(len(pred))}


def aggregate(per_subset: Mapping[str, dict]) -> dict:
    """SentEval's 'all' entry: mean and size-weighted mean of the per-subset correlations."""
    n = np.array([r["n"] for r in per_subset.values()], dtype=np.float64)
    out = {}
    for metric in ("pearson", "spearman"):
        vals = np.array([r[metric] for r in per_subset.values()])
        out[metric] = {"mean": float(vals.mean()), "wmean": float((vals * n).sum() / n.sum())}
    return out


def sts_cosine(encoder: CachedEmbedder, subsets: Mapping[str, Pairs]) -> dict:
    """Unsupervised STS of one year: cosine similarity vs gold for each subset, plus the aggregate."""
    per = {}
    for name, pairs in subsets.items():
        sims = cosine_rows(encoder.mean(pairs.a, "en"), encoder.mean(pairs.b, "en"))
        per[name] = correlations(sims, pairs.gold)
    return {"subsets": per, "all": aggregate(per)}


def score_distribution(scores: Sequence[float], low: int, high: int) -> np.ndarray:
    """Tai et al.'s target: a score y between points floor(y) and floor(y)+1 split its mass linearly."""
    y = np.clip(np.asarray(scores, dtype=np.float64), low, high) - low
    out = np.zeros((len(y), high - low + 1), dtype=np.float32)
    lo = np.floor(y).astype(int)
    frac = y - lo
    rows = np.arange(len(y))
    out[rows, lo] = 1.0 - frac
    upper = np.minimum(lo + 1, high - low)
    out[rows, upper] += frac
    return out


def relatedness_regression(train: tuple[np.ndarray, Sequence[float]], dev: tuple[np.ndarray, Sequence[float]],
                           test: tuple[np.ndarray, Sequence[float]], *, score_range: tuple[int, int],
                           seed: int = 0, epochs_per_round: int = 10, patience: int = 3, max_rounds: int = 30,
                           batch_size: int = 64) -> dict:
    """Train SentEval's relatedness model on pair features; Pearson/Spearman/MSE of the expected score on test."""
    (X_tr, y_tr), (X_dev, y_dev), (X_te, y_te) = train, dev, test
    low, high = score_range
    scaler = StandardScaler().fit(X_tr)
    T_tr, T_dev, T_te = (torch.from_numpy(scaler.transform(x).astype(np.float32)) for x in (X_tr, X_dev, X_te))
    target = torch.from_numpy(score_distribution(y_tr, low, high))
    points = torch.arange(low, high + 1, dtype=torch.float32)
    with torch.random.fork_rng(), single_thread():
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(T_tr.shape[1], high - low + 1), torch.nn.Softmax(dim=-1))
        opt = torch.optim.Adam(model.parameters())
        gen = torch.Generator().manual_seed(seed)

        def predict(X: torch.Tensor) -> np.ndarray:
            model.eval()
            with torch.no_grad():
                return (model(X) @ points).numpy()

        best, best_state, bad, rounds = -2.0, None, 0, 0
        while rounds < max_rounds and bad <= patience:
            model.train()
            for _ in range(epochs_per_round):
                for idx in torch.randperm(len(T_tr), generator=gen).split(batch_size):
                    loss = torch.nn.functional.mse_loss(model(T_tr[idx]), target[idx], reduction="sum")
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            rounds += 1
            dev_r = correlations(predict(T_dev), y_dev)["pearson"]
            if dev_r > best:
                best, best_state, bad = dev_r, copy.deepcopy(model.state_dict()), 0
            else:
                bad += 1
        assert best_state is not None  # the first round's dev Pearson (in [-1, 1]) beats -2.0
        model.load_state_dict(best_state)
        pred = predict(T_te)
    res = correlations(pred, y_te)
    res.update(dev_pearson=float(best), mse=float(np.mean((pred - np.asarray(y_te)) ** 2)),
               epochs=rounds * epochs_per_round)
    return res


def trainable_relatedness(encoder: CachedEmbedder, splits: Mapping[str, Pairs], *, score_range: tuple[int, int],
                          features: str = "full", seed: int = 0) -> dict:
    """STS-B (0-5) or SICK-R (1-5): pair features of frozen vectors -> relatedness model -> test correlations."""
    feats = {}
    for split in ("train", "dev", "test"):
        pairs = splits[split]
        feats[split] = (pair_features(encoder.mean(pairs.a, "en"), encoder.mean(pairs.b, "en"), features), pairs.gold)
    res = relatedness_regression(feats["train"], feats["dev"], feats["test"], score_range=score_range, seed=seed)
    res.update(n_train=len(splits["train"]), n_dev=len(splits["dev"]), n_test=len(splits["test"]))
    return res
