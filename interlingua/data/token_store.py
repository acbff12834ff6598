"""Subword id sequences stored flat, so millions of sentences cost a few arrays, not millions of objects.

A prepared corpus keeps each language of each file group as one file of concatenated ids
(read back memory-mapped: the operating system pages in what batching touches) plus one
length per line. `TokenSequences` is the list-like view that batching and validation index;
selecting lines (a direction's pairs, a process's share) copies only index arrays.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np


class DamagedCache(Exception):
    """Prepared data that cannot be what preparing wrote (`prepare` then prepares it again)."""


def id_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned type that holds every id of a vocabulary (halves the files of most)."""
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.int32)


class TokenSequences:
    """Variable-length id sequences: line `i` is `parts[part[i]][starts[i]:starts[i] + lengths[i]]`."""

    def __init__(self, parts: list[np.ndarray], part: np.ndarray, starts: np.ndarray, lengths: np.ndarray):
        self.parts = parts
        self.part = part
        self.starts = starts
        self.lengths = lengths

    @classmethod
    def from_flat(cls, ids: np.ndarray, lengths: np.ndarray) -> TokenSequences:
        """Lines laid end to end in `ids`, as a prepared corpus stores them."""
        lengths = np.asarray(lengths, dtype=np.int32)
        starts = np.zeros(len(lengths), dtype=np.int64)
        if len(lengths) > 1:
            np.cumsum(lengths[:-1], out=starts[1:])
        return cls([ids], np.zeros(len(lengths), dtype=np.uint16), starts, lengths)

    @classmethod
    def of(cls, seqs: Sequence[np.ndarray] | TokenSequences) -> TokenSequences:
        """`seqs` itself, or a list of arrays laid out flat."""
        if isinstance(seqs, TokenSequences):
            return seqs
        lengths = np.fromiter((len(s) for s in seqs), dtype=np.int32, count=len(seqs))
        flat = np.concatenate([np.asarray(s, dtype=np.int64) for s in seqs]) if len(seqs) else np.zeros(0, np.int64)
        return cls.from_flat(flat, lengths)

    @classmethod
    def load(cls, ids_path: Path, lengths_path: Path, dtype: str) -> TokenSequences:
        """A prepared file pair, the ids memory-mapped (an empty file cannot be mapped, nor needs to be). A pair
        that does not fit together (a file cut short or overwritten) is a `DamagedCache` naming the file."""
        try:
            lengths = np.load(lengths_path)
        except (ValueError, EOFError):  # garbled, cut short, or no array file at all (numpy's own message then
            raise DamagedCache(f"{lengths_path} is not a readable array file") from None  # advises unpickling it)
        if lengths.ndim != 1 or lengths.dtype.kind not in "iu" or (lengths.size and int(lengths.min()) < 0):
            raise DamagedCache(f"{lengths_path} does not hold sentence lengths")
        size, expected = ids_path.stat().st_size, int(lengths.sum()) * np.dtype(dtype).itemsize
        if size != expected:
            raise DamagedCache(f"{ids_path} has {size:,} bytes where its lengths ({lengths_path.name}) say "
                               f"{expected:,}")
        ids = np.memmap(ids_path, dtype=dtype, mode="r") if size else np.zeros(0, dtype=dtype)
        return cls.from_flat(ids, lengths)

    @staticmethod
    def concat(seqs: list[TokenSequences]) -> TokenSequences:
        """The lines of each in turn (no ids copied)."""
        if len(seqs) == 1:
            return seqs[0]
        if not seqs:
            return TokenSequences([], np.zeros(0, np.uint16), np.zeros(0, np.int64), np.zeros(0, np.int32))
        parts: list[np.ndarray] = []
        part, starts, lengths = [], [], []
        for s in seqs:
            part.append(s.part.astype(np.uint16) + len(parts))
            parts.extend(s.parts)
            starts.append(s.starts)
            lengths.append(s.lengths)
        return TokenSequences(parts, np.concatenate(part), np.concatenate(starts), np.concatenate(lengths))

    def select(self, index: np.ndarray | slice) -> TokenSequences:
        """The lines at `index` (positions or a slice), in that order."""
        return TokenSequences(self.parts, self.part[index], self.starts[index], self.lengths[index])

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> np.ndarray:
        start = int(self.starts[i])
        return self.parts[self.part[i]][start:start + int(self.lengths[i])]

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(len(self)):
            yield self[i]


class TokenFileWriter:
    """Appends encoded lines to a flat id file; the lengths are kept to be saved beside it."""

    def __init__(self, path: Path, dtype: np.dtype):
        self.path = path
        self.dtype = dtype
        self._file = open(path, "wb")
        self._lengths: list[np.ndarray] = []

    def write(self, flat: np.ndarray, lengths: np.ndarray) -> None:
        """Append lines already laid end to end (`lengths` says where each ends)."""
        try:
            self._file.write(np.ascontiguousarray(flat, dtype=self.dtype).tobytes())
        except OSError as err:
            raise self._named(err) from None
        self._lengths.append(np.asarray(lengths, dtype=np.int32))

    def close(self) -> np.ndarray:
        """Flush the ids; the lengths of every line written."""
        try:
            self._file.close()
        except OSError as err:
            raise self._named(err) from None
        return np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int32)

    def discard(self) -> None:
        """Close the file without a word (the encoding failed; its folder is removed)."""
        try:
            self._file.close()
        except OSError:
            pass

    def _named(self, err: OSError) -> OSError:
        """A buffered write names no file: this one does."""
        return err if err.filename else OSError(err.errno, err.strerror or str(err), str(self.path))
