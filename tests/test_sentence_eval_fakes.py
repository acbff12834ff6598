"""Fake embedders for the sentence-evaluation tests (imported by the other test_sentence_eval_* files),
and tests of the per-run `CachedEmbedder` that checks and caches what an embedder returns."""
from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest

from interlingua.evaluation.sentence.protocol import CachedEmbedder, EmbedderLike, EvaluationError

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def need_data(*parts: str) -> Path:
    """Path under ../shared/data; the test skips when it is absent (fails under CI=true)."""
    from conftest import missing
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        missing(f"{path} is not available")
    return path


def _token_vector(token: str, dim: int) -> np.ndarray:
    return np.random.default_rng(zlib.crc32(token.lower().encode())).normal(size=dim).astype(np.float32)


class HashedBagOfWords:
    """Deterministic bag of words: each token a seeded random vector; head h sums tokens at positions = h mod k."""

    def __init__(self, dim: int = 64, languages: Sequence[str] = ("en", "de", "fr", "es", "cs"),
                 heads: int | None = None):
        self.dim, self.languages, self.k = dim, list(languages), heads
        self.calls = 0

    def encode(self, sentences: Sequence[str], lang: str, pooling: str = "mean", batch_size: int = 64) -> np.ndarray:
        self.calls += 1
        if pooling == "heads":
            if not self.k:
                raise ValueError("this fake has no heads")
            out = np.zeros((len(sentences), self.k, self.dim), np.float32)
            for i, s in enumerate(sentences):
                for j, tok in enumerate(s.split()):
                    out[i, j % self.k] += _token_vector(tok, self.dim)
            return out
        out = np.zeros((len(sentences), self.dim), np.float32)
        for i, s in enumerate(sentences):
            toks = s.split()
            if toks:
                out[i] = np.mean([_token_vector(t, self.dim) for t in toks], axis=0)
        return out


class LookupEmbedder:
    """Returns a given vector per sentence (a label oracle, or identical vectors across languages)."""

    def __init__(self, table: Mapping[str, np.ndarray], languages: Sequence[str] = ("en",), dim: int | None = None):
        self.table = dict(table)
        self.languages = list(languages)
        self.dim = dim or len(next(iter(self.table.values())))

    def encode(self, sentences: Sequence[str], lang: str, pooling: str = "mean", batch_size: int = 64) -> np.ndarray:
        return np.stack([self.table.get(s, np.zeros(self.dim, np.float32)) for s in sentences]).astype(np.float32)


class RandomEmbedder:
    """Seeded random vector per (sentence, language): no information at all."""

    def __init__(self, dim: int = 32, languages: Sequence[str] = ("en", "de", "fr", "es", "cs")):
        self.dim, self.languages = dim, list(languages)

    def encode(self, sentences: Sequence[str], lang: str, pooling: str = "mean", batch_size: int = 64) -> np.ndarray:
        return np.stack([_token_vector(lang + "\t" + s, self.dim) for s in sentences])


def label_oracle(texts: Sequence[str], labels: Sequence, dim: int = 16, noise: float = 0.1, seed: int = 0,
                 languages: Sequence[str] = ("en",)) -> LookupEmbedder:
    """Vectors that encode each sentence's label (one-hot direction + small noise)."""
    classes = sorted(set(labels), key=str)
    rng = np.random.default_rng(seed)
    table = {}
    for text, label in zip(texts, labels):
        v = rng.normal(scale=noise, size=dim).astype(np.float32)
        v[classes.index(label) % dim] += 1.0
        table[text] = v
    return LookupEmbedder(table, languages, dim)


# ----------------------------------------------------------------------------- tests of the fakes and CachedEmbedder

def test_fakes_satisfy_the_protocol_and_are_deterministic():
    fake = HashedBagOfWords(heads=3)
    assert isinstance(fake, EmbedderLike)
    a = fake.encode(["a dog runs", "a cat"], "en")
    assert a.shape == (2, 64) and a.dtype == np.float32
    np.testing.assert_array_equal(a, HashedBagOfWords(heads=3).encode(["a dog runs", "a cat"], "en"))
    assert fake.encode(["a dog runs"], "en", pooling="heads").shape == (1, 3, 64)


def test_encoder_caches_each_distinct_sentence_once():
    fake = HashedBagOfWords()
    enc = CachedEmbedder("fake", fake)
    first = enc.mean(["x y", "x y", "z"], "en")
    assert fake.calls == 1 and first.shape == (3, 64)
    np.testing.assert_array_equal(first[0], first[1])
    again = enc.mean(["z", "x y"], "en")
    assert fake.calls == 1  # everything came from the cache
    np.testing.assert_array_equal(again[0], first[2])


def test_encoder_rejects_wrong_shapes_and_unknown_languages():
    class Broken(HashedBagOfWords):
        def encode(self, sentences, lang, pooling="mean", batch_size=64):
            return np.zeros((len(sentences) + 1, 4), np.float32)

    with pytest.raises(EvaluationError, match="returned shape"):
        CachedEmbedder("broken", Broken()).mean(["a", "b"], "en")
    with pytest.raises(EvaluationError, match="no encoder for language 'xx'"):
        CachedEmbedder("fake", HashedBagOfWords()).mean(["a"], "xx")
    with pytest.raises(EvaluationError, match="no encode"):
        CachedEmbedder("nothing", object())


def test_encoder_reports_why_heads_are_missing():
    assert CachedEmbedder("h", HashedBagOfWords(heads=2)).heads_unavailable("en") is None
    reason = CachedEmbedder("m", HashedBagOfWords()).heads_unavailable("en")
    assert "no heads" in reason
    with pytest.raises(EvaluationError, match="no heads"):
        CachedEmbedder("m", HashedBagOfWords()).heads(["a b"], "en")
