"""`nn.LSTM` that runs under CPU bf16 autocast on every CPU.

PyTorch's CPU autocast puts LSTMs in bf16, and oneDNN has no bf16 LSTM for CPUs without native bf16 (AVX2
without AVX512-BF16 or AMX): there `nn.LSTM` under bf16 autocast raises "could not create a primitive descriptor
for the LSTM forward propagation primitive". On such CPUs this LSTM runs in fp32 with autocast off for its own
call (its inputs and states cast to fp32), the rest of the model still in bf16; elsewhere it is `nn.LSTM`."""
from __future__ import annotations

import torch
from torch import nn

from interlingua.precision import lstm_needs_fp32


class LSTM(nn.LSTM):
    """`nn.LSTM` (the same parameters and state-dict keys), in fp32 where bf16 autocast has no LSTM kernel."""

    def forward(self, input: torch.Tensor, hx: tuple[torch.Tensor, torch.Tensor] | None = None  # type: ignore[override]
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        if not lstm_needs_fp32(input.device):
            return super().forward(input, hx)
        with torch.autocast("cpu", enabled=False):
            state = None if hx is None else (hx[0].float(), hx[1].float())
            return super().forward(input.float(), state)
