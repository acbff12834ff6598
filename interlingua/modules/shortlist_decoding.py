"""Decoding over a per-sentence shortlist of target subwords (`interlingua.data.shortlist`).

`ShortlistDecoder` wraps a decoder so that the shared greedy and beam searches run unchanged over
*candidate positions* instead of vocabulary ids: position p stands for id `ids[p]`, where `ids` is
the union of the batch's sentences' candidates, and only those rows of the output layer are
computed (one matrix product per step, the output layer's rows read once for the whole batch),
normalised and searched. Positions 0-3 are the special ids themselves (pad, unk, bos, eos), so the
search's end-of-sentence test holds as it is, and position 4 is the decoder's start token (BOS or
a language tag). Each sentence is then masked to its own candidates, so that its translation
depends on its sentence alone, never on the batch it is decoded in (CTranslate2's vmap leaves
each sentence the batch's union).

The log-probabilities are normalised over the candidates (as CTranslate2's vmap does): a
shortlist changes scores and, where the full vocabulary would pick a token outside it, outputs.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from interlingua.data.vocab import EOS
from interlingua.modules.base import Decoder, DecoderStateLike
from interlingua.modules.outputs import RestrictedDecoder

START_POSITION = EOS + 1
"""The candidate position of the decoder's start token (after the special ids 0..EOS)."""


@dataclass
class ShortlistState(DecoderStateLike):
    inner: Any
    """The wrapped decoder's state (a `DecoderStateLike`)."""
    rows: torch.Tensor
    """(rows,) the sentence (index into the batch's candidate lists) of each state row."""

    @property
    def batch_size(self) -> int:
        return self.inner.batch_size

    def select(self, index: torch.Tensor) -> ShortlistState:
        return ShortlistState(self.inner.select(index), self.rows.index_select(0, index))

    def reorder_beams(self, index: torch.Tensor) -> ShortlistState:
        """Rows move only inside their sentence's beams, so each row's sentence stays as it is."""
        return ShortlistState(self.inner.reorder_beams(index), self.rows)

    def expand_beams(self, index: torch.Tensor) -> ShortlistState:
        return ShortlistState(self.inner.expand_beams(index), self.rows.index_select(0, index))


def output_layer_weights(generator: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The output layer's weight (V, d) and bias (V,), as floating-point tensors, from an `nn.Linear` or a
    quantized replacement that can give them back (`dequantized_weight()`)."""
    weight, bias = getattr(generator, "weight", None), getattr(generator, "bias", None)
    bias = bias if isinstance(bias, torch.Tensor) else None
    if isinstance(weight, torch.Tensor) and weight.is_floating_point():
        return weight, bias
    dequantized = getattr(generator, "dequantized_weight", None)
    if callable(dequantized):
        return dequantized(), bias
    raise TypeError(f"the output layer ({type(generator).__name__}) exposes no weight to shortlist")


def _candidate_rows(generator: nn.Module, ids: torch.Tensor) -> nn.Module:
    """An output layer of the rows `ids` of `generator`: an `nn.Linear`, or for an int8 output layer
    (`modules.int8.Int8Linear.rows`) an int8 one with exactly its int8 rows and scales."""
    from interlingua.modules.int8 import Int8Linear
    if isinstance(generator, Int8Linear):
        return generator.rows(ids)
    weight, bias = output_layer_weights(generator)
    layer = nn.Linear(weight.size(1), len(ids), bias=bias is not None, device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        layer.weight.copy_(weight.index_select(0, ids))
        if bias is not None:
            layer.bias.copy_(bias.index_select(0, ids))
    return layer.requires_grad_(False)


class ShortlistDecoder:
    """A decoder for the search over candidate positions: its `step` (the search reorders the
    `ShortlistState` itself)."""

    def __init__(self, decoder: Decoder, candidates: Sequence[np.ndarray], start: int):
        self.decoder = decoder
        device = next(decoder.parameters()).device  # not the output layer's weight: int8 would unpack it
        fixed = np.array(list(range(START_POSITION)) + [start], dtype=np.int64)
        own = [np.setdiff1d(np.asarray(c, dtype=np.int64), fixed) for c in candidates]
        if isinstance(decoder, RestrictedDecoder):  # a language added to a shared model: only its own rows
            rows = decoder.rows.index(torch.device("cpu")).numpy()
            own = [np.intersect1d(c, rows) for c in own]
        ids = np.concatenate([fixed, np.unique(np.concatenate(own))]) if own else fixed
        allowed = np.zeros((len(own), len(ids)), dtype=bool)
        allowed[:, :len(fixed)] = True
        for i, c in enumerate(own):
            allowed[i, np.searchsorted(ids[len(fixed):], c) + len(fixed)] = True
        self.ids = torch.from_numpy(ids).to(device)
        """(U,) the vocabulary id of each candidate position: the union of the batch's candidates."""
        self.blocked = torch.from_numpy(~allowed).to(device)
        """(batch, U) True where a position is not among that sentence's candidates."""
        self.output = _candidate_rows(decoder.generator, self.ids)
        """The output layer's rows of the candidates: (rows, d) -> (rows, U)."""
        self._cached: tuple[torch.Tensor, torch.Tensor] | None = None

    def parameters(self) -> Iterator[nn.Parameter]:
        return self.decoder.parameters()

    def wrap(self, state: Any) -> ShortlistState:
        return ShortlistState(state, torch.arange(self.blocked.size(0), device=self.ids.device))

    def _blocked_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """The mask of each state row's sentence (rows change only when sentences leave or beams start)."""
        if self._cached is None or not (self._cached[0] is rows or torch.equal(self._cached[0], rows)):
            self._cached = (rows, self.blocked.index_select(0, rows))
        return self._cached[1]

    def step(self, prev: torch.Tensor, state: ShortlistState) -> tuple[torch.Tensor, ShortlistState]:
        """prev (rows,) candidate positions -> log-probabilities over the candidate positions (rows, U)."""
        logits, state = self.step_scores(prev, state)
        return torch.log_softmax(logits, dim=-1), state

    def step_scores(self, prev: torch.Tensor, state: ShortlistState) -> tuple[torch.Tensor, ShortlistState]:
        """`step` before the log_softmax: the candidates' logits (rows, U) fp32, -inf where a position is not
        among its sentence's candidates."""
        hidden, inner = self.decoder.step_states(self.ids[prev], state.inner)       # (rows, d)
        logits = self.output(hidden).float()
        logits.masked_fill_(self._blocked_rows(state.rows), float("-inf"))
        return logits, ShortlistState(inner, state.rows)

    def to_ids(self, hyps: Sequence[Sequence[int]]) -> list[list[int]]:
        """Hypotheses in candidate positions -> vocabulary ids."""
        table = self.ids.tolist()
        return [[table[p] for p in hyp] for hyp in hyps]
