"""Length-bucketed batches of one translation direction, as padded tensors.

Each direction has its own endless, resumable iterator: epoch `e` is a permutation drawn
from (seed, e), cut into pools of `pool` batches that are sorted by length before being
split into batches (little padding, still shuffled). A batch holds `batch_size` sentence
pairs, or with `max_tokens` as many pairs as fit in that many source + target tokens (padding
excluded, as fairseq's and OpenNMT-py's token batches). The state is (epoch, position).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from interlingua.data.token_store import TokenSequences
from interlingua.data.vocab import BOS, EOS, PAD


@dataclass
class Batch:
    src: torch.Tensor
    """(batch, src_len) token ids, PAD-padded."""
    src_lengths: torch.Tensor
    """(batch,) real lengths."""
    tgt_in: torch.Tensor
    """(batch, tgt_len) start token (BOS or the target-language tag) + target ids."""
    tgt_out: torch.Tensor
    """(batch, tgt_len) target ids + EOS."""
    src_lang: str
    tgt_lang: str
    reverse_prefix: int | None = None
    """The id a target sentence starts with when encoded as a source of the reverse direction (a shared
    model's tag for tgt->src, see `vocab.source_prefix`), for `train.agreement`; None: no prefix."""
    filler: bool = False
    """A stand-in for a process whose part of the step batch is empty: trained with weight 0, and
    without rows of its own among the agreement loss's negatives."""
    soft_targets: torch.Tensor | None = None
    """(real target tokens, output types) probabilities, row-major over `tgt_out != PAD`: the targets the
    loss trains towards in place of `tgt_out`'s one-hot ones (word-level distillation, `train.synthetic.distill`);
    None: `tgt_out`."""

    def to(self, device: torch.device | str) -> Batch:
        """The same batch on `device` (tensors already there are not copied)."""
        soft = None if self.soft_targets is None else self.soft_targets.to(device, non_blocking=True)
        return replace(self, src=self.src.to(device, non_blocking=True),
                       src_lengths=self.src_lengths.to(device, non_blocking=True),
                       tgt_in=self.tgt_in.to(device, non_blocking=True),
                       tgt_out=self.tgt_out.to(device, non_blocking=True), soft_targets=soft)


def _lengths(seqs: Sequence[Any]) -> np.ndarray:
    return np.fromiter((len(x) for x in seqs), dtype=np.int64, count=len(seqs))


def pad_sources(seqs: list[np.ndarray], prefix: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad id sequences into (batch, max_len); `prefix` prepends a token (a language tag). Filled in numpy
    and handed to torch once: torch index assignments row by row cost 30-45 us a pair, 35 ms for a batch of
    800 pairs, a sixth of a GPU study step on an H200 (`bench/batch_assembly.py`)."""
    extra = 0 if prefix is None else 1
    lengths = _lengths(seqs) + extra
    out = np.full((len(seqs), int(lengths.max()) if len(seqs) else 0), PAD, dtype=np.int64)
    if prefix is not None:
        out[:, 0] = prefix
    for row, x in zip(out, seqs):
        row[extra:extra + len(x)] = x
    return torch.from_numpy(out), torch.from_numpy(lengths)


def make_batch(src: list[np.ndarray], tgt: list[np.ndarray], src_lang: str, tgt_lang: str,
               src_prefix: int | None = None, tgt_start: int = BOS, reverse_prefix: int | None = None) -> Batch:
    """Padded tensors of one direction; the decoder input starts with `tgt_start` (BOS, or a language tag)."""
    s, lengths = pad_sources(src, src_prefix)
    tgt_lengths = _lengths(tgt)
    tmax = int(tgt_lengths.max()) + 1
    tin = np.full((len(tgt), tmax), PAD, dtype=np.int64)
    tout = np.full((len(tgt), tmax), PAD, dtype=np.int64)
    tin[:, 0] = tgt_start
    for row_in, row_out, t in zip(tin, tout, tgt):
        row_in[1:len(t) + 1] = t
        row_out[:len(t)] = t
    tout[np.arange(len(tgt)), tgt_lengths] = EOS
    return Batch(s, lengths, torch.from_numpy(tin), torch.from_numpy(tout), src_lang, tgt_lang, reverse_prefix)


def shard(idx: np.ndarray, parts: int, k: int) -> np.ndarray:
    """Part `k` of `parts` of a batch: every `parts`-th pair from the k-th on. The batch is length-
    sorted, so the parts are alike in length (the processes of a step wait little for each other)."""
    return idx[k::parts]


class PairTooLong(ValueError):
    """A sentence pair takes more tokens than a token batch may hold."""

    def __init__(self, tokens: int, max_tokens: int):
        super().__init__(f"a sentence pair of {tokens} tokens does not fit in a batch of {max_tokens} tokens")
        self.tokens, self.max_tokens = tokens, max_tokens


def token_batches(order: np.ndarray, tokens: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """`order` cut, in its order, into runs of pairs whose `tokens` add up to at most `max_tokens`
    each (every pair fits alone: the caller checks)."""
    ends = np.cumsum(tokens)
    batches, start, before = [], 0, 0
    while start < len(order):
        end = max(int(np.searchsorted(ends, before + max_tokens, side="right")), start + 1)
        batches.append(order[start:end])
        start, before = end, int(ends[end - 1])
    return batches


class DirectionBatches:
    """Endless, seeded, resumable length-bucketed batches for one direction."""

    def __init__(self, src: Sequence[np.ndarray] | TokenSequences, tgt: Sequence[np.ndarray] | TokenSequences,
                 src_lang: str, tgt_lang: str, batch_size: int, seed: int, pool: int = 50,
                 src_prefix: int | None = None, tgt_start: int = BOS, reverse_prefix: int | None = None,
                 max_tokens: int | None = None):
        if not len(src):
            raise ValueError(f"no training pairs for {src_lang}->{tgt_lang}")
        self.src, self.tgt = TokenSequences.of(src), TokenSequences.of(tgt)
        self.src_lang, self.tgt_lang = src_lang, tgt_lang
        self.batch_size, self.seed, self.pool = batch_size, seed, pool
        self.src_prefix, self.tgt_start, self.reverse_prefix = src_prefix, tgt_start, reverse_prefix
        self.lengths = self.src.lengths + self.tgt.lengths  # int32: a pair is at most 2 x max_len
        self.max_tokens = max_tokens
        if max_tokens is not None and self.longest_pair() > max_tokens:
            raise PairTooLong(self.longest_pair(), max_tokens)
        self.epoch, self.position = 0, 0
        self._plan = self._epoch_plan(0)

    def pair_tokens(self, idx: np.ndarray | slice = slice(None)) -> np.ndarray:
        """Source (with its prefix) + target (with EOS) tokens of each of these pairs (int64)."""
        extra = (self.src_prefix is not None) + 1
        return self.lengths[idx].astype(np.int64) + extra

    def longest_pair(self) -> int:
        """The most tokens one pair of this direction takes: the smallest token batch it fits in."""
        return int(self.pair_tokens().max())

    def _epoch_plan(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(len(self.src))
        if self.max_tokens is None:
            chunk = self.batch_size * self.pool
        else:  # pools of about `pool` token batches
            chunk = self.pool * max(1, self.max_tokens * len(order) // int(self.pair_tokens().sum()))
        batches: list[np.ndarray] = []
        for start in range(0, len(order), chunk):
            part = order[start:start + chunk]
            part = part[np.argsort(self.lengths[part], kind="stable")]
            if self.max_tokens is None:
                batches.extend(part[i:i + self.batch_size] for i in range(0, len(part), self.batch_size))
            else:
                batches.extend(token_batches(part, self.pair_tokens(part), self.max_tokens))
        rng.shuffle(batches)
        return batches

    def __len__(self) -> int:
        return len(self._plan)

    def next_indices(self) -> np.ndarray:
        """The sentence-pair indices of the next batch (the whole step's, before any split)."""
        if self.position >= len(self._plan):
            self.epoch, self.position = self.epoch + 1, 0
            self._plan = self._epoch_plan(self.epoch)
        idx = self._plan[self.position]
        self.position += 1
        return idx

    def next(self) -> Batch:
        return self.batch(self.next_indices())

    def batch(self, idx: np.ndarray) -> Batch:
        """The padded batch of these sentence pairs."""
        return make_batch([self.src[i] for i in idx], [self.tgt[i] for i in idx], self.src_lang, self.tgt_lang,
                          self.src_prefix, self.tgt_start, self.reverse_prefix)

    def batch_both_ways(self, idx: np.ndarray, reverse_prefix: int | None, reverse_start: int) -> tuple[Batch, Batch]:
        """These pairs as a batch, and the same pairs the other way round (target -> source, with
        that direction's source prefix and decoder start): paper 003's cost(a->b) + cost(b->a)."""
        src, tgt = [self.src[i] for i in idx], [self.tgt[i] for i in idx]
        return (make_batch(src, tgt, self.src_lang, self.tgt_lang, self.src_prefix, self.tgt_start, reverse_prefix),
                make_batch(tgt, src, self.tgt_lang, self.src_lang, reverse_prefix, reverse_start, self.src_prefix))

    def target_tokens(self, idx: np.ndarray, reverse: bool = False) -> int:
        """The loss's token count of these pairs (each target + EOS; `reverse`: of the sources as targets)."""
        side = self.src if reverse else self.tgt
        return int(side.lengths[idx].sum(dtype=np.int64)) + len(idx)

    def tokens(self, idx: np.ndarray) -> int:
        """Source (with its prefix) + target (with EOS) tokens of these pairs: what tokens/s counts, and
        what a token batch holds at most `max_tokens` of."""
        return int(self.pair_tokens(idx).sum())

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._plan = self._epoch_plan(self.epoch)
