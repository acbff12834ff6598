"""A lexical shortlist: per translation direction, which target subwords each source subword makes likely.

Most of a small Transformer's decoding time goes into the output layer, its log-softmax and the
top-k over the whole vocabulary, at every step for every hypothesis. A sentence's translation
draws on few of those subwords: the ones its source words translate to, and the frequent
function words and punctuation of the target language. Restricting the output layer to those
(CTranslate2's `vmap`, Marian's lexical shortlist) makes these three costs shrink with the
vocabulary.

The table is counted from the training bitext, without alignments: for a source subword s,
its target candidates are the `per_token` target subwords t of the highest Dice coefficient
2 count(s, t) / (count(s) + count(t)), counted in sentence pairs (so that neither a frequent t,
which would fill every row, nor a rare t seen once beside s wins by chance; the `frequent` most
common targets are always candidates anyway). A sentence's candidates are the union over its
source subwords, plus the frequent ones: they depend on the sentence alone, never on the batch it
is decoded in.

Stored as safetensors (no pickle): per direction `<src>-<tgt>.table` (source vocabulary x
per_token, -1 where a row has fewer) and `<src>-<tgt>.frequent`.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from interlingua.atomic_files import write_bytes_atomic
from interlingua.errors import DataError

DEFAULT_PER_TOKEN = 20
DEFAULT_FREQUENT = 200
FORMAT = "interlingua-shortlist-1"


@dataclass
class DirectionTable:
    """One direction's candidates: `table[s]` the target ids of source id s (-1: none), `frequent` always."""

    table: np.ndarray
    """(source vocabulary size, per_token) int32."""
    frequent: np.ndarray
    """(n,) int32, the most frequent target ids."""

    def candidates(self, source_ids: np.ndarray) -> np.ndarray:
        """The sorted distinct target ids a sentence of `source_ids` may use (special ids not included)."""
        ids = np.asarray(source_ids, dtype=np.int64)
        ids = ids[(ids >= 0) & (ids < self.table.shape[0])]
        rows = self.table[ids].ravel()
        return np.unique(np.concatenate([rows[rows >= 0], self.frequent]).astype(np.int64))


@dataclass
class Shortlist:
    """Candidate tables per (source language, target language)."""

    tables: dict[tuple[str, str], DirectionTable] = field(default_factory=dict)
    per_token: int = DEFAULT_PER_TOKEN
    frequent: int = DEFAULT_FREQUENT

    def direction(self, src: str, tgt: str) -> DirectionTable | None:
        return self.tables.get((src, tgt))

    @property
    def directions(self) -> list[tuple[str, str]]:
        return sorted(self.tables)

    def save(self, path: str | Path) -> Path:
        """Write the tables as one safetensors file (atomically)."""
        from safetensors.numpy import save
        tensors: dict[str, np.ndarray] = {}
        for (src, tgt), t in self.tables.items():
            tensors[f"{src}-{tgt}.table"] = np.ascontiguousarray(t.table, dtype=np.int32)
            tensors[f"{src}-{tgt}.frequent"] = np.ascontiguousarray(t.frequent, dtype=np.int32)
        meta = {"format": FORMAT, "per_token": str(self.per_token), "frequent": str(self.frequent),
                "directions": json.dumps(["-".join(d) for d in self.directions])}
        data = save(tensors, metadata=meta)
        path = Path(path)
        write_bytes_atomic(path, data)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Shortlist:
        """Read a file written by `save`; anything else is a DataError naming the file."""
        from safetensors import SafetensorError
        from safetensors.numpy import load
        path = Path(path)
        try:
            raw = path.read_bytes()
            tensors = load(raw)
            meta = _metadata(raw)
        except FileNotFoundError:
            raise DataError(f"shortlist file {path} does not exist (build one with `interlingua shortlist`)") from None
        except (OSError, SafetensorError, ValueError) as err:
            raise DataError(f"{path} is not a shortlist file ({err})") from None
        if meta.get("format") != FORMAT:
            raise DataError(f"{path} is not a shortlist file (format {meta.get('format')!r}, expected {FORMAT!r})")
        tables = {}
        for name in json.loads(meta.get("directions", "[]")):
            src, _, tgt = name.partition("-")
            try:
                tables[(src, tgt)] = DirectionTable(tensors[f"{name}.table"], tensors[f"{name}.frequent"])
            except KeyError:
                raise DataError(f"{path}: direction {name} has no table") from None
        return cls(tables, int(meta.get("per_token", DEFAULT_PER_TOKEN)), int(meta.get("frequent", DEFAULT_FREQUENT)))


def _metadata(raw: bytes) -> dict[str, str]:
    """The __metadata__ of a safetensors file's header."""
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + size])
    meta = header.get("__metadata__") or {}
    return meta if isinstance(meta, dict) else {}


class CooccurrenceCounter:
    """One direction's counts (the module docstring's), fed a sentence pair at a time (`add`), so that
    several directions of a corpus are counted in one pass over it; `table` turns them into candidates.
    Ids below `reserved` (pad, unk, bos, eos) are never counted: the decoder always has them."""

    FLUSH_PAIRS = 5_000_000
    """Co-occurrences gathered before they are added into the sparse count matrix."""

    def __init__(self, source_size: int, target_size: int, reserved: int = 4):
        from scipy.sparse import csr_matrix
        self.source_size, self.target_size, self.reserved = source_size, target_size, reserved
        self.co = csr_matrix((source_size, target_size), dtype=np.float64)
        self.target_count = np.zeros(target_size, dtype=np.float64)
        self.source_count = np.zeros(source_size, dtype=np.float64)
        self._rows: list[np.ndarray] = []
        self._cols: list[np.ndarray] = []
        self._pending = 0

    def add(self, src: np.ndarray, tgt: np.ndarray) -> None:
        """Count one sentence pair of subword ids."""
        s = np.unique(np.asarray(src, dtype=np.int64))
        t = np.unique(np.asarray(tgt, dtype=np.int64))
        s, t = s[(s >= self.reserved) & (s < self.source_size)], t[(t >= self.reserved) & (t < self.target_size)]
        self.target_count[t] += 1
        self.source_count[s] += 1
        if s.size and t.size:
            self._rows.append(np.repeat(s, t.size))
            self._cols.append(np.tile(t, s.size))
            self._pending += int(s.size * t.size)
        if self._pending > self.FLUSH_PAIRS:
            self._flush()

    def _flush(self) -> None:
        from scipy.sparse import coo_matrix
        if self._rows:
            r, c = np.concatenate(self._rows), np.concatenate(self._cols)
            self.co = self.co + coo_matrix((np.ones(len(r)), (r, c)), shape=self.co.shape).tocsr()
            self._rows.clear()
            self._cols.clear()
        self._pending = 0

    def table(self, per_token: int = DEFAULT_PER_TOKEN, frequent: int = DEFAULT_FREQUENT) -> DirectionTable:
        """The candidates counted so far; a DataError where no pair had tokens."""
        self._flush()
        target_count, source_count = self.target_count, self.source_count
        if not target_count.any():
            raise DataError("no sentence pair with tokens to count a shortlist from")
        order = np.argsort(-target_count, kind="stable")
        common = order[:frequent][target_count[order[:frequent]] > 0].astype(np.int32)
        table = np.full((self.source_size, per_token), -1, dtype=np.int32)
        co = self.co.tocsr()
        for row in range(self.source_size):
            start, end = co.indptr[row], co.indptr[row + 1]
            if start == end:
                continue
            targets = co.indices[start:end]
            score = 2 * co.data[start:end] / (source_count[row] + target_count[targets])
            best = np.lexsort((targets, -score))[:per_token]  # highest score first, ties by id
            table[row, :len(best)] = targets[best]
        return DirectionTable(table, common)


def count_table(pairs: Iterable[tuple[np.ndarray, np.ndarray]], source_size: int, target_size: int,
                per_token: int = DEFAULT_PER_TOKEN, frequent: int = DEFAULT_FREQUENT,
                reserved: int = 4) -> DirectionTable:
    """The table of one direction from its training pairs of subword ids (`CooccurrenceCounter`)."""
    counter = CooccurrenceCounter(source_size, target_size, reserved)
    for src, tgt in pairs:
        counter.add(src, tgt)
    return counter.table(per_token, frequent)
