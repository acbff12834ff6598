"""Probing classifiers: SentEval's MLP probe (200 sigmoid hidden units, dropout 0.1) on frozen vectors.

The probe is SentEval's `MLP` (Linear -> Dropout -> Sigmoid -> Linear, Adam, batch 64,
4 passes between dev checks, stop after 5 checks without gain, L2 chosen on dev from 1e-5..1e-2).
Features are standardised on the training split. Per-head probing (paper 000, Sec. 5.3) trains
the same probe on each bridge head's d-vector alone, with the L2 value chosen for the mean vector.

Every fit of one call (the L2 grid, or the k heads) trains at once as a stack of independent
MLPs: one batched matrix product per layer instead of one small product per model. The probe
is so small that per-step overhead weighs as much as its arithmetic, so the stack saves time:
1.3x for the four L2 values and 1.4x for ten heads with 2 classes, 1.1x with 1,000 classes,
against one fit per member on synthetic 512-d features (`python bench/sentence_fit_speed.py`,
bench/results/sentence_fit_speed.jsonl). Adam is element-wise, so a stack trains each member
exactly as a lone model would (same batches, its own L2).
"""
from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
from sklearn.preprocessing import StandardScaler

from interlingua.evaluation.sentence.compute import single_thread
from interlingua.evaluation.sentence.probing_sets import ProbingTask
from interlingua.evaluation.sentence.protocol import CachedEmbedder, EvaluationError


@dataclass(frozen=True)
class ProbeConfig:
    """Probe hyper-parameters; the defaults are the papers' (SentEval's recommended probing setup)."""

    hidden: int = 200
    dropout: float = 0.1
    batch_size: int = 64
    epoch_size: int = 4  # passes over the training data between two dev checks
    max_epochs: int = 20  # dev checks at most (SentEval: 50; 1,000-class WC crawls on until it)
    tenacity: int = 5  # dev checks without improvement before stopping
    l2_grid: tuple[float, ...] = (1e-5, 1e-4, 1e-3, 1e-2)
    lr: float = 1e-3


class StackedMLP(torch.nn.Module):
    """`models` independent probes (Linear -> Dropout -> Sigmoid -> Linear) as batched products.

    Input (models or 1, batch, d_in): a leading 1 feeds the same vectors to every member."""

    def __init__(self, models: int, d_in: int, hidden: int, n_classes: int, dropout: float):
        super().__init__()

        def uniform(*shape: int, fan_in: int) -> torch.nn.Parameter:  # nn.Linear's default bound
            bound = 1.0 / math.sqrt(fan_in)
            return torch.nn.Parameter(torch.empty(*shape).uniform_(-bound, bound))

        self.w1, self.b1 = uniform(models, d_in, hidden, fan_in=d_in), uniform(models, 1, hidden, fan_in=d_in)
        self.w2, self.b2 = (uniform(models, hidden, n_classes, fan_in=hidden),
                            uniform(models, 1, n_classes, fan_in=hidden))
        self.dropout = torch.nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.sigmoid(self.dropout(torch.matmul(x, self.w1) + self.b1))
        return torch.matmul(hidden, self.w2) + self.b2


def _accuracies(probes: StackedMLP, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Accuracy of each member, shape (members,)."""
    probes.eval()
    with torch.no_grad():
        if not len(y):
            return torch.zeros(probes.w1.shape[0])
        return (probes(X).argmax(-1) == y).float().mean(-1)


def train_probes(X_tr: torch.Tensor, y_tr: torch.Tensor, X_dev: torch.Tensor, y_dev: torch.Tensor, n_classes: int,
                 *, l2s: Sequence[float], cfg: ProbeConfig, seed: int) -> tuple[StackedMLP, list[float], list[int]]:
    """Train len(l2s) probes with early stopping on dev accuracy, each keeping its best weights.

    X_tr / X_dev: (len(l2s) or 1, n, d). Returns the stack, each member's best dev accuracy and
    the number of dev checks it ran before stopping."""
    m = len(l2s)
    with torch.random.fork_rng(), single_thread():
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        probes = StackedMLP(m, X_tr.shape[-1], cfg.hidden, n_classes, cfg.dropout)
        params = list(probes.parameters())
        decay = torch.tensor(l2s, dtype=torch.float32)
        opt = torch.optim.Adam(params, lr=cfg.lr)
        best = [-1.0] * m
        best_weights: list[list[torch.Tensor] | None] = [None] * m
        bad, checks, running = [0] * m, [0] * m, [True] * m
        epoch = 0
        while epoch < cfg.max_epochs and any(running):
            probes.train()
            for _ in range(cfg.epoch_size):
                for idx in torch.randperm(X_tr.shape[1], generator=gen).split(cfg.batch_size):
                    logits = probes(X_tr[:, idx])                                 # (m, b, c)
                    target = y_tr[idx].expand(m, -1)
                    per_model = torch.nn.functional.cross_entropy(
                        logits.reshape(-1, n_classes), target.reshape(-1), reduction="none").view(m, -1).mean(1)
                    opt.zero_grad()
                    per_model.sum().backward()
                    with torch.no_grad():  # L2 as torch.optim.Adam(weight_decay=...) applies it, per member
                        for p in params:
                            assert p.grad is not None  # backward() has just set it
                            p.grad.add_(p * decay.view(-1, *([1] * (p.dim() - 1))))
                    opt.step()
            epoch += 1
            accs = _accuracies(probes, X_dev, y_dev).tolist()
            for i in range(m):
                if not running[i]:
                    continue
                checks[i] = epoch
                if accs[i] > best[i]:
                    best[i], bad[i] = accs[i], 0
                    best_weights[i] = [p[i].detach().clone() for p in params]
                else:
                    bad[i] += 1
                    running[i] = bad[i] <= cfg.tenacity
        with torch.no_grad():
            for i, weights in enumerate(best_weights):
                assert weights is not None  # the first dev check (accuracy >= 0) beats -1.0
                for p, w in zip(params, weights):
                    p[i].copy_(w)
    return probes, best, checks


def _standardise(train: np.ndarray, *others: np.ndarray) -> list[torch.Tensor]:
    """Scale each member's features with a StandardScaler fitted on its own training split.

    All arrays are (members, n, d) with the same number of members."""
    scalers = [StandardScaler().fit(member) for member in train]
    return [torch.from_numpy(np.stack([sc.transform(member) for sc, member in zip(scalers, x)]).astype(np.float32))
            for x in (train, *others)]


def probe_accuracies(X_tr: np.ndarray, y_tr: Sequence, X_dev: np.ndarray, y_dev: Sequence, X_te: np.ndarray,
                     y_te: Sequence, *, l2s: Sequence[float], cfg: ProbeConfig = ProbeConfig(),
                     seed: int = 0) -> list[dict]:
    """Test accuracy (%) of len(l2s) probes trained side by side; labels may be any hashable values.

    X_*: (len(l2s), n, d), one feature set per probe, or (1, n, d) shared by all of them."""
    classes = sorted(set(y_tr), key=str)
    if len(classes) < 2:
        raise EvaluationError("a probe needs at least two classes in its training labels")
    index = {c: i for i, c in enumerate(classes)}

    def labels(y: Sequence) -> torch.Tensor:  # a class never seen in training can only be wrong: -1
        return torch.tensor([index.get(c, -1) for c in y], dtype=torch.long)

    S_tr, S_dev, S_te = _standardise(X_tr, X_dev, X_te)
    t_tr, t_dev, t_te = labels(y_tr), labels(y_dev), labels(y_te)
    probes, devs, checks = train_probes(S_tr, t_tr, S_dev, t_dev, len(classes), l2s=l2s, cfg=cfg, seed=seed)
    tests = _accuracies(probes, S_te, t_te).tolist()
    return [{"acc": 100.0 * test, "dev_acc": 100.0 * dev, "l2": l2, "epochs": n, "n_classes": len(classes),
             "n_train": len(t_tr), "n_test": len(t_te)} for test, dev, n, l2 in zip(tests, devs, checks, l2s)]


def probe_accuracy(X_tr: np.ndarray, y_tr: Sequence, X_dev: np.ndarray, y_dev: Sequence, X_te: np.ndarray,
                   y_te: Sequence, *, cfg: ProbeConfig = ProbeConfig(), seed: int = 0,
                   l2_grid: Sequence[float] | None = None) -> dict:
    """Test accuracy (%) of the probe whose L2 scored best on dev (the first such on a tie)."""
    grid = list(l2_grid or cfg.l2_grid)
    results = probe_accuracies(X_tr[None], y_tr, X_dev[None], y_dev, X_te[None], y_te, l2s=grid, cfg=cfg, seed=seed)
    return max(results, key=lambda r: r["dev_acc"])


@dataclass
class ProbeFeatures:
    """One probe job's vectors and labels, encoded in the main process, fitted anywhere (picklable).

    `heads` holds the (k, n, d) per-head vectors of the train (capped), dev and test splits,
    `heads_skipped` why there are none."""

    task: str
    X: dict[str, np.ndarray]
    y: dict[str, list]
    heads: dict[str, np.ndarray] | None = None
    head_train_labels: list | None = None
    heads_skipped: str | None = None


def probe_features(encoder: CachedEmbedder, task: ProbingTask, *, per_head: bool = False,
                   per_head_train: int | None = None, seed: int = 0) -> ProbeFeatures:
    """Encode one task's splits (mean vectors; with `per_head`, also each head, training split capped)."""
    splits = ("train", "dev", "test")
    feats = ProbeFeatures(task.name, X={s: encoder.mean(getattr(task, s).texts, task.lang) for s in splits},
                          y={s: list(getattr(task, s).labels) for s in splits})
    if not per_head:
        return feats
    feats.heads_skipped = encoder.heads_unavailable(task.lang)
    if feats.heads_skipped:
        return feats
    train_idx = np.arange(len(feats.y["train"]))
    if per_head_train is not None and len(train_idx) > per_head_train:
        train_idx = np.sort(np.random.default_rng(seed).choice(len(train_idx), per_head_train, replace=False))
    texts = {"train": [task.train.texts[i] for i in train_idx], "dev": task.dev.texts, "test": task.test.texts}
    feats.heads = {s: encoder.heads(texts[s], task.lang).transpose(1, 0, 2) for s in splits}  # (k, n, d)
    feats.head_train_labels = [feats.y["train"][i] for i in train_idx]
    return feats


def fit_probe(feats: ProbeFeatures, *, cfg: ProbeConfig = ProbeConfig(), seed: int = 0,
              per_head_checks: int | None = 10) -> dict:
    """Probe the mean vector, and each head alone when `feats` has heads; `fit_s` is the fitting time.

    The k per-head probes train side by side with the L2 chosen for the mean vector, for at
    most `per_head_checks` dev checks."""
    start = time.perf_counter()
    X, y = feats.X, feats.y
    res = probe_accuracy(X["train"], y["train"], X["dev"], y["dev"], X["test"], y["test"], cfg=cfg, seed=seed)
    if feats.heads_skipped:
        res["per_head"] = {"skipped": feats.heads_skipped}
    elif feats.heads is not None:
        H = feats.heads
        assert feats.head_train_labels is not None  # `probe_features` sets it with `heads`
        head_cfg = replace(cfg, max_epochs=per_head_checks) if per_head_checks else cfg
        heads = probe_accuracies(H["train"], feats.head_train_labels, H["dev"], y["dev"], H["test"], y["test"],
                                 l2s=[res["l2"]] * H["train"].shape[0], cfg=head_cfg, seed=seed)
        res["per_head"] = {"acc": [r["acc"] for r in heads], "n_train": len(feats.head_train_labels), "l2": res["l2"],
                           "max_checks": head_cfg.max_epochs}
    res["fit_s"] = round(time.perf_counter() - start, 2)
    return res

