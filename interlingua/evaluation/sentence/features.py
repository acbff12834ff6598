"""Vector arithmetic shared by the pair tasks: row-wise cosine and sentence-pair features."""
from __future__ import annotations

import numpy as np

from interlingua.evaluation.sentence.protocol import EvaluationError

# "full": [u, v, |u-v|, u*v] (InferSent / SentEval-SNLI); "senteval": [|u-v|, u*v], what SentEval
# itself feeds its SICK-R, STS-B and SICK-E classifiers. Reports name the one used.
PAIR_FEATURES = {"full": "[u, v, |u-v|, u*v]", "senteval": "[|u-v|, u*v]"}


def _check_pair(u: np.ndarray, v: np.ndarray) -> None:
    if u.ndim != 2 or u.shape != v.shape:
        raise EvaluationError(f"pair vectors must be two (n, d) arrays of one shape, got {u.shape} and {v.shape}")


def cosine_rows(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """cos(u_i, v_i) for each row; 0 where either vector is zero (SentEval's nan_to_num)."""
    _check_pair(u, v)
    u = u.astype(np.float64)
    v = v.astype(np.float64)
    norms = np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1)
    dots = np.einsum("ij,ij->i", u, v)
    return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)


def pair_features(u: np.ndarray, v: np.ndarray, features: str = "full") -> np.ndarray:
    """Features of a sentence pair for a classifier/regressor on frozen vectors."""
    _check_pair(u, v)
    if features == "full":
        return np.hstack([u, v, np.abs(u - v), u * v]).astype(np.float32)
    if features == "senteval":
        return np.hstack([np.abs(u - v), u * v]).astype(np.float32)
    raise EvaluationError(f"unknown pair features '{features}' (use one of {sorted(PAIR_FEATURES)})")
