"""Similarity of two languages' representations at one encoder layer, with measures whose scores
do not move with the layer's spectrum alone, and the references to read them against.

The views are A (n, d_a) and B (n, d_b): the mean-pooled states of n sentences and of their
translations, rows aligned.

- Fixed-k SVCCA (`interlingua.evaluation.svcca.svcca_fixed`): the mean canonical correlation of
  each view's k leading singular directions, k the same in every layer (default `SVCCA_K`, capped
  at the views' rank and reported). The paper's 99%-variance SVCCA keeps as many directions as the
  layer's spectrum asks for, and the score of unrelated data grows with that number (n = 1000:
  about 0.08 with 10 directions, 0.30 with 125), so it is kept in the report only for continuity.
- Linear CKA (Kornblith et al. 2019): ||B_c^T A_c||_F^2 / (||A_c^T A_c||_F ||B_c^T B_c||_F) on
  column-centred views. 1 for identical views; invariant to orthogonal maps and isotropic scaling
  of either view (not to any invertible map, unlike CCA, so it weighs directions by their
  variance and cannot be raised by the many low-variance directions that CCA counts as much as the
  leading ones). Computed from d x d products in float64, each view scaled to unit norm first (CKA
  does not change), so that thousands of rows of large activations stay far from overflow.

Each score comes with two references, both seeded and deterministic:

- Gaussian (`gaussian_reference`): the same measure on independent standard Gaussian data of the
  same shapes (n, d_a) and (n, d_b), mean of `draws` draws, seeded by the shape only, so every
  layer of the same shape gets the same number. What shape alone gives. For fixed-k SVCCA it
  depends on n and k only (the k leading directions of isotropic data span a random subspace).
- Permuted rows (`permuted_reference`): each view as it is, but every sentence of A paired with
  the state of another sentence of B (a random cyclic permutation, so that no row keeps its
  translation), mean of `draws` permutations. It keeps everything about each language's states,
  their spectrum, scale and clusters, and removes only the pairing, which is what the scores are
  meant to measure; it is the reference to subtract. It matters for CKA most: real states are not
  isotropic, and unpaired CKA is about sqrt(r_a r_b) / n with r = (sum lambda)^2 / sum lambda^2 a
  view's participation ratio, so isotropic Gaussian data (r = d) puts CKA's floor at about d / n
  (0.11 for 1000 sentences of 128 dimensions) where a layer with its variance in a few
  directions has a floor near 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from interlingua.evaluation.svcca import (
    SVCCA_K,
    fixed_correlations,
    kept_directions,
    random_svcca,
    sv_basis,
    svcca,
    svcca_fixed,
)

DRAWS = 10
"""Gaussian draws and row permutations averaged per reference: at n = 1000 one draw's fixed-k SVCCA
or CKA varies by about 0.001-0.003, ten keep the reference's own noise below the third decimal."""


def _unit_centred(x: np.ndarray) -> np.ndarray:
    """Column-centred float64 x scaled to Frobenius norm 1 (left zero if it is constant)."""
    x = np.asarray(x, dtype=np.float64)
    x = x - x.mean(axis=0, keepdims=True)
    norm = np.linalg.norm(x)
    return x / norm if norm > 0 else x


def _cka_terms(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """The unit-norm centred views and CKA's denominator ||X^T X||_F ||Y^T Y||_F, which a row
    permutation of either view leaves as it is."""
    x, y = _unit_centred(a), _unit_centred(b)
    return x, y, float(np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y))


def _cka(x: np.ndarray, y: np.ndarray, denominator: float) -> float:
    return float(np.linalg.norm(y.T @ x) ** 2 / denominator) if denominator > 0 else 0.0


def linear_cka(a: np.ndarray, b: np.ndarray) -> float:
    """Linear CKA of a (n, d_a) and b (n, d_b), rows aligned; 0 where either view is constant."""
    if len(a) != len(b):
        raise ValueError(f"CKA needs the same items in both views, got {len(a)} and {len(b)} rows")
    return _cka(*_cka_terms(a, b))


def cyclic_permutations(n: int, draws: int, seed: int) -> list[np.ndarray]:
    """`draws` random permutations of range(n) with no fixed point (one n-cycle each): row i of one
    view is paired with row perm[i] != i of the other."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(draws):
        order = rng.permutation(n)
        perm = np.empty(n, dtype=np.int64)
        perm[order] = np.roll(order, -1)
        out.append(perm)
    return out


@dataclass(frozen=True)
class Reference:
    """A reference score of each measure."""

    svcca_fixed: float
    cka: float


@lru_cache(maxsize=256)
def gaussian_reference(n: int, d_a: int, d_b: int, k: int = SVCCA_K, draws: int = DRAWS, seed: int = 0) -> Reference:
    """Fixed-k SVCCA and CKA of independent standard Gaussian data of shapes (n, d_a) and (n, d_b),
    mean of `draws` draws; a function of its arguments only (cached)."""
    rng = np.random.default_rng([seed, n, d_a, d_b])
    sv_scores, cka_scores = [], []
    for _ in range(draws):
        a, b = rng.standard_normal((n, d_a)), rng.standard_normal((n, d_b))
        sv_scores.append(svcca_fixed(a, b, k).score)
        cka_scores.append(linear_cka(a, b))
    return Reference(float(np.mean(sv_scores)), float(np.mean(cka_scores)))


def permuted_reference(a: np.ndarray, b: np.ndarray, k: int = SVCCA_K, draws: int = DRAWS,
                       seed: int = 0) -> Reference:
    """Fixed-k SVCCA and CKA of a against b with its rows paired to other sentences (cyclic
    permutations), mean of `draws`: each view's own spectrum, no pairing. The SVD and the Gram
    norms do not change under a row permutation, so each is computed once."""
    if len(a) != len(b):
        raise ValueError(f"the reference needs the same items in both views, got {len(a)} and {len(b)} rows")
    qa, qb = sv_basis(a, k), sv_basis(b, k)
    used = min(qa.shape[1], qb.shape[1])
    x, y, denominator = _cka_terms(a, b)
    sv_scores, cka_scores = [], []
    for perm in cyclic_permutations(len(a), draws, seed):
        sv_scores.append(float(fixed_correlations(qa[:, :used], qb[perm, :used]).mean()) if used else 0.0)
        cka_scores.append(_cka(x, y[perm], denominator))
    return Reference(float(np.mean(sv_scores)), float(np.mean(cka_scores)))


def width(x: np.ndarray) -> int:
    """Columns that are not all zero (a zero-padded layer's own width)."""
    return int((np.abs(x).max(0) > 0).sum()) if len(x) else 0


@dataclass(frozen=True)
class LayerSimilarity:
    """Every similarity of one layer between two languages, with its references."""

    svcca_fixed: float
    svcca_fixed_k: int
    """Directions kept: the requested k, or fewer where a view has lower rank."""
    svcca_fixed_gaussian: float
    svcca_fixed_permuted: float
    cka: float
    cka_gaussian: float
    cka_permuted: float
    svcca_99: float
    """The paper's 99%-variance SVCCA: confounded by the number of directions kept (`svcca_99_kept`)."""
    svcca_99_random: float
    svcca_99_kept: tuple[int, int]


def layer_similarity(a: np.ndarray, b: np.ndarray, k: int = SVCCA_K, draws: int = DRAWS, seed: int = 0,
                     random_seed: int = 0) -> LayerSimilarity:
    """All measures for aligned views a (n, d_a) and b (n, d_b). `random_seed` seeds the 99% SVCCA's
    Gaussian data as earlier versions did (the layer's index), the new references use `seed`."""
    n, d_a, d_b = len(a), width(a), width(b)
    fixed = svcca_fixed(a, b, k)
    gaussian = gaussian_reference(n, d_a, d_b, max(fixed.k, 1), draws, seed)  # at the k the score used
    permuted = permuted_reference(a, b, k, draws, seed)
    return LayerSimilarity(
        svcca_fixed=fixed.score, svcca_fixed_k=fixed.k, svcca_fixed_gaussian=gaussian.svcca_fixed,
        svcca_fixed_permuted=permuted.svcca_fixed, cka=linear_cka(a, b), cka_gaussian=gaussian.cka,
        cka_permuted=permuted.cka, svcca_99=svcca(a, b),
        svcca_99_random=random_svcca(n, d_a, d_b, seed=random_seed),
        svcca_99_kept=(kept_directions(a), kept_directions(b)))
