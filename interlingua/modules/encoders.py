"""Language-specific encoders: token ids -> states H (batch, src_len, d_h) and a padding mask."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from interlingua.data.vocab import PAD


def lengths_to_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """(batch,) lengths -> (batch, max_len) bool, True on real tokens."""
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


class BiLSTMEncoder(nn.Module):
    """Stacked bidirectional LSTM (the papers: 2 layers, d_h = 512, 256 per direction).

    Sequences are packed, so a sentence's states do not depend on how much padding its
    batch carries.
    """

    def __init__(self, vocab_size: int, embed_dim: int, hidden: int, layers: int, dropout: float):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD)
        self.lstm = nn.LSTM(embed_dim, hidden // 2, num_layers=layers, batch_first=True,
                            bidirectional=True, dropout=dropout if layers > 1 else 0.0)
        self.dropout = nn.Dropout(dropout)
        self.output_dim = hidden

    def forward(self, src: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src (batch, src_len), lengths (batch,) -> H (batch, src_len, d_h), mask (batch, src_len)."""
        x = self.dropout(self.embed(src))
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        states, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))
        return self.dropout(states), lengths_to_mask(lengths, src.size(1))
