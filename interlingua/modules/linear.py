"""Linear layers whose reduced-precision training products on the CPU reuse oneDNN's kernels.

Why: on the CPU, a bf16 (or fp16) matrix product runs through oneDNN, which builds (JIT-compiles) a
kernel for every new shape and keeps up to 1,024 of them. In training, the rows of a product are the
batch's tokens, a number that is new at nearly every step, so for hundreds of steps each product built
its kernels first, and kept them: a bf16 Transformer run used twice the memory of the same run with the rows
padded, at the same speed (the figures: docs/results/speed.md, "bf16 training on the CPU"). Here the rows of
such a product are padded with zeros to a multiple of `ROW_MULTIPLE` (at most 63 more rows, about 2% of a
training batch) and the padding's outputs dropped: the padding rows are zeros, so the real rows' outputs and
the gradients are the same products.

Only training products (gradients on) in bf16 / fp16 on the CPU are padded: fp32 products go to MKL,
decoding steps have a few hundred shapes at most (which the cache keeps), and a compiled step
(`train.compile`) leaves its products to inductor.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ROW_MULTIPLE = 64
"""Rows of a padded product are a multiple of this: 64 keeps the distinct shapes of a run to a few dozen
at most (the rows of a training product span a few thousand) for at most 63 rows of zeros."""

_REDUCED = (torch.bfloat16, torch.float16)


def _reduced_dtype(x: torch.Tensor) -> torch.dtype | None:
    """The dtype the product of `x` runs in when that is bf16 / fp16 (autocast's, else x's own), else None."""
    if torch.is_autocast_enabled("cpu"):
        dtype = torch.get_autocast_dtype("cpu")
        return dtype if dtype in _REDUCED else None
    return x.dtype if x.dtype in _REDUCED else None


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(x, weight, bias)`; a reduced-precision training product on the CPU runs with its rows
    padded to a multiple of `ROW_MULTIPLE` (see the module's docstring)."""
    if not torch.is_grad_enabled() or x.device.type != "cpu":  # decoding, GPUs: at once
        return F.linear(x, weight, bias)
    dtype = _reduced_dtype(x)
    if dtype is None or torch.compiler.is_compiling():  # fp32 training: one check more than F.linear
        return F.linear(x, weight, bias)
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    pad = -rows % ROW_MULTIPLE
    if pad == 0:  # no rows, or already a multiple
        return F.linear(x, weight, bias)
    flat = F.pad(x.reshape(rows, x.shape[-1]).to(dtype), (0, 0, 0, pad))
    return F.linear(flat, weight, bias)[:rows].reshape(*x.shape[:-1], weight.shape[0])


class Linear(nn.Linear):
    """`nn.Linear` whose product is `linear`'s: the same parameters, state dict keys and results."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
