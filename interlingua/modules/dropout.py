"""Dropout whose masks are cheap on the CPU, for every model kind.

Why: torch's CPU dropout draws each element's keep-or-drop from its own double-precision
uniform (two 32-bit Mersenne-Twister draws an element, in one thread). In a d_model-128
Transformer training step that was about a fifth of the step's time. Here one 64-bit draw
gives four 16-bit uniforms, and an element is dropped where its uniform is below p: p is
kept to 1/65536, and the mask, forward and backward cost about a third of torch's.

The draws come from torch's default generator, as before, so runs are as reproducible and
resume as exactly as they were (the trainer saves that generator's state). On other devices
torch's own kernels (fused, counter-based) are already fast and are used as they are.

Inside a compiled training step (`train.compile`) torch.compile cannot trace the in-place draw, so
the CPU mask is an operator of its own there (`interlingua::keep_mask`), which the compiled graph
calls as it is, in the eager order: the same masks as an eager step from the same generator state (a
compiled run resumes exactly; inductor's own random numbers, the alternative, made a d128
Transformer's compiled steps 13% slower on an AMD EPYC). On other devices a compiled step draws with
inductor's random numbers.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

_UNIFORMS_PER_DRAW = 4
"""16-bit uniforms in one 64-bit draw."""


def keep_mask(shape: torch.Size | tuple[int, ...], p: float, device: torch.device) -> torch.Tensor:
    """A bool tensor of `shape`, each element True (kept) with probability 1 - p, independently
    (p rounded to a multiple of 1/65536 on the CPU)."""
    if torch.compiler.is_compiling():
        if device.type != "cpu":
            return torch.rand(shape, device=device) >= p
        return torch.ops.interlingua.keep_mask(_DRAWS, list(shape), p)
    if device.type != "cpu":
        return torch.empty(shape, device=device).bernoulli_(1 - p).bool()
    return _cpu_keep_mask(shape, p)


def _cpu_keep_mask(shape: Sequence[int], p: float) -> torch.Tensor:
    n = math.prod(shape)
    draws = torch.empty(-(-n // _UNIFORMS_PER_DRAW), dtype=torch.int64).random_(-2**63, None)
    uniforms = draws.view(torch.int16)[:n].view(shape)  # uniform over [-32768, 32767]
    return uniforms >= round(p * 65536) - 32768


_DRAWS = torch.zeros((), dtype=torch.int64)
"""The masks a compiled graph has drawn: each draw updates it, so the draws form a chain in the graph and
run in the order the eager forward pass makes them (the same masks as eager steps from the same state)."""


@torch.library.custom_op("interlingua::keep_mask", mutates_args=("draws",), tags=(torch.Tag.nondeterministic_seeded,))
def _keep_mask_op(draws: torch.Tensor, shape: Sequence[int], p: float) -> torch.Tensor:
    """`keep_mask` on the CPU as an operator a compiled graph calls as it is (`nondeterministic_seeded`:
    never merged with another call, nor recomputed in the backward pass)."""
    draws.add_(1)
    return _cpu_keep_mask(shape, p)


@_keep_mask_op.register_fake
def _keep_mask_shape(draws: torch.Tensor, shape: Sequence[int], p: float) -> torch.Tensor:
    return draws.new_empty(shape, dtype=torch.bool)


def scaled_keep_mask(shape: torch.Size | tuple[int, ...], p: float, like: torch.Tensor) -> torch.Tensor:
    """`keep_mask` as `like`'s dtype, scaled by 1 / (1 - p) so that the expectation is unchanged."""
    return keep_mask(shape, p, like.device).to(like.dtype).mul_(1 / (1 - p))


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Element-wise dropout of `x` (inverted: kept elements are scaled by 1 / (1 - p)); the
    identity in eval mode or with p = 0."""
    if not training or p == 0:
        return x
    if x.device.type != "cpu":  # compiled there too: inductor's fused masks
        return F.dropout(x, p, True)
    return x * scaled_keep_mask(x.shape, p, x)


class Dropout(nn.Dropout):
    """`nn.Dropout` with `dropout`'s cheap CPU masks (same settings, same state dict)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)
