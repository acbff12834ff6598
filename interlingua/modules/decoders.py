"""Language-specific decoders (kinds: `lstm`). \
The LSTM decoder: LSTM with Luong ("general") attention over the bridge memory.

Initial state: tanh(W mean(memory)) (paper 001), so the decoder starts from the sentence
vector itself. Without input feeding the whole target sequence runs through one fused LSTM
call in training (fast on CPU); with input feeding (`input_feed=True`, OpenNMT-py's default)
the previous attentional state joins each input and steps run one at a time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from interlingua.config import KindConfig
from interlingua.data.vocab import PAD
from interlingua.modules.base import Decoder, DecoderStateLike, check_rows_per_sentence, masked_mean, sentence_rows
from interlingua.modules.dropout import Dropout
from interlingua.modules.linear import Linear
from interlingua.modules.lstm import LSTM
from interlingua.modules.registry import DECODERS


@dataclass
class DecoderState(DecoderStateLike):
    hidden: torch.Tensor
    """(layers, rows, hidden): one row per sentence, or per hypothesis once beam search expanded them."""
    cell: torch.Tensor
    """(layers, rows, hidden)"""
    feed: torch.Tensor | None
    """(rows, hidden) previous attentional state (input feeding only)."""
    keys: torch.Tensor
    """(sentences, mem_len, hidden) W_a applied to the memory, computed once per sentence and kept once for its
    beams (see `expand_beams`)."""
    memory: torch.Tensor
    """(sentences, mem_len, memory_dim)"""
    memory_mask: torch.Tensor
    """(sentences, mem_len) True where the decoder may attend."""

    @property
    def batch_size(self) -> int:
        return self.hidden.size(1)

    def select(self, index: torch.Tensor) -> DecoderState:
        """Rows `index`; where beams share their sentence's memory, whole sentences' rows (as beam search picks
        them), with the memory of their sentences."""
        memory_index = sentence_rows(index, self.batch_size, self.memory.size(0))
        return DecoderState(
            self.hidden.index_select(1, index), self.cell.index_select(1, index),
            None if self.feed is None else self.feed.index_select(0, index),
            self.keys.index_select(0, memory_index), self.memory.index_select(0, memory_index),
            self.memory_mask.index_select(0, memory_index),
        )

    def expand_beams(self, index: torch.Tensor) -> DecoderState:
        """The memory, its keys and its mask stay once per sentence; its hypotheses attend to them together
        (`LSTMDecoder._attend`), as the Transformer's do."""
        return self.reorder_beams(index)

    def join(self, other: DecoderState) -> DecoderState:
        """The rows of `self` then those of `other` (the search adds sentences to a batch being decoded): an
        LSTM's state has no position, so only the memories are padded to the longer one (zeros, masked). Both
        have as many rows a sentence."""
        check_rows_per_sentence(self.batch_size, self.memory.size(0), other.batch_size, other.memory.size(0))
        length = max(self.memory.size(1), other.memory.size(1))

        def padded(x: torch.Tensor, value: float | bool = 0.0) -> torch.Tensor:  # (rows, mem_len, ...) to length
            return x if x.size(1) == length else F.pad(x, (0, 0) * (x.dim() - 2) + (0, length - x.size(1)),
                                                       value=value)

        feed = None if self.feed is None or other.feed is None else torch.cat([self.feed, other.feed])
        return DecoderState(torch.cat([self.hidden, other.hidden], 1), torch.cat([self.cell, other.cell], 1), feed,
                            torch.cat([padded(self.keys), padded(other.keys)]),
                            torch.cat([padded(self.memory), padded(other.memory)]),
                            torch.cat([padded(self.memory_mask, False), padded(other.memory_mask, False)]))

    def reorder_beams(self, index: torch.Tensor) -> DecoderState:
        """Hidden, cell and input feed follow the beams; keys, memory and mask are per sentence, so they stay
        in place."""
        return DecoderState(self.hidden.index_select(1, index), self.cell.index_select(1, index),
                            None if self.feed is None else self.feed.index_select(0, index),
                            self.keys, self.memory, self.memory_mask)


class LSTMDecoderConfig(KindConfig):
    type: Literal["lstm"] = "lstm"
    layers: int = Field(2, ge=1, le=16)
    hidden: int = Field(512, ge=2)
    input_feed: bool = False
    """Luong input feeding: slower on CPU (one step at a time in training)."""


@DECODERS.register("lstm", config=LSTMDecoderConfig)
class LSTMDecoder(Decoder):
    def __init__(self, vocab_size: int, embed_dim: int, hidden: int, layers: int, memory_dim: int,
                 dropout: float, input_feed: bool):
        super().__init__()
        self.layers, self.hidden_size, self.input_feed = layers, hidden, input_feed
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD)
        self.lstm = LSTM(embed_dim + (hidden if input_feed else 0), hidden, num_layers=layers,
                         batch_first=True, dropout=dropout if layers > 1 else 0.0)
        self.init_proj = Linear(memory_dim, 2 * layers * hidden)
        self.key_proj = Linear(memory_dim, hidden, bias=False)
        self.out_proj = Linear(memory_dim + hidden, hidden, bias=False)
        self.generator = Linear(hidden, vocab_size)
        self.dropout = Dropout(dropout)

    @classmethod
    def from_config(cls, cfg: LSTMDecoderConfig, *, vocab_size: int, embed_dim: int, memory_dim: int, dropout: float,
                    **_: object) -> LSTMDecoder:
        return cls(vocab_size, embed_dim, cfg.hidden, cfg.layers, memory_dim, dropout, cfg.input_feed)

    def start_state(self, memory: torch.Tensor, memory_mask: torch.Tensor,
                    language: str | None = None) -> DecoderState:
        """Initial state from the masked mean of the memory (mean of M's k columns); `language` is not used
        (the LSTM decoder learns the target language from its own parameters or the tag)."""
        pooled = masked_mean(memory, memory_mask)
        init = torch.tanh(self.init_proj(pooled))                           # (batch, 2*L*H)
        init = init.view(-1, 2, self.layers, self.hidden_size).permute(1, 2, 0, 3).contiguous()
        feed = memory.new_zeros(memory.size(0), self.hidden_size) if self.input_feed else None
        return DecoderState(init[0], init[1], feed, self.key_proj(memory), memory, memory_mask)

    def _attend(self, query: torch.Tensor, state: DecoderState) -> tuple[torch.Tensor, torch.Tensor]:
        """query (rows, T, H) -> attentional states (rows, T, H), weights (rows, T, mem_len). Beam search's rows
        (more than the memory's sentences) attend as their sentence's queries over its one memory: two products
        of a few rows per sentence instead of one row each over a copy of the memory per hypothesis."""
        rows, steps, _ = query.shape
        sentences = state.memory.size(0)
        grouped = query.reshape(sentences, rows // sentences * steps, -1)
        scores = grouped @ state.keys.transpose(1, 2)
        scores = scores.masked_fill(~state.memory_mask.unsqueeze(1), float("-inf"))
        weights = torch.softmax(scores.float(), dim=-1).to(query.dtype)
        context = (weights @ state.memory).reshape(rows, steps, -1)
        weights = weights.reshape(rows, steps, -1)
        return torch.tanh(self.out_proj(torch.cat([context, query], dim=-1))), weights

    def forward(self, tgt_in: torch.Tensor, state: DecoderState) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing: tgt_in (batch, T) -> attentional states (batch, T, H), attention (batch, T, mem_len)."""
        emb = self.dropout(self.embed(tgt_in))
        if not self.input_feed:
            out, _ = self.lstm(emb, (state.hidden, state.cell))
            att, weights = self._attend(out, state)
            return self.dropout(att), weights
        outs, ws = [], []
        for t in range(emb.size(1)):
            att, weights, state = self._step(emb[:, t:t + 1], state)
            outs.append(att)
            ws.append(weights)
        return self.dropout(torch.cat(outs, 1)), torch.cat(ws, 1)

    def _step(self, emb: torch.Tensor, state: DecoderState) -> tuple[torch.Tensor, torch.Tensor, DecoderState]:
        inp = emb if state.feed is None else torch.cat([emb, self.dropout(state.feed).unsqueeze(1)], -1)
        out, (h, c) = self.lstm(inp, (state.hidden, state.cell))
        att, weights = self._attend(out, state)
        new = DecoderState(h, c, att[:, 0] if self.input_feed else None, state.keys, state.memory, state.memory_mask)
        return att, weights, new

    def step_states(self, prev: torch.Tensor, state: DecoderState) -> tuple[torch.Tensor, DecoderState]:
        """The attentional states (batch, H) that `generator` reads at this step, and the new state."""
        att, _, state = self._step(self.embed(prev).unsqueeze(1), state)
        return att[:, 0], state
