"""SVCCA (Raghu et al. 2017), the representation similarity of paper 004's Table 9 and Figure 5, in numpy.

For two views A (n, d_a) and B (n, d_b) of the same n items (rows aligned):

    1. centre each column;  A = U S V^T;  keep the k leading directions whose squared singular
       values hold `keep` (99%) of the variance:  A' = U_k S_k  (n, k)          (the "SV" step)
    2. the same for B -> B' (n, l)
    3. CCA: with Q_A, Q_B orthonormal bases of the columns of A', B' (thin QR), the canonical
       correlations rho_1 >= ... >= rho_min(k, l) are the singular values of Q_A^T Q_B
    4. SVCCA(A, B) = mean_i rho_i

It is invariant to invertible linear maps of either view (up to the SV truncation), which is
why it can compare encoders whose coordinates mean nothing to each other. With few items per
kept direction even unrelated data correlates, so scores are read against those of random
Gaussian data of the same shape (`random_svcca`).
"""
from __future__ import annotations

import numpy as np


def sv_reduce(x: np.ndarray, keep: float = 0.99) -> np.ndarray:
    """Centred x (n, d) projected on its leading singular directions holding `keep` of the variance."""
    x = np.asarray(x, dtype=np.float64)
    x = x - x.mean(axis=0, keepdims=True)
    u, s, _ = np.linalg.svd(x, full_matrices=False)
    energy = s ** 2
    total = energy.sum()
    if total <= 0:
        return x[:, :0]
    k = int(np.searchsorted(np.cumsum(energy) / total, keep) + 1)
    return u[:, :k] * s[:k]


def canonical_correlations(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Canonical correlations of the column spaces of a (n, k) and b (n, l), largest first."""
    if a.shape[1] == 0 or b.shape[1] == 0:
        return np.zeros(0)
    qa, _ = np.linalg.qr(a - a.mean(axis=0))
    qb, _ = np.linalg.qr(b - b.mean(axis=0))
    return np.clip(np.linalg.svd(qa.T @ qb, compute_uv=False), 0.0, 1.0)


def svcca(a: np.ndarray, b: np.ndarray, keep: float = 0.99) -> float:
    """Mean canonical correlation of the `keep`-variance SVD reductions of a (n, d_a) and b (n, d_b)."""
    if len(a) != len(b):
        raise ValueError(f"svcca needs the same items in both views, got {len(a)} and {len(b)} rows")
    rho = canonical_correlations(sv_reduce(a, keep), sv_reduce(b, keep))
    return float(rho.mean()) if rho.size else 0.0


def random_svcca(n: int, d_a: int, d_b: int, keep: float = 0.99, seed: int = 0) -> float:
    """SVCCA between independent standard Gaussian data of shapes (n, d_a) and (n, d_b): the score
    that shape alone gives, the reference point of a real score."""
    rng = np.random.default_rng(seed)
    return svcca(rng.standard_normal((n, d_a)), rng.standard_normal((n, d_b)), keep)
