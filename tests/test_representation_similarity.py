"""Representation similarity between languages: linear CKA, SVCCA at a fixed number of directions,
their Gaussian and permuted-rows references, and the confound of the 99%-variance SVCCA they replace."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

from interlingua.evaluation.representation_similarity import (
    cyclic_permutations,
    gaussian_reference,
    layer_similarity,
    linear_cka,
    permuted_reference,
)
from interlingua.evaluation.svcca import kept_directions, random_svcca, svcca, svcca_fixed


def decaying(rng: np.random.Generator, n: int, d: int, scale: float) -> np.ndarray:
    """Gaussian rows whose column variances fall off as exp(-2 i / scale): an anisotropic spectrum."""
    return rng.standard_normal((n, d)) * np.exp(-np.arange(d) / scale)


def orthogonal(rng: np.random.Generator, d: int) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


# --- linear CKA ----------------------------------------------------------------------------------


def test_cka_is_one_for_identical_views_invariant_to_rotation_and_scale_and_symmetric():
    rng = np.random.default_rng(0)
    a = decaying(rng, 300, 20, 8.0) + 5.0           # an offset: CKA centres the columns
    b = a[:, :12] @ rng.standard_normal((12, 16)) + 0.5 * rng.standard_normal((300, 16))
    assert linear_cka(a, a) == pytest.approx(1.0, abs=1e-12)
    assert linear_cka(a, 3.5 * a @ orthogonal(rng, 20)) == pytest.approx(1.0, abs=1e-12)
    base = linear_cka(a, b)
    assert 0.1 < base < 0.99
    assert linear_cka(a @ orthogonal(rng, 20) * 0.01, b @ orthogonal(rng, 16) * 1e4) == pytest.approx(base, abs=1e-12)
    assert linear_cka(b, a) == pytest.approx(base, abs=1e-12)
    # unlike CCA, not invariant to any invertible map: it weighs directions by their variance
    assert linear_cka(a, a @ np.diag(np.linspace(0.1, 10.0, 20))) < 0.9


def test_cka_matches_the_n_by_n_kernel_form_and_is_stable_at_large_scale():
    """Kornblith et al.'s HSIC form with n x n Gram matrices, against the d x d form used."""
    rng = np.random.default_rng(1)
    a, b = decaying(rng, 120, 10, 4.0), rng.standard_normal((120, 7))
    b[:, 0] += 2 * a[:, 0]
    h = np.eye(120) - 1 / 120
    k, l_ = h @ a @ a.T @ h, h @ b @ b.T @ h
    hsic = np.trace(k @ l_) / np.sqrt(np.trace(k @ k) * np.trace(l_ @ l_))
    assert linear_cka(a, b) == pytest.approx(hsic, abs=1e-10)
    big = rng.standard_normal((3000, 512)) * 1e6
    assert linear_cka(big, big) == pytest.approx(1.0, abs=1e-10)
    assert linear_cka(big, big + 1e3 * rng.standard_normal((3000, 512))) == pytest.approx(1.0, abs=1e-5)
    assert linear_cka(np.ones((5, 3)), rng.standard_normal((5, 2))) == 0.0   # a constant view
    with pytest.raises(ValueError):
        linear_cka(a, b[:-1])


def test_cka_of_unpaired_data_sits_at_its_permuted_reference_and_the_gaussian_one_fits_isotropic_data_only():
    rng = np.random.default_rng(2)
    n, d = 1000, 64
    flat = rng.standard_normal((n, d)), rng.standard_normal((n, d))
    steep = decaying(rng, n, d, 3.0), decaying(rng, n, d, 3.0)
    gauss = gaussian_reference(n, d, d)
    for a, b in (flat, steep):
        assert linear_cka(a, b) == pytest.approx(permuted_reference(a, b).cka, abs=0.01)
    assert linear_cka(*flat) == pytest.approx(gauss.cka, abs=0.01)          # about d / n
    assert linear_cka(*steep) < 0.02 < gauss.cka - 0.03                     # a few directions: near 0


# --- SVCCA at a fixed number of directions ---------------------------------------------------------


def test_fixed_k_svcca_matches_a_hand_computation():
    """SVD to k directions, whiten each view, singular values of the whitened cross-covariance; and
    the cosines of scipy's principal angles between the two k-dimensional subspaces."""
    rng = np.random.default_rng(3)
    z = rng.standard_normal((200, 6))
    a = z @ rng.standard_normal((6, 40)) + 0.7 * rng.standard_normal((200, 40)) + 3.0
    b = np.tanh(z @ rng.standard_normal((6, 30))) + 0.7 * rng.standard_normal((200, 30))
    k = 8
    reduced = []
    for x in (a, b):
        x = x - x.mean(0)
        u, s, _ = np.linalg.svd(x, full_matrices=False)
        reduced.append(u[:, :k] * s[:k])
    ra, rb = reduced

    def inv_sqrt(c: np.ndarray) -> np.ndarray:
        w, v = np.linalg.eigh(c)
        return v @ np.diag(w ** -0.5) @ v.T

    whitened = inv_sqrt(ra.T @ ra) @ (ra.T @ rb) @ inv_sqrt(rb.T @ rb)
    by_hand = np.linalg.svd(whitened, compute_uv=False).mean()
    result = svcca_fixed(a, b, k)
    assert result.k == k
    assert result.score == pytest.approx(by_hand, abs=1e-10)
    assert result.score == pytest.approx(np.cos(scipy.linalg.subspace_angles(ra, rb)).mean(), abs=1e-10)
    assert 0.2 < result.score < 0.95


def test_fixed_k_svcca_is_one_for_views_sharing_their_k_leading_directions_and_caps_k():
    rng = np.random.default_rng(4)
    n, k = 300, 5
    z = rng.standard_normal((n, k))
    z -= z.mean(0)
    q_z = np.linalg.qr(z)[0]

    def view(d: int) -> np.ndarray:
        """k strong directions spanning z's columns, d - k weak ones orthogonal to them, rotated."""
        weak = rng.standard_normal((n, d - k))
        weak -= weak.mean(0)
        weak -= q_z @ (q_z.T @ weak)
        return np.hstack([10 * z @ rng.standard_normal((k, k)), 0.1 * weak]) @ orthogonal(rng, d)

    a, b = view(20), view(12)
    assert svcca_fixed(a, b, k) == (pytest.approx(1.0, abs=1e-10), k)
    assert svcca_fixed(a, b, k + 3).score < 0.95          # beyond the shared directions: unrelated ones
    assert svcca_fixed(a, b, 1000).k == 12                # capped at min(d_a, d_b)
    assert svcca_fixed(a[:9], b[:9], 1000).k == 8         # ... and at n - 1 (centred rows)
    zero_padded = np.hstack([a, np.zeros((n, 30))])
    assert svcca_fixed(zero_padded, zero_padded, 1000).k == 20   # at the rank, not the width
    with pytest.raises(ValueError):
        svcca_fixed(a, b, 0)


def test_random_svcca_grows_with_the_directions_kept():
    """The confound of the 99%-variance SVCCA, measured: independent Gaussian data of 1000 rows
    scores about 0.08 with 10 directions and 0.30 with 125."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((1000, 128)), rng.standard_normal((1000, 128))
    assert 0.06 < svcca_fixed(a, b, 10).score < 0.10
    assert 0.29 < svcca_fixed(a, b, 125).score < 0.32
    # the 99% cut on isotropic data of 10 columns keeps all 10 and is the fixed-k score at k = 10
    assert kept_directions(a[:, :10]) == 10
    assert svcca(a[:, :10], b[:, :10]) == pytest.approx(svcca_fixed(a[:, :10], b[:, :10], 10).score, abs=1e-12)


def test_fixed_k_reference_depends_on_the_shape_not_the_spectrum_unlike_the_99_percent_cut():
    """Two unrelated pairs of the same shape, one isotropic, one with its variance in a few directions:
    the 99% SVCCA keeps ~126 directions of one and ~15 of the other and scores them far apart, while
    its Gaussian reference is the same for both; fixed-k SVCCA scores both at the same reference."""
    rng = np.random.default_rng(5)
    n, d, k = 1000, 128, 32
    flat = rng.standard_normal((n, d)), rng.standard_normal((n, d))
    steep = decaying(rng, n, d, 6.0), decaying(rng, n, d, 6.0)
    assert kept_directions(flat[0]) > 120 and kept_directions(steep[0]) < 20
    old_reference = random_svcca(n, d, d)
    assert svcca(*flat) == pytest.approx(old_reference, abs=0.02)
    assert svcca(*steep) < old_reference - 0.15               # unrelated data far "below random"
    sims = [layer_similarity(a, b, k, seed=0, random_seed=layer) for layer, (a, b) in enumerate((flat, steep))]
    assert sims[0].svcca_fixed_gaussian == sims[1].svcca_fixed_gaussian == gaussian_reference(n, d, d, k).svcca_fixed
    for sim in sims:
        assert sim.svcca_fixed_k == k
        assert sim.svcca_fixed == pytest.approx(sim.svcca_fixed_gaussian, abs=0.015)
        assert sim.svcca_fixed == pytest.approx(sim.svcca_fixed_permuted, abs=0.015)
        assert sim.cka == pytest.approx(sim.cka_permuted, abs=0.01)
    assert sims[1].svcca_99_kept[0] < 20 and sims[0].svcca_99_kept[0] > 120


# --- references ------------------------------------------------------------------------------------


def test_permutations_pair_every_row_with_another_and_references_repeat():
    perms = cyclic_permutations(50, 4, seed=7)
    assert len(perms) == 4 and all(sorted(p) == list(range(50)) and (p != np.arange(50)).all() for p in perms)
    assert all((p == q).all() for p, q in zip(perms, cyclic_permutations(50, 4, seed=7)))
    rng = np.random.default_rng(6)
    a = decaying(rng, 400, 24, 5.0)
    b = a @ rng.standard_normal((24, 16)) + 0.1 * rng.standard_normal((400, 16))
    first, again = layer_similarity(a, b, 8), layer_similarity(a.copy(), b.copy(), 8)
    assert first == again
    assert first.svcca_fixed > 0.9 and first.cka > 0.8
    assert first.svcca_fixed_permuted < 0.3 and first.cka_permuted < 0.1   # the pairing is what they measure
    assert permuted_reference(a, b, 8, seed=1) != permuted_reference(a, b, 8, seed=2)
