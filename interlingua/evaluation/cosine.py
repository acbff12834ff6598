"""Cosine similarity of sentence vectors, defined once: retrieval, the encoder analysis and the
HTTP service's similarity matrix all use it. A module of its own, so that the service imports it
without the sentence suite (scikit-learn, matplotlib)."""
from __future__ import annotations

import numpy as np

from interlingua.errors import InterlinguaError


def cosine_matrix(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """All-pairs cosine similarity (n, m); zero vectors give 0."""
    if X.ndim != 2 or Y.ndim != 2 or X.shape[1] != Y.shape[1]:
        raise InterlinguaError(f"need (n, d) and (m, d) arrays of one width, got {X.shape} and {Y.shape}")

    def unit(A: np.ndarray) -> np.ndarray:
        A = A.astype(np.float64)
        norms = np.linalg.norm(A, axis=1, keepdims=True)
        return np.divide(A, norms, out=np.zeros_like(A), where=norms > 0)

    return unit(X) @ unit(Y).T
