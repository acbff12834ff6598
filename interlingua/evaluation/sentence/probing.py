"""Probing classifiers: SentEval's MLP probe (200 sigmoid hidden units, dropout 0.1) on frozen vectors.

The probe is SentEval's `MLP` (Linear -> Dropout -> Sigmoid -> Linear, Adam, batch 64,
4 passes between dev checks, stop after 5 checks without gain, L2 chosen on dev from 1e-5..1e-2). Features are
standardised on the training split. Per-head probing (paper 000, Sec. 5.3) trains the same
probe on each bridge head's d-vector alone, with the L2 value chosen for the mean vector,
so k heads cost k fits rather than 4k.
"""
from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
from sklearn.preprocessing import StandardScaler
from tqdm import tqdm

from interlingua.evaluation.sentence.compute import single_thread
from interlingua.evaluation.sentence.probing_sets import ProbingTask
from interlingua.evaluation.sentence.protocol import Encoder, EvaluationError


@dataclass(frozen=True)
class ProbeConfig:
    """Probe hyper-parameters; the defaults are the papers' (SentEval's recommended probing setup)."""

    hidden: int = 200
    dropout: float = 0.1
    batch_size: int = 64
    epoch_size: int = 4  # passes over the training data between two dev checks
    max_epochs: int = 20  # dev checks at most (SentEval: 50; 1,000-class WC crawls on until it, ~3 min a fit)
    tenacity: int = 5  # dev checks without improvement before stopping
    l2_grid: tuple[float, ...] = (1e-5, 1e-4, 1e-3, 1e-2)
    lr: float = 1e-3


def _mlp(d_in: int, n_classes: int, cfg: ProbeConfig) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(d_in, cfg.hidden), torch.nn.Dropout(cfg.dropout), torch.nn.Sigmoid(),
                               torch.nn.Linear(cfg.hidden, n_classes))


def _accuracy(model: torch.nn.Module, X: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        return float((model(X).argmax(1) == y).float().mean()) if len(y) else 0.0


def train_probe(X_tr: torch.Tensor, y_tr: torch.Tensor, X_dev: torch.Tensor, y_dev: torch.Tensor, n_classes: int,
                *, l2: float, cfg: ProbeConfig, seed: int) -> tuple[torch.nn.Module, float, int]:
    """One probe with early stopping on dev accuracy; returns (best model, its dev accuracy, dev checks run)."""
    with torch.random.fork_rng(), single_thread():
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        model = _mlp(X_tr.shape[1], n_classes, cfg)
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=l2)
        best, best_state, bad, epoch = -1.0, None, 0, 0
        while epoch < cfg.max_epochs and bad <= cfg.tenacity:
            model.train()
            for _ in range(cfg.epoch_size):
                for idx in torch.randperm(len(X_tr), generator=gen).split(cfg.batch_size):
                    loss = torch.nn.functional.cross_entropy(model(X_tr[idx]), y_tr[idx])
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            epoch += 1
            acc = _accuracy(model, X_dev, y_dev)
            if acc > best:
                best, best_state, bad = acc, copy.deepcopy(model.state_dict()), 0
            else:
                bad += 1
        model.load_state_dict(best_state)
    return model, best, epoch


def probe_accuracy(X_tr: np.ndarray, y_tr: Sequence, X_dev: np.ndarray, y_dev: Sequence, X_te: np.ndarray,
                   y_te: Sequence, *, cfg: ProbeConfig = ProbeConfig(), seed: int = 0,
                   l2_grid: Sequence[float] | None = None) -> dict:
    """Test accuracy (%) of the probe whose L2 scored best on dev; labels may be any hashable values."""
    classes = sorted(set(y_tr), key=str)
    if len(classes) < 2:
        raise EvaluationError("a probe needs at least two classes in its training labels")
    index = {c: i for i, c in enumerate(classes)}

    def labels(y: Sequence) -> torch.Tensor:  # a class never seen in training can only be wrong: -1
        return torch.tensor([index.get(c, -1) for c in y], dtype=torch.long)

    scaler = StandardScaler().fit(X_tr)
    X_tr, X_dev, X_te = (torch.from_numpy(scaler.transform(x).astype(np.float32)) for x in (X_tr, X_dev, X_te))
    t_tr, t_dev, t_te = labels(y_tr), labels(y_dev), labels(y_te)
    best = None
    for l2 in (l2_grid or cfg.l2_grid):
        model, dev, epochs = train_probe(X_tr, t_tr, X_dev, t_dev, len(classes), l2=l2, cfg=cfg, seed=seed)
        if best is None or dev > best[1]:
            best = (model, dev, epochs, l2)
    model, dev, epochs, l2 = best
    return {"acc": 100.0 * _accuracy(model, X_te, t_te), "dev_acc": 100.0 * dev, "l2": l2, "epochs": epochs,
            "n_classes": len(classes), "n_train": len(t_tr), "n_test": len(t_te)}


def run_probe(encoder: Encoder, task: ProbingTask, *, cfg: ProbeConfig = ProbeConfig(), seed: int = 0,
              per_head: bool = False, per_head_train: int | None = None, per_head_checks: int | None = 10) -> dict:
    """Probe the mean vector on one task; with `per_head`, also each bridge head alone.

    `per_head_train` caps the training split and `per_head_checks` the dev checks of the
    k per-head probes, which would otherwise cost k times the mean-vector probe."""
    X = {s: encoder.mean(getattr(task, s).texts, task.lang) for s in ("train", "dev", "test")}
    y = {s: getattr(task, s).labels for s in ("train", "dev", "test")}
    res = probe_accuracy(X["train"], y["train"], X["dev"], y["dev"], X["test"], y["test"], cfg=cfg, seed=seed)
    if not per_head:
        return res
    reason = encoder.heads_unavailable(task.lang)
    if reason:
        res["per_head"] = {"skipped": reason}
        return res
    train_idx = np.arange(len(y["train"]))
    if per_head_train is not None and len(train_idx) > per_head_train:
        train_idx = np.sort(np.random.default_rng(seed).choice(len(train_idx), per_head_train, replace=False))
    H = {"train": encoder.heads([task.train.texts[i] for i in train_idx], task.lang),
         "dev": encoder.heads(task.dev.texts, task.lang), "test": encoder.heads(task.test.texts, task.lang)}
    y_head_train = [y["train"][i] for i in train_idx]
    head_cfg = replace(cfg, max_epochs=per_head_checks) if per_head_checks else cfg
    accs = []
    for h in tqdm(range(H["train"].shape[1]), desc=f"{task.name} heads ({encoder.name})", leave=False):
        r = probe_accuracy(H["train"][:, h], y_head_train, H["dev"][:, h], y["dev"], H["test"][:, h], y["test"],
                           cfg=head_cfg, seed=seed, l2_grid=[res["l2"]])
        accs.append(r["acc"])
    res["per_head"] = {"acc": accs, "n_train": len(train_idx), "l2": res["l2"], "max_checks": head_cfg.max_epochs}
    return res
