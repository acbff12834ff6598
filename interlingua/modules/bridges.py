"""Bridges between encoders and decoders: what the decoder attends to.

`AttentionBridge` is the shared inner-attention layer of the papers:
    A = softmax(W2 ReLU(W1 H^T))    (k x n, softmax over the n real tokens)
    M = A H                          (k x d_h, fixed size whatever the sentence length)
with the penalty ||A A^T - I||_F^2 that pushes heads toward different parts of the sentence.
`NoBridge` hands H itself to the decoder: the classic attentional encoder-decoder baseline.
"""
from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from interlingua.config import KindConfig
from interlingua.modules.base import Bridge, BridgeOutput
from interlingua.modules.linear import Linear
from interlingua.modules.registry import BRIDGES

__all__ = ["AttentionBridge", "AttentionBridgeConfig", "BridgeOutput", "NoBridge", "NoBridgeConfig",
           "orthogonality_penalty"]


def orthogonality_penalty(attention: torch.Tensor) -> torch.Tensor:
    """||A A^T - I||_F^2 for each (k, n) matrix of a batch; padded columns of A are zero."""
    gram = attention @ attention.transpose(1, 2)
    eye = torch.eye(gram.size(-1), dtype=gram.dtype, device=gram.device)
    return ((gram - eye) ** 2).sum(dim=(1, 2))


class AttentionBridgeConfig(KindConfig):
    type: Literal["attention"] = "attention"
    heads: int = Field(10, ge=1, le=1024)
    """k, the number of attention heads (columns of M)."""
    hidden: int = Field(1024, ge=1)
    """d_w, the inner size of the bridge's two-layer scorer."""


@BRIDGES.register("attention", config=AttentionBridgeConfig)
class AttentionBridge(Bridge):
    """Shared inner-attention layer with k heads and scorer size d_w."""

    attention_available = True

    def __init__(self, input_dim: int, hidden: int, heads: int):
        super().__init__()
        self.w1 = Linear(input_dim, hidden, bias=False)
        self.w2 = Linear(hidden, heads, bias=False)
        self.heads = heads
        self.output_dim = input_dim

    @classmethod
    def from_config(cls, cfg: AttentionBridgeConfig, *, input_dim: int, **_: object) -> AttentionBridge:
        return cls(input_dim, cfg.hidden, cfg.heads)

    def forward(self, states: torch.Tensor, mask: torch.Tensor, lang: str | None = None) -> BridgeOutput:
        """states H (batch, n, d_h), mask (batch, n) -> M (batch, k, d_h) and A (batch, k, n)."""
        scores = self.w2(torch.relu(self.w1(states)))                # (batch, n, k)
        scores = scores.masked_fill(~mask.unsqueeze(-1), float("-inf"))
        attention = torch.softmax(scores.float(), dim=1).transpose(1, 2)  # (batch, k, n)
        memory = attention.to(states.dtype) @ states
        memory_mask = torch.ones(memory.shape[:2], dtype=torch.bool, device=memory.device)
        return BridgeOutput(memory, memory_mask, attention, orthogonality_penalty(attention))


class NoBridgeConfig(KindConfig):
    type: Literal["none"] = "none"
    heads: int = Field(10, ge=1, le=1024)
    """Unused: kept so that `type` alone switches a config between `attention` and `none`."""
    hidden: int = Field(1024, ge=1)
    """Unused, as `heads`."""


@BRIDGES.register("none", config=NoBridgeConfig)
class NoBridge(Bridge):
    """Pass the encoder states through: the decoder attends to every source token."""

    def __init__(self, input_dim: int | None = None):
        super().__init__()
        self.output_dim = input_dim  # type: ignore[assignment]  # H's size; unknown when built without it

    @classmethod
    def from_config(cls, cfg: NoBridgeConfig, *, input_dim: int, **_: object) -> NoBridge:
        return cls(input_dim)

    def forward(self, states: torch.Tensor, mask: torch.Tensor, lang: str | None = None) -> BridgeOutput:
        zero = torch.zeros(states.size(0), dtype=torch.float32, device=states.device)
        return BridgeOutput(states, mask, None, zero)
