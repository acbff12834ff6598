"""Which training lines to keep: the filters of the papers' cleaning pipelines, counted per reason.

Filters run on chunks of encoded lines as they stream by; duplicates are found at the end from
one 64-bit hash per line (8 bytes a line, not the text), so a corpus of millions of lines is
cleaned in flat memory apart from that array.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from interlingua.config import CleanConfig
from interlingua.data.language_id import identify, supported
from interlingua.errors import ConfigError

REASONS = ("empty", "too_long", "ratio", "language", "duplicate")


def hash64(data: bytes) -> int:
    """A 64-bit hash of a line, to find equal lines among millions by comparing 8 bytes each."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def row_hashes(texts: dict[str, list[str]]) -> np.ndarray:
    """A 64-bit hash of each aligned line (every language's text of it together)."""
    joined = ("\0".join(row) for row in zip(*texts.values()))
    return np.fromiter((hash64(x.encode("utf-8")) for x in joined), dtype=np.uint64,
                       count=len(next(iter(texts.values()))))


@dataclass
class LineFilter:
    """Keeps the verdict on every line of one file group, chunk by chunk."""

    clean: CleanConfig
    max_len: int
    languages: list[str]
    """The experiment's languages: the candidates of the language identifier."""
    _keep: list[np.ndarray] = field(default_factory=list)
    _hashes: list[np.ndarray] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))

    def __post_init__(self) -> None:
        if self.clean.language_id and not supported(self.languages):
            raise ConfigError(f"preprocess.clean.language_id: the language identifier does not know every one of "
                              f"{', '.join(self.languages)}")

    def add(self, lengths: dict[str, np.ndarray], texts: dict[str, list[str]] | None = None,
            hashes: np.ndarray | None = None) -> None:
        """Judge one chunk: its lines' subword counts before any truncation, and (for the language
        and duplicate filters) their normalised text and `row_hashes`."""
        lens = np.stack(list(lengths.values()))  # (languages, lines)
        keep = np.ones(lens.shape[1], dtype=bool)
        self._drop(keep, (lens == 0).any(axis=0), "empty")
        if self.clean.drop_long:
            self._drop(keep, (lens > self.max_len).any(axis=0), "too_long")
        if self.clean.max_ratio is not None and len(lengths) > 1:
            longest, shortest = lens.max(axis=0), np.maximum(lens.min(axis=0), 1)
            self._drop(keep, longest > self.clean.max_ratio * shortest, "ratio")
        if self.clean.language_id:
            assert texts is not None, "the language filter needs the lines' text"
            for lang, lines in texts.items():
                rows = np.flatnonzero(keep)
                found = identify([lines[i] for i in rows], self.languages)
                reject = np.zeros_like(keep)
                reject[rows[np.asarray([f != lang for f in found], dtype=bool)]] = True
                self._drop(keep, reject, "language")
        self._keep.append(keep)
        if self.clean.dedup:
            assert hashes is not None, "the duplicate filter needs the lines' hashes"
            self._hashes.append(hashes)

    def _drop(self, keep: np.ndarray, reject: np.ndarray | np.bool_, reason: str) -> None:
        hit = keep & reject
        self.dropped[reason] += int(hit.sum())
        keep &= ~reject

    def kept(self) -> np.ndarray:
        """Positions of the lines that pass every filter (the first of duplicates kept)."""
        keep = np.concatenate(self._keep) if self._keep else np.zeros(0, dtype=bool)
        rows = np.flatnonzero(keep)
        if self.clean.dedup and len(rows):
            hashes = np.concatenate(self._hashes)[rows]
            _, first = np.unique(hashes, return_index=True)
            self.dropped["duplicate"] = len(rows) - len(first)
            rows = rows[np.sort(first)]
        return rows

    def report(self, kept: np.ndarray) -> dict[str, object]:
        """Lines judged, lines kept (`kept()`'s answer, not computed again) and the drops per reason."""
        total = int(sum(len(k) for k in self._keep))
        return {"lines": total, "kept": len(kept), "dropped": {r: n for r, n in self.dropped.items() if n}}
