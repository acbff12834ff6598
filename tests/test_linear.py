"""`interlingua.modules.linear`: reduced-precision training products on the CPU run with their rows padded to a
multiple of `ROW_MULTIPLE` (so that oneDNN reuses its kernels), and give what the unpadded product gives."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from interlingua.modules.linear import ROW_MULTIPLE, Linear, linear


def _pair(seed: int = 0) -> tuple[Linear, nn.Linear]:
    torch.manual_seed(seed)
    ours = Linear(24, 40)
    plain = nn.Linear(24, 40)
    plain.load_state_dict(ours.state_dict())
    return ours, plain


def _product_sizes(fn) -> set[int]:
    """Every dimension of the matrices of the products `fn` runs (forward and backward), from torch's profiler."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    sizes = set()
    for event in prof.events():
        if event.name in ("aten::addmm", "aten::mm") and event.input_shapes:
            shapes = [s for s in event.input_shapes if len(s) == 2]
            sizes.update(n for s in shapes for n in s)
    return sizes


@pytest.mark.parametrize("shape", [(3, 7), (5, 1), (130,)])
def test_a_bf16_training_product_is_padded_and_equals_the_plain_one(shape):
    """Under bf16 autocast with gradients on: outputs, input and weight gradients equal nn.Linear's (the padding
    rows are zeros), and no product the passes run has the token count as a dimension: the padded count instead."""
    ours, plain = _pair()
    x = torch.randn(*shape, 24)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()

    def run(layer, inp):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = layer(inp)
        (y.float() * torch.linspace(-1, 1, 40)).sum().backward()
        return y

    outputs = []
    sizes = _product_sizes(lambda: outputs.append(run(ours, xa)))
    yb = run(plain, xb)
    assert outputs[0].shape == yb.shape == (*shape, 40) and outputs[0].dtype == yb.dtype == torch.bfloat16
    torch.testing.assert_close(outputs[0], yb)
    torch.testing.assert_close(xa.grad, xb.grad)
    torch.testing.assert_close(ours.weight.grad, plain.weight.grad)
    torch.testing.assert_close(ours.bias.grad, plain.bias.grad)
    tokens = x.numel() // 24
    padded = -(-tokens // ROW_MULTIPLE) * ROW_MULTIPLE
    assert tokens not in sizes and padded in sizes, sizes


def test_fp32_and_no_grad_products_are_not_padded():
    """fp32 goes to MKL (nothing built per shape), decoding has few shapes: both run as nn.Linear does."""
    ours, plain = _pair(1)
    x = torch.randn(3, 7, 24, requires_grad=True)
    assert _product_sizes(lambda: ours(x).sum().backward()) == {21, 24, 40}
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert _product_sizes(lambda: ours(x)) == {21, 24, 40}
        torch.testing.assert_close(ours(x), plain(x))
    torch.testing.assert_close(linear(x, plain.weight, plain.bias), plain(x))
