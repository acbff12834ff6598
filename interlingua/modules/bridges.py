"""Bridges between encoders and decoders: what the decoder attends to.

`AttentionBridge` is the shared inner-attention layer of the papers:
    A = softmax(W2 ReLU(W1 H^T))    (k x n, softmax over the n real tokens)
    M = A H                          (k x d_h, fixed size whatever the sentence length)
with the penalty ||A A^T - I||_F^2 that pushes heads toward different parts of the sentence.
`NoBridge` hands H itself to the decoder: the classic attentional encoder-decoder baseline.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


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


def orthogonality_penalty(attention: torch.Tensor) -> torch.Tensor:
    """||A A^T - I||_F^2 for each (k, n) matrix of a batch; padded columns of A are zero."""
    gram = attention @ attention.transpose(1, 2)
    eye = torch.eye(gram.size(-1), dtype=gram.dtype, device=gram.device)
    return ((gram - eye) ** 2).sum(dim=(1, 2))


class AttentionBridge(nn.Module):
    """Shared inner-attention layer with k heads and scorer size d_w."""

    def __init__(self, input_dim: int, hidden: int, heads: int):
        super().__init__()
        self.w1 = nn.Linear(input_dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, heads, bias=False)
        self.heads = heads

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> BridgeOutput:
        """states H (batch, n, d_h), mask (batch, n) -> M (batch, k, d_h) and A (batch, k, n)."""
        scores = self.w2(torch.relu(self.w1(states)))                # (batch, n, k)
        scores = scores.masked_fill(~mask.unsqueeze(-1), float("-inf"))
        attention = torch.softmax(scores.float(), dim=1).transpose(1, 2)  # (batch, k, n)
        memory = attention.to(states.dtype) @ states
        memory_mask = torch.ones(memory.shape[:2], dtype=torch.bool, device=memory.device)
        return BridgeOutput(memory, memory_mask, attention, orthogonality_penalty(attention))


class NoBridge(nn.Module):
    """Pass the encoder states through: the decoder attends to every source token."""

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> BridgeOutput:
        zero = torch.zeros(states.size(0), dtype=torch.float32, device=states.device)
        return BridgeOutput(states, mask, None, zero)
