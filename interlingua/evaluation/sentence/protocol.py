"""The embedding interface the suite evaluates, and a per-run encoder that checks and caches.

The suite never imports a model: anything with `languages` and `encode(...)` is evaluated,
so the translation model, reference embedders and third-party encoders stand side by side.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from interlingua.errors import InterlinguaError
from interlingua.runtime import torch_threads


class EvaluationError(InterlinguaError):
    """Bad input to the sentence-evaluation suite (embedder output, arrays, names)."""


@runtime_checkable
class EmbedderLike(Protocol):
    """What the suite needs from a sentence encoder."""

    languages: list[str]

    def encode(self, sentences: Sequence[str], lang: str, pooling: str = "mean", batch_size: int = 64) -> np.ndarray:
        """`mean` -> (n, d) float32; `heads` -> (n, k, d), one d-vector per bridge head."""
        ...


# Errors an embedder raises when it cannot give per-head vectors (no bridge, bag of words).
_NO_HEADS_ERRORS = (InterlinguaError, ValueError, NotImplementedError, TypeError)


class CachedEmbedder:
    """One embedder inside one suite run: validates shapes and memoises mean vectors (named apart from
    the model's `Encoder` slot, which it has nothing to do with).

    Caching matters because tasks share sentences (SICK pairs repeat sentences; SICK and
    XNLI-en appear in two suites of `all`), and encoding is the slow part for a real model.
    """

    def __init__(self, name: str, embedder: EmbedderLike, batch_size: int = 64, threads: int | None = 1):
        if not callable(getattr(embedder, "encode", None)) or not hasattr(embedder, "languages"):
            raise EvaluationError(f"embedder '{name}' has no encode() method or no languages attribute")
        self.name = name
        self.embedder = embedder
        self.batch_size = batch_size
        self.threads = threads
        self.encode_seconds = 0.0  # time spent inside the embedder, to tell encoding from fitting
        self._cache: dict[tuple[str, str], np.ndarray] = {}
        self._heads_reason: dict[str, str | None] = {}

    @property
    def languages(self) -> list[str]:
        return list(self.embedder.languages)

    def _encode(self, sentences: Sequence[str], lang: str, pooling: str, batch_size: int) -> np.ndarray:
        """The embedder's encode under `threads` torch threads (None: leave torch's setting).

        One thread by default: encoding runs beside the probe-fit workers, and a second torch
        thread contending with them for the cores slows encoding down rather than up."""
        start = time.perf_counter()
        try:
            with torch_threads(self.threads):
                return np.asarray(self.embedder.encode(sentences, lang, pooling=pooling, batch_size=batch_size))
        finally:
            self.encode_seconds += time.perf_counter() - start

    def has(self, lang: str) -> bool:
        return lang in self.languages

    def mean(self, sentences: Sequence[str], lang: str) -> np.ndarray:
        """(n, d) float32 mean-pooled vectors; each distinct sentence is encoded once per run."""
        if not self.has(lang):
            raise EvaluationError(f"embedder '{self.name}' has no encoder for language '{lang}' "
                                  f"(it has {self.languages})")
        todo = list(dict.fromkeys(s for s in sentences if (lang, s) not in self._cache))
        if todo:
            vecs = self._encode(todo, lang, "mean", self.batch_size)
            if vecs.ndim != 2 or vecs.shape[0] != len(todo):
                raise EvaluationError(f"embedder '{self.name}' returned shape {vecs.shape} for {len(todo)} sentences "
                                      f"with pooling='mean'; expected ({len(todo)}, d)")
            if not np.isfinite(vecs).all():
                raise EvaluationError(f"embedder '{self.name}' returned NaN or infinite values for language '{lang}'")
            for s, v in zip(todo, vecs.astype(np.float32, copy=False)):
                self._cache[(lang, s)] = v
        if not sentences:
            dim = next(iter(self._cache.values())).shape[0] if self._cache else 0
            return np.zeros((0, dim), dtype=np.float32)
        return np.stack([self._cache[(lang, s)] for s in sentences])

    def heads_unavailable(self, lang: str) -> str | None:
        """Why per-head vectors cannot be had for `lang` (None when they can)."""
        if lang not in self._heads_reason:
            if getattr(self.embedder, "supports_heads", True) is False:
                reason: str | None = "no per-head output (not an attention-bridge model)"
            elif not self.has(lang):
                reason = f"no encoder for language '{lang}'"
            else:
                try:
                    out = self._encode(["a test ."], lang, "heads", 1)
                    reason = None if out.ndim == 3 else f"pooling='heads' gave shape {out.shape}, not (n, k, d)"
                except _NO_HEADS_ERRORS as err:
                    reason = f"pooling='heads' not available: {err}"
            self._heads_reason[lang] = reason
        return self._heads_reason[lang]

    def heads(self, sentences: Sequence[str], lang: str) -> np.ndarray:
        """(n, k, d) per-head vectors (not cached: they are k times larger and used once)."""
        reason = self.heads_unavailable(lang)
        if reason:
            raise EvaluationError(f"embedder '{self.name}': {reason}")
        out = self._encode(list(sentences), lang, "heads", self.batch_size)
        if out.ndim != 3 or out.shape[0] != len(sentences):
            raise EvaluationError(f"embedder '{self.name}' returned shape {out.shape} for {len(sentences)} sentences "
                                  f"with pooling='heads'; expected ({len(sentences)}, k, d)")
        return out.astype(np.float32, copy=False)
