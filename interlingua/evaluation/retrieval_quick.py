"""Cosine nearest-neighbour translation retrieval on a multi-way parallel set (demo check)."""
from __future__ import annotations

import numpy as np

from interlingua.inference.embedder import Embedder


def retrieval_accuracy(embedder: Embedder, texts: dict[str, list[str]]) -> dict[tuple[str, str], float]:
    """For every ordered language pair: share of sentences whose nearest neighbour is their translation."""
    vecs = {}
    for lang, lines in texts.items():
        v = embedder.encode(lines, lang)
        vecs[lang] = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-9)
    out = {}
    for s in vecs:
        for t in vecs:
            if s != t:
                nearest = (vecs[s] @ vecs[t].T).argmax(1)
                out[(s, t)] = float((nearest == np.arange(len(nearest))).mean())
    return out
