"""No n-gram twice in one output (`no_repeat_ngram`), as fairseq's `--no-repeat-ngram-size`, OpenNMT-py's
`-block_ngram_repeat` and CTranslate2's `no_repeat_ngram_size` do.

Why: a decoder that has lost its place loops ("... und ein anderer Mann auf dem Rücken und ein anderer Mann auf
dem Rücken ...") until the output limit. Zero-shot directions do it most (the demo model's fr->de wrote loops
like that on long dev sentences), and a loop costs BLEU in every n-gram order. Blocking the token that would
complete an n-gram already written ends a loop at its first repetition.

`NgramBlockingDecoder` wraps a decoder so that the shared greedy and beam searches run unchanged: its state
carries each row's output so far (`NgramState`, left-padded with -1 where rows joined at different steps), and
its `step` / `step_scores` give -inf to every token that would repeat an n-gram of that row. The start token
is not part of the output (the first step's `prev`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from interlingua.modules.base import DecoderStateLike, decoder_device

NO_TOKEN = -1
"""History padding: never a token, never matched."""


@dataclass
class NgramState(DecoderStateLike):
    inner: Any
    """The wrapped decoder's state (a `DecoderStateLike`)."""
    history: torch.Tensor
    """(rows, steps) each row's output tokens so far, -1 where a row has fewer (left padding)."""
    started: bool
    """Whether a step was taken (the first step's input is the start token, not an output)."""

    @property
    def batch_size(self) -> int:
        return self.inner.batch_size

    def select(self, index: torch.Tensor) -> NgramState:
        return NgramState(self.inner.select(index), self.history.index_select(0, index), self.started)

    def reorder_beams(self, index: torch.Tensor) -> NgramState:
        return NgramState(self.inner.reorder_beams(index), self.history.index_select(0, index), self.started)

    def expand_beams(self, index: torch.Tensor) -> NgramState:
        return NgramState(self.inner.expand_beams(index), self.history.index_select(0, index), self.started)

    def join(self, other: NgramState) -> NgramState:
        """The rows of `self` then those of `other` (the search merging the tails of batches); the shorter
        history is left-padded. Only where the inner state joins (`modules.search.joinable` looks at it first)."""
        steps = max(self.history.size(1), other.history.size(1))
        histories = [F.pad(h, (steps - h.size(1), 0), value=NO_TOKEN) for h in (self.history, other.history)]
        return NgramState(self.inner.join(other.inner), torch.cat(histories), self.started or other.started)


def repeating_tokens(history: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, tokens): each token that would complete, in its row, an n-gram the row's `history` (rows, steps)
    already holds (its last n-1 tokens followed by the token). Both (k,) long tensors."""
    steps = history.size(1)
    if steps < n:  # an n-gram seen and a new one to compare need at least n tokens
        empty = history.new_zeros(0)
        return empty, empty
    following = history[:, n - 1:]  # the token after each window of n-1 (rows, steps - n + 1)
    if n == 1:
        seen = following >= 0
    else:
        windows = history[:, :steps - 1].unfold(1, n - 1, 1)  # (rows, steps - n + 1, n - 1)
        seen = (windows == history[:, steps - n + 1:].unsqueeze(1)).all(-1) & (following >= 0)
    rows, at = seen.nonzero(as_tuple=True)
    return rows, following[rows, at]


class NgramBlockingDecoder:
    """A decoder whose steps never repeat an n-gram of a row's output (see the module's docstring). The search
    uses `step` (beam search), `step_scores` (greedy) and the state's own reordering."""

    def __init__(self, inner: Any, n: int):
        if n < 1:
            raise ValueError(f"no_repeat_ngram must be at least 1, got {n}")
        self.inner, self.n = inner, n

    def wrap(self, state: Any) -> NgramState:
        """The start state, which the search then steps."""
        rows = state.batch_size
        return NgramState(state, torch.zeros((rows, 0), dtype=torch.long, device=decoder_device(self.inner)), False)

    def parameters(self) -> Any:
        """The inner decoder's (the search reads its device from them)."""
        return self.inner.parameters()

    def step(self, prev: torch.Tensor, state: NgramState) -> tuple[torch.Tensor, NgramState]:
        logp, inner = self.inner.step(prev, state.inner)
        return self._blocked(logp, prev, state, inner)

    def step_scores(self, prev: torch.Tensor, state: NgramState) -> tuple[torch.Tensor, NgramState]:
        """The inner decoder's unnormalised scores where it gives them (greedy search), else its `step`."""
        step = getattr(self.inner, "step_scores", None)
        scores, inner = (step if callable(step) else self.inner.step)(prev, state.inner)
        return self._blocked(scores, prev, state, inner)

    def _blocked(self, scores: torch.Tensor, prev: torch.Tensor, state: NgramState,
                 inner: Any) -> tuple[torch.Tensor, NgramState]:
        history = torch.cat([state.history, prev.unsqueeze(1)], 1) if state.started else state.history
        rows, tokens = repeating_tokens(history, self.n)
        if rows.numel():
            scores = scores.index_put((rows, tokens), scores.new_tensor(float("-inf")))
        return scores, NgramState(inner, history, True)


def with_ngram_blocking(decoder: Any, state: Any, n: int) -> tuple[Any, Any]:
    """`decoder` and its start `state` as the search should step them: wrapped to block repeated n-grams, or as they
    are for n = 0 (no blocking)."""
    if not n:
        return decoder, state
    blocking = NgramBlockingDecoder(decoder, n)
    return blocking, blocking.wrap(state)
