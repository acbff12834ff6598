"""Tokenizing chunks of lines (normalised, into subword ids) on every core, in order, with a bounded number in flight.

Sentencepiece's own threads barely help (turning its ids into Python lists dominates), so whole
chunks go to worker processes instead: each normalises, tokenizes, truncates and flattens its chunk
into arrays, which come back cheaply. At most two chunks per worker are in flight, so memory does
not grow with the corpus.
"""
from __future__ import annotations

import multiprocessing
import os
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from itertools import chain

import numpy as np

from interlingua.config import PreprocessConfig
from interlingua.data.cleaning import row_hashes
from interlingua.data.corpus import normalize_line
from interlingua.data.token_store import id_dtype
from interlingua.data.vocab import Vocab


@dataclass
class TokenizedChunk:
    ids: dict[str, np.ndarray]
    """Per language: the chunk's ids laid end to end, each line cut to `max_len`."""
    lengths: dict[str, np.ndarray]
    """Per language: each line's length as stored (after the cut)."""
    full_lengths: dict[str, np.ndarray]
    """Per language: each line's subword count before the cut."""
    hashes: np.ndarray | None
    texts: dict[str, list[str]] | None


@dataclass
class _Settings:
    protos: dict[str, tuple[bytes, int]]
    lowercase: bool
    normalize: bool
    max_len: int
    hashes: bool
    texts: bool


_worker: tuple[_Settings, dict[str, Vocab]] | None = None


def _start_worker(settings: _Settings) -> None:
    global _worker
    _worker = (settings, {lang: Vocab(proto, offset) for lang, (proto, offset) in settings.protos.items()})


def tokenize_chunk(settings: _Settings, vocabs: dict[str, Vocab], chunk: dict[str, list[str]]) -> TokenizedChunk:
    """One chunk of raw aligned lines (language -> lines) normalised, tokenized and flattened."""
    texts = {lang: [normalize_line(x, settings.lowercase, settings.normalize) for x in lines]
             for lang, lines in chunk.items()}
    ids, lengths, full = {}, {}, {}
    for lang, lines in texts.items():
        encoded = vocabs[lang].tokenize_batch(lines, threads=1)
        full[lang] = np.fromiter(map(len, encoded), dtype=np.int32, count=len(encoded))
        cut = np.minimum(full[lang], settings.max_len)
        lengths[lang] = cut
        ids[lang] = np.fromiter(chain.from_iterable(x[:settings.max_len] for x in encoded),
                                dtype=id_dtype(len(vocabs[lang])), count=int(cut.sum()))
    return TokenizedChunk(ids, lengths, full, row_hashes(texts) if settings.hashes else None,
                        texts if settings.texts else None)


def _tokenize_in_worker(chunk: dict[str, list[str]]) -> TokenizedChunk:
    assert _worker is not None, "the worker was not started with _start_worker"
    return tokenize_chunk(_worker[0], _worker[1], chunk)


class ChunkTokenizer:
    """`tokenize(chunks)` yields the TokenizedChunk of each chunk in order; a context manager that owns
    its worker processes (none with one worker: the chunks are tokenized in this process)."""

    def __init__(self, vocabs: dict[str, Vocab], pre: PreprocessConfig, *, hashes: bool, texts: bool):
        self.settings = _Settings({lang: (v.proto, v.offset) for lang, v in vocabs.items()}, pre.lowercase,
                                  pre.normalize, pre.max_len, hashes, texts)
        self.vocabs = vocabs
        self.workers = pre.workers or os.cpu_count() or 1
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> ChunkTokenizer:
        return self

    def _started_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # forked on Linux: a spawned worker would re-import the caller's main script, which a
            # script without a __main__ guard does not survive; the workers run sentencepiece only,
            # none of the torch/OpenMP state that makes forking a threaded parent unsafe
            method = "fork" if sys.platform == "linux" else "spawn"
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context(method),
                                             initializer=_start_worker, initargs=(self.settings,))
        return self._pool

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)

    def tokenize(self, chunks: Iterable[dict[str, list[str]]]) -> Iterator[TokenizedChunk]:
        chunks = iter(chunks)
        first = next(chunks, None)
        second = next(chunks, None) if first is not None else None
        if second is None or self.workers == 1:  # one chunk (a small file group): not worth starting workers
            for chunk in chain(() if first is None else (first,), () if second is None else (second,), chunks):
                yield tokenize_chunk(self.settings, self.vocabs, chunk)
            return
        assert first is not None  # there is a second chunk, so a first
        pool = self._started_pool()
        pending: deque[Future] = deque()
        for chunk in chain((first, second), chunks):
            pending.append(pool.submit(_tokenize_in_worker, chunk))
            if len(pending) >= 2 * self.workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
