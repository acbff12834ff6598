"""What every kind of encoder, bridge and decoder offers: the interfaces the model, the search,
the trainer and the embedder are written against (kinds: `interlingua.modules.registry`).

    encoder[src_lang]:  ids (batch, n), lengths -> states H (batch, n, d_h), mask (batch, n)
    bridge (shared):    H, mask (, lang) -> BridgeOutput: memory M, its mask, attention A or None, penalty
    decoder[tgt_lang]:  memory -> state; teacher forcing over a whole target (training) or one
                        step at a time (search), both through the same `generator`
    decoder state:      rows selected, repeated and reordered by the search itself (`DecoderStateLike`)
"""
from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

import torch
from torch import nn


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over dim 1 of `x` (batch, n, d) at the rows where `mask` (batch, n) is True, in x's dtype
    (an all-False row gives zeros): the sentence vector, and the decoder's start state."""
    m = mask.unsqueeze(-1).to(x.dtype)
    return (x * m).sum(1) / m.sum(1).clamp_min(1.0)


class Kind(nn.Module):
    """A module that a registry can build from its config (`type` chooses the class)."""

    kind: ClassVar[str] = ""
    """The kind's name in its registry (set by `Registry.register`)."""

    @classmethod
    @abstractmethod
    def from_config(cls, cfg: Any, *args: Any, **context: Any) -> Kind:
        """Build from the slot's config (a `KindConfig`, each kind its own subclass); `context` holds
        what the model knows (sizes, dropout): take what the kind needs and ignore the rest (`**_`).
        (`cfg: Any, *args: Any` lets each kind name its own config class and keyword-only context.)"""



class Encoder(Kind):
    """Built with context `vocab_size`, `embed_dim`, `dropout`."""

    output_dim: int
    """d_h, the size of each state of H."""
    max_length: int | None = None
    """The longest input the kind reads (a learned position table's size, language tag included);
    None: any length."""
    self_attention_layers: int = 0
    """Layers with a self-attention over the tokens that `self_attention` returns (0: none, a BiLSTM)."""

    @abstractmethod
    def forward(self, src: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src (batch, n) right-padded ids, lengths (batch,) -> H (batch, n, d_h), mask (batch, n),
        True on real tokens; padded positions of H are zero."""

    def layer_states(self, src: torch.Tensor, lengths: torch.Tensor, upto: int | None = None
                     ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The states after every layer, for analyses that look inside the encoder: [embeddings as the
        first layer sees them, layer 1, ..., layer L], each (batch, n, d_i) and zero at padding, and the
        mask. The last entry is exactly `forward`'s H (built-in kinds compute `forward` through this).
        `upto` k < L: only the embeddings and layers 1..k are run (the agreement term on layer k needs no
        more), each state as in the whole stack."""
        raise NotImplementedError(f"encoder kind '{self.kind}' does not expose its layer states")

    def self_attention(self, src: torch.Tensor, lengths: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Each self-attention layer's weights [(batch, heads, n, n), layer 1 first], row p what position p
        attends to, and the mask; for heat maps of what the encoder mixes. Only kinds with
        `self_attention_layers` > 0 have them."""
        raise NotImplementedError(f"encoder kind '{self.kind}' has no self-attention")


@dataclass
class BridgeOutput:
    memory: torch.Tensor
    """(batch, mem_len, d) what the decoder attends to: M (mem_len = k) or H."""
    memory_mask: torch.Tensor
    """(batch, mem_len) True where the decoder may attend."""
    attention: torch.Tensor | None
    """(batch, k, src_len) bridge attention A (None without a bridge)."""
    penalty: torch.Tensor
    """(batch,) ||A A^T - I||_F^2 per sentence (zeros without a bridge)."""
    heads: torch.Tensor | None = None
    """(batch, k, vector_dim) the per-head vectors where they are not the memory rows themselves
    (NTDV: the self-attentive outputs P, before the GRU); None: the memory rows are the heads."""


class Bridge(Kind):
    """Built with context `input_dim` (the encoder's d_h)."""

    output_dim: int
    """Size of each memory row (what the decoder attends over)."""
    heads: int | None = None
    """k where the memory has a fixed number of rows, one vector per head; None where it follows
    the sentence length (no per-head vectors)."""
    attention_available: bool = False
    """Whether `BridgeOutput.attention` holds an attention over the source tokens."""

    @property
    def vector_dim(self) -> int:
        """Size of the sentence vector and of each head's vector: the memory row's, unless the kind
        pools something else (NTDV)."""
        return self.output_dim

    @abstractmethod
    def forward(self, states: torch.Tensor, mask: torch.Tensor, lang: str | None = None) -> BridgeOutput:
        """H (batch, n, d_h), mask (batch, n) of a `lang` encoder -> memory, mask, attention, penalty.
        Only kinds with per-language parts (NTDV's projections) need `lang`."""

    def pooled(self, out: BridgeOutput) -> torch.Tensor:
        """The sentence vector (batch, vector_dim), fp32: the masked mean of the memory rows."""
        return masked_mean(out.memory.float(), out.memory_mask)

    def head_vectors(self, out: BridgeOutput) -> torch.Tensor:
        """One vector per head (batch, heads, vector_dim), fp32; only where `heads` is not None."""
        if self.heads is None:
            raise ValueError(f"bridge '{self.kind}' has no per-head vectors")
        return (out.memory if out.heads is None else out.heads).float()


_State = TypeVar("_State", bound="DecoderStateLike")


def decoder_device(decoder: Any) -> torch.device:
    """Where a decoder's weights are (the CPU for one without any): the device the search puts its own tensors on.
    A wrapper around a decoder (a shortlist, n-gram blocking) passes `parameters()` on, so it answers the same."""
    parameters = getattr(decoder, "parameters", None)
    params = parameters() if callable(parameters) else iter(())
    param = next(params, None)
    return param.device if param is not None else torch.device("cpu")


def sentence_rows(index: torch.Tensor, rows: int, sentences: int) -> torch.Tensor:
    """Row indices `index` of a state with `rows` rows, `rows / sentences` consecutive ones per sentence (beam
    search's hypotheses, whose sentence's memory is kept once), as sentence indices: each sentence's rows are
    picked together, as beam search leaves them."""
    if rows == sentences:
        return index
    width = rows // sentences
    return index[::width] // width


def check_rows_per_sentence(rows: int, sentences: int, other_rows: int, other_sentences: int) -> None:
    """What `join` needs of two states that keep a sentence's memory once for its beams: as many rows a sentence in
    both (both before beams, or both with as many beams), else `sentence_rows` would read the joined rows wrong."""
    if rows * other_sentences != other_rows * sentences:
        raise ValueError("join takes states of as many rows a sentence (both before beams, or both with as "
                         "many beams)")


class DecoderStateLike(Protocol):
    """What the search needs of a decoder state: its rows (one per sentence, or per hypothesis in beam
    search) and how to select them. The search reorders a state through these methods, never through the
    decoder, so a decoder wrapper implements only the `step` it changes and passes the state on
    (`modules.outputs.RestrictedDecoder`), or wraps it in a state of its own that follows this contract
    around the inner one (`modules.shortlist_decoding.ShortlistState`).

    A state class subclasses this protocol to get the defaults (`reorder_beams` and `expand_beams` fall
    back to `select`), or implements all four members itself."""

    @property
    def batch_size(self) -> int:
        """Rows in the state: sentences, or hypotheses once beam search expanded them."""
        ...

    def select(self: _State, index: torch.Tensor) -> _State:
        """Rows `index` (a long tensor on the state's device) of the state, in that order: any selection,
        repetition or reordering (finished sentences leaving the batch, a sentence picked alone)."""
        ...

    def reorder_beams(self: _State, index: torch.Tensor) -> _State:
        """`select` for a reordering that stays inside each sentence's beams (a beam-search step): what is
        computed once per sentence is the same in all of its rows and may be left in place. This is the
        search's per-step hot path: it should copy only what the hypotheses do not share."""
        return self.select(index)

    def expand_beams(self: _State, index: torch.Tensor) -> _State:
        """Beam search's first step: each sentence's one row becomes its beams (`index` repeats each
        sentence's row, in order). A state may keep what is computed once per sentence (the memory) once,
        for its decoder to attend to it from all of the sentence's rows; by default everything is repeated."""
        return self.select(index)


class Decoder(Kind):
    """Built with context `vocab_size`, `embed_dim`, `memory_dim` (the bridge's output_dim), `dropout` and
    `languages` (the target languages it serves: all of a shared model's, else its own).

    A decoder state is whatever the kind needs between steps that follows `DecoderStateLike` (rows, and
    how to select them); only the decoder looks inside it. Beam search (`interlingua.modules.search`) uses
    `start_state` and `step`, greedy search `step_scores`, and both reorder the state through the state
    itself; training uses `start_state`, `forward` and `generator`; a shortlist also uses `step_states`.
    A kind implements `step_states` (or `step` and `step_scores`); a wrapper around a decoder (a restricted
    output vocabulary) implements only what it changes.
    """

    max_length: int | None = None
    """The most positions the kind decodes (a learned position table's size, start token included:
    that many search steps); None: any number."""
    generator: nn.Linear
    """Output layer: decoder states (..., H) -> vocabulary logits (the sampled softmax slices its rows)."""

    @abstractmethod
    def start_state(self, memory: torch.Tensor, memory_mask: torch.Tensor, language: str | None = None) -> Any:
        """The state (a `DecoderStateLike`) before the first target token, for a batch of memories decoded
        into `language` (the model always passes it; kinds that embed the target language need it, the
        others ignore it)."""

    @abstractmethod
    def forward(self, tgt_in: torch.Tensor, state: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Teacher forcing: tgt_in (batch, T) -> states (batch, T, H) for `generator`, and the
        attention over the memory (batch, T, mem_len) or None."""

    def step(self, prev: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """One inference step: prev (batch,) token ids -> log-probabilities (batch, V) fp32, new state.
        Must equal the teacher-forced log_softmax(generator(states)) at the same position. Here: the
        log_softmax of `step_scores`; a kind overrides this or `step_states`."""
        scores, state = self.step_scores(prev, state)
        return torch.log_softmax(scores.float(), dim=-1), state

    def step_scores(self, prev: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """`step`'s scores before they are normalised: (batch, V) in any float dtype, each row in the order of
        `step`'s log-probabilities (its maximum at the same token), and the new state. Greedy search reads
        only the best token of a step and so skips the log_softmax (about a tenth of a greedy step of a d128
        Transformer with 8,000 outputs: docs/results/speed.md). Here: `generator(step_states)`, or the
        log-probabilities of a class that overrides `step` (a kind without `step_states`, a wrapper that
        changes the step), which are in that order too."""
        if type(self).step is not Decoder.step:
            return self.step(prev, state)
        states, state = self.step_states(prev, state)
        return self.generator(states), state

    def step_states(self, prev: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """`step` without the output layer: the states (batch, H) that `generator` reads, and the new state.
        What a shortlist (`modules.shortlist_decoding`) needs to compute only some of the output rows; kinds
        without it (overriding `step` instead) decode over the whole vocabulary."""
        raise NotImplementedError(f"decoder kind '{self.kind}' has no step_states: it cannot decode with a shortlist"
                                  + ("" if type(self).step is not Decoder.step else ", nor at all without `step`"))
