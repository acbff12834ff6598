"""Per-language output restriction of a shared decoder whose id space grew (`interlingua extend`).

Once a language is added to a trained shared model, each target language may only produce the
ids of its own vocabulary (and the specials, EOS among them): its distribution is a softmax over
those rows of the output projection alone. For an old language these rows are exactly the old
model's (the old ids are a prefix of the id space), so its log-probabilities, and hence its
translations, are the old model's bit for bit: the logits come from the same contiguous weight
rows through the same `linear` (`interlingua.modules.linear`), and the softmax runs over the same number of entries.

Training uses the same restricted softmax (`TranslationNetwork.loss`), so the objective the model
is fine-tuned on is the distribution the search reads, and an old language's loss is the one it
was trained with before the new rows existed.
"""
from __future__ import annotations

import threading
from typing import Any

import torch
from torch import nn

from interlingua.modules.base import Decoder
from interlingua.modules.linear import linear


class OutputRows:
    """The ids one target language may produce, as sorted [start, end) ranges of the id space."""

    def __init__(self, ranges: list[tuple[int, int]]):
        self.ranges = [(int(a), int(b)) for a, b in ranges]
        self._index: dict[torch.device, torch.Tensor] = {}

    @property
    def prefix(self) -> int | None:
        """n where the rows are ids 0..n-1 (an old language's), else None."""
        return self.ranges[0][1] if len(self.ranges) == 1 and self.ranges[0][0] == 0 else None

    def index(self, device: torch.device) -> torch.Tensor:
        """The allowed ids, ascending, on `device`."""
        if device not in self._index:
            self._index[device] = torch.cat([torch.arange(a, b) for a, b in self.ranges]).to(device)
        return self._index[device]

    def __len__(self) -> int:
        return sum(b - a for a, b in self.ranges)

    def logits(self, generator: nn.Linear, states: torch.Tensor) -> torch.Tensor:
        """Logits of the allowed rows only (..., len(self)), column i being id `index()[i]`."""
        n = self.prefix
        if n is not None:  # contiguous rows: the very computation an unextended model of n ids does
            return linear(states, generator.weight[:n], None if generator.bias is None else generator.bias[:n])
        idx = self.index(states.device)
        return linear(states, generator.weight[idx], None if generator.bias is None else generator.bias[idx])

    def renumber(self, ids: torch.Tensor) -> torch.Tensor:
        """Positions of allowed ids among the allowed rows (what a restricted softmax's targets are)."""
        return ids if self.prefix is not None else torch.searchsorted(self.index(ids.device), ids)


_GENERATOR_SWAP = threading.Lock()
"""Held while a decoder kind without `step_states` runs with its generator swapped (`RestrictedDecoder.step`)."""


class _RowsGenerator(nn.Module):
    """Stands in for a decoder's generator during one search step: the allowed rows' logits."""

    def __init__(self, generator: nn.Linear, rows: OutputRows):
        super().__init__()
        self.inner, self.rows = generator, rows

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return self.rows.logits(self.inner, states)


class RestrictedDecoder(Decoder):
    """A decoder whose `step` gives log-probabilities over the allowed rows only (every other id
    -inf), so greedy and beam search never leave the target language's vocabulary.

    A kind with `step_states` gives its states and the allowed rows' logits are computed here; any other
    kind's own `step` runs with its `generator` swapped for the allowed rows for the call's duration
    (decoders compute log_softmax(generator(h)) in `step`), so no decoder kind needs to know about the
    restriction. The state is the inner decoder's, which the search reorders itself
    (`DecoderStateLike`): only `step` changes here."""

    def __init__(self, decoder: Decoder, rows: OutputRows):
        super().__init__()
        self.inner = decoder
        self.rows = rows

    @property
    def generator(self) -> nn.Linear:  # type: ignore[override]
        return self.inner.generator

    @classmethod
    def from_config(cls, cfg: Any, **context: Any) -> RestrictedDecoder:
        raise TypeError("a RestrictedDecoder wraps a built decoder; it is not a configurable kind")

    def start_state(self, memory: torch.Tensor, memory_mask: torch.Tensor, language: str | None = None) -> Any:
        return self.inner.start_state(memory, memory_mask, language)

    def forward(self, tgt_in: torch.Tensor, state: Any) -> Any:
        return self.inner(tgt_in, state)

    def step(self, prev: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        inner, generator = self.inner, self.inner.generator
        if type(inner).step_states is not Decoder.step_states:
            # a kind that gives its states: `step` is log_softmax(generator(states)), computed here over the
            # allowed rows without touching the decoder, so batches decoded in threads at once do not collide
            states, state = inner.step_states(prev, state)
            logp = torch.log_softmax(self.rows.logits(generator, states).float(), dim=-1)
        else:
            with _GENERATOR_SWAP:  # the shared decoder's generator is swapped for this call: one thread at a time
                inner.generator = _RowsGenerator(generator, self.rows)  # type: ignore[assignment]  # Linear's stand-in
                try:
                    logp, state = inner.step(prev, state)
                finally:
                    inner.generator = generator
        return self._whole_vocabulary(logp), state

    def step_scores(self, prev: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """The allowed rows' logits, every other id -inf (`step`'s order); a kind without `step_states`: `step`."""
        inner = self.inner
        if type(inner).step_states is Decoder.step_states:
            return self.step(prev, state)
        states, state = inner.step_states(prev, state)
        return self._whole_vocabulary(self.rows.logits(inner.generator, states)), state

    def _whole_vocabulary(self, allowed: torch.Tensor) -> torch.Tensor:
        """(rows, allowed) scores -> (rows, V), -inf at every id that is not allowed."""
        full = allowed.new_full((allowed.size(0), self.inner.generator.out_features), float("-inf"))
        n = self.rows.prefix
        if n is not None:
            full[:, :n] = allowed
        else:
            full[:, self.rows.index(allowed.device)] = allowed
        return full

    def step_states(self, prev: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """The inner decoder's: the states come before the output layer the restriction acts on (a shortlist,
        which computes its own rows, keeps only candidates among `rows`)."""
        return self.inner.step_states(prev, state)
