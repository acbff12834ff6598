"""The NTDV shared layers of paper 003 (Li & Mak): a self-attentive layer and a GRU between frozen
encoders and decoders, whose head outputs are cross-lingual sentence and document vectors.

For the states H (n, d_enc) of a source-language encoder:

    h^_i  = h_i W_e[lang] + b_e[lang]                                       (Eq. 5, per language)
    g^m   = softmax_i( (h^_i W_q^m + b_q^m) . (h^_i W_k^m + b_k^m) / sqrt(d_h) )  (Eq. 6, m = 1..r)
    p_m   = sum_i g^m_i (h^_i W_v^m + b_v^m)  =  (sum_i g^m_i h^_i) W_v^m + b_v^m   (Eq. 7)
    k_m   = GRU(p_m, k_{m-1})                                    (Eq. 8, over the heads in order)
    k^_m  = k_m W_p + b_p                                        (Eq. 9, back to d_enc)

Query and key come from the same position, so no position attends to another: each head scores
every token on its own and pools the sequence into one vector. W_q, W_k, W_v are full d_h x d_h
matrices per head (a head's size is d_h, not d_h / r). The decoder attends over the r rows of
K^ (Eq. 10), and forms its start state by its own rule from them (the LSTM decoder: tanh(W mean
K^)), so nothing reaches the decoder but through the shared layers. The sentence vector is
NTDV = sum_m p_m (Eq. 11-12), of size d_h; the per-head vectors are the p_m. The paper puts no
penalty on the heads: the kind's penalty is zero whatever `train.penalty_weight` says.
"""
from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import Field
from torch import nn

from interlingua.config import KindConfig
from interlingua.errors import LanguageError
from interlingua.modules.base import Bridge, BridgeOutput
from interlingua.modules.linear import Linear
from interlingua.modules.registry import BRIDGES

__all__ = ["NTDVBridge", "NTDVBridgeConfig"]


class NTDVBridgeConfig(KindConfig):
    """Paper 003's shared layers (NTDV): a projection per source language, a self-attentive layer
    of `heads` heads of size `hidden` (no position attends to another), a GRU over the head
    outputs and a projection back to the encoder's size, which the decoder attends over."""

    type: Literal["ntdv"] = "ntdv"
    heads: int = Field(4, ge=1, le=64)
    """r, the self-attention heads (the paper: 4)."""
    hidden: int = Field(1024, ge=1)
    """d_h, the size of each head's query/key/value and of the GRU (the paper: 1024)."""


@BRIDGES.register("ntdv", config=NTDVBridgeConfig)
class NTDVBridge(Bridge):
    """Paper 003's shared self-attentive + GRU layers, with a projection per source language."""

    attention_available = True

    def __init__(self, input_dim: int, hidden: int, heads: int, languages: list[str]):
        super().__init__()
        if not languages:
            raise ValueError("the ntdv bridge needs the source languages (one projection each)")
        self.heads, self.hidden = heads, hidden
        self.output_dim = input_dim
        self.projections = nn.ModuleDict({lang: Linear(input_dim, hidden) for lang in languages})
        self.query_key = Linear(hidden, 2 * heads * hidden)
        self.value_weight = nn.Parameter(torch.empty(heads, hidden, hidden))
        self.value_bias = nn.Parameter(torch.empty(heads, hidden))
        self.gru = nn.GRU(hidden, hidden, batch_first=True)
        self.out = Linear(hidden, input_dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The per-head value projections as nn.Linear initialises its own (the other parts reset
        themselves)."""
        bound = 1 / math.sqrt(self.hidden)
        nn.init.uniform_(self.value_weight, -bound, bound)
        nn.init.uniform_(self.value_bias, -bound, bound)

    @classmethod
    def from_config(cls, cfg: NTDVBridgeConfig, *, input_dim: int, languages: list[str] | None = None,
                    **_: object) -> NTDVBridge:
        return cls(input_dim, cfg.hidden, cfg.heads, list(languages or []))

    @property
    def vector_dim(self) -> int:
        return self.hidden

    def forward(self, states: torch.Tensor, mask: torch.Tensor, lang: str | None = None) -> BridgeOutput:
        """H (batch, n, d_enc), mask -> K^ (batch, r, d_enc) as the memory, g (batch, r, n) as the
        attention, P (batch, r, d_h) as the head vectors."""
        if lang is None or lang not in self.projections:
            raise LanguageError(f"the ntdv bridge has no projection for '{lang}' "
                                f"(languages: {', '.join(sorted(self.projections))})")
        batch, n, _ = states.shape
        projected = self.projections[lang](states)                                   # (batch, n, d_h)
        qk = self.query_key(projected).view(batch, n, 2, self.heads, self.hidden)
        scores = (qk[:, :, 0] * qk[:, :, 1]).sum(-1) / math.sqrt(self.hidden)      # (batch, n, r)
        scores = scores.masked_fill(~mask.unsqueeze(-1), float("-inf"))
        attention = torch.softmax(scores.float(), dim=1).transpose(1, 2)          # (batch, r, n)
        pooled = attention.to(projected.dtype) @ projected                          # (batch, r, d_h)
        heads = torch.einsum("brd,rde->bre", pooled, self.value_weight.to(pooled.dtype)) + self.value_bias
        summary, _ = self.gru(heads)                                                 # (batch, r, d_h)
        memory = self.out(summary)
        memory_mask = torch.ones(memory.shape[:2], dtype=torch.bool, device=memory.device)
        no_penalty = torch.zeros(batch, dtype=torch.float32, device=states.device)  # the paper has none
        return BridgeOutput(memory, memory_mask, attention, no_penalty, heads)

    def pooled(self, out: BridgeOutput) -> torch.Tensor:
        """NTDV (batch, d_h): the sum of the r self-attentive head outputs (Eq. 11-12), not the GRU's."""
        assert out.heads is not None
        return out.heads.float().sum(1)
