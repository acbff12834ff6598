"""SVCCA (Raghu et al. 2017), the representation similarity of paper 004's Table 9 and Figure 5, in numpy,
in two variants: the paper's (keep 99% of the variance, `svcca`) and at a fixed number of directions
(`svcca_fixed`), the one to compare layers with.

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

The 99% cut-off is confounded: the mean canonical correlation of unrelated data grows with the
number of directions kept (n = 1000 Gaussian rows: about 0.08 with 10 directions, 0.30 with 125),
and how many the cut keeps depends on the layer's spectrum, so a layer whose variance concentrates
in fewer directions changes its score without any change in what the languages share; and its
Gaussian reference keeps nearly every direction whatever the layer keeps. `svcca_fixed` keeps the
same k directions in every layer and in its references (`representation_similarity.py`).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

SVCCA_K = 32
"""Directions `svcca_fixed` keeps by default: a quarter of d_model 128, few enough per sentence that
unrelated data stays low for a few hundred to a thousand sentences (independent Gaussian rows:
0.15 at n = 1000, 0.29 at n = 300), and more than a layer whose variance concentrates in a few
directions needs, so that such a layer and a flat one are measured on the same footing."""


def _centred_svd(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """U and the singular values of column-centred x (n, d), float64, cut to its numerical rank
    (numpy's `matrix_rank` tolerance), so that no direction is kept that the data does not have."""
    x = np.asarray(x, dtype=np.float64)
    u, s, _ = np.linalg.svd(x - x.mean(axis=0, keepdims=True), full_matrices=False)
    rank = int((s > (s[0] if s.size else 0.0) * max(x.shape) * np.finfo(np.float64).eps).sum()) if s.size else 0
    return u[:, :rank], s[:rank]


def _kept(s: np.ndarray, keep: float) -> int:
    """How many of the leading singular values s hold `keep` of the variance."""
    energy = s ** 2
    if energy.sum() <= 0:
        return 0
    return min(int(np.searchsorted(np.cumsum(energy) / energy.sum(), keep) + 1), len(s))


def kept_directions(x: np.ndarray, keep: float = 0.99) -> int:
    """How many leading singular directions of centred x (n, d) hold `keep` of its variance (what
    `svcca` keeps, and what its score depends on)."""
    return _kept(_centred_svd(x)[1], keep)


def sv_reduce(x: np.ndarray, keep: float = 0.99) -> np.ndarray:
    """Centred x (n, d) projected on its leading singular directions holding `keep` of the variance."""
    u, s = _centred_svd(x)
    k = _kept(s, keep)
    return u[:, :k] * s[:k]


def canonical_correlations(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Canonical correlations of the column spaces of a (n, k) and b (n, l), largest first."""
    if a.shape[1] == 0 or b.shape[1] == 0:
        return np.zeros(0)
    qa, _ = np.linalg.qr(a - a.mean(axis=0))
    qb, _ = np.linalg.qr(b - b.mean(axis=0))
    return fixed_correlations(qa, qb)


def svcca(a: np.ndarray, b: np.ndarray, keep: float = 0.99) -> float:
    """Mean canonical correlation of the `keep`-variance SVD reductions of a (n, d_a) and b (n, d_b)."""
    if len(a) != len(b):
        raise ValueError(f"svcca needs the same items in both views, got {len(a)} and {len(b)} rows")
    rho = canonical_correlations(sv_reduce(a, keep), sv_reduce(b, keep))
    return float(rho.mean()) if rho.size else 0.0


class FixedSvcca(NamedTuple):
    """`svcca_fixed`'s score and the number of directions it kept (k, or fewer where the data has fewer)."""

    score: float
    k: int


def sv_basis(x: np.ndarray, k: int) -> np.ndarray:
    """Orthonormal basis (n, k') of the k leading singular directions of centred x, k' = min(k, rank x)
    (rank <= min(n - 1, d)); the columns are orthogonal to the constant vector, as centred data is."""
    return _centred_svd(x)[0][:, :k]


def svcca_fixed(a: np.ndarray, b: np.ndarray, k: int = SVCCA_K) -> FixedSvcca:
    """Mean canonical correlation of the k leading singular directions of a (n, d_a) and b (n, d_b),
    k capped at both views' rank; the k used is returned because the score depends on it."""
    if len(a) != len(b):
        raise ValueError(f"svcca needs the same items in both views, got {len(a)} and {len(b)} rows")
    if k < 1:
        raise ValueError(f"svcca_fixed needs k >= 1, got {k}")
    qa, qb = sv_basis(a, k), sv_basis(b, k)
    used = min(qa.shape[1], qb.shape[1])
    if used == 0:
        return FixedSvcca(0.0, 0)
    return FixedSvcca(float(fixed_correlations(qa[:, :used], qb[:, :used]).mean()), used)


def fixed_correlations(qa: np.ndarray, qb: np.ndarray) -> np.ndarray:
    """Canonical correlations of two orthonormal bases (the SV step's U columns need no second QR)."""
    return np.clip(np.linalg.svd(qa.T @ qb, compute_uv=False), 0.0, 1.0)


def random_svcca(n: int, d_a: int, d_b: int, keep: float = 0.99, seed: int = 0) -> float:
    """SVCCA between independent standard Gaussian data of shapes (n, d_a) and (n, d_b): the score
    that shape alone gives, the reference point of a real score."""
    rng = np.random.default_rng(seed)
    return svcca(rng.standard_normal((n, d_a)), rng.standard_normal((n, d_b)), keep)
