"""The CPU dropout masks (interlingua.modules.dropout) and the attention path that uses them."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from interlingua.modules import dropout as dropout_module
from interlingua.modules import transformer
from interlingua.modules.dropout import Dropout, dropout, keep_mask

CPU = torch.device("cpu")


@pytest.mark.parametrize("p", [0.1, 0.2, 0.5, 0.9])
def test_masks_drop_p_of_the_elements_independently(p):
    torch.manual_seed(0)
    keep = keep_mask((1000, 1000), p, CPU)
    assert keep.dtype == torch.bool and keep.shape == (1000, 1000)
    assert abs(1 - keep.float().mean().item() - p) < 0.003
    # four uniforms come from one 64-bit draw: neighbours, and elements a draw apart, stay uncorrelated
    flat = keep.flatten().float()
    for lag in (1, 2, 3, 4):
        corr = torch.corrcoef(torch.stack([flat[:-lag], flat[lag:]]))[0, 1].item()
        assert abs(corr) < 0.005, (lag, corr)


def test_odd_sizes_and_p_zero():
    torch.manual_seed(1)
    assert keep_mask((3, 5, 7), 0.3, CPU).shape == (3, 5, 7)  # 105 elements: not a multiple of four
    assert keep_mask((1,), 0.0, CPU).all() and keep_mask((4097,), 0.0, CPU).all()


def test_masks_come_from_the_default_generator_so_seeds_and_saved_states_repeat_them():
    torch.manual_seed(5)
    first = keep_mask((64, 64), 0.2, CPU)
    torch.manual_seed(5)
    assert torch.equal(first, keep_mask((64, 64), 0.2, CPU))
    state = torch.get_rng_state()
    again = keep_mask((64, 64), 0.2, CPU)
    assert not torch.equal(again, first)  # a new draw each call
    torch.set_rng_state(state)
    assert torch.equal(again, keep_mask((64, 64), 0.2, CPU))


def test_dropout_scales_what_it_keeps_and_backpropagates_through_the_mask():
    x = torch.randn(200, 300, requires_grad=True)
    torch.manual_seed(2)
    out = dropout(x, 0.25, training=True)
    kept = out != 0
    assert abs(1 - kept.float().mean().item() - 0.25) < 0.01
    assert torch.allclose(out[kept], x[kept] / 0.75)
    out.sum().backward()
    assert torch.allclose(x.grad, kept.float() / 0.75)


def test_dropout_is_the_identity_in_eval_mode_and_at_p_zero():
    x = torch.randn(5, 7)
    assert dropout(x, 0.5, training=False) is x and dropout(x, 0.0, training=True) is x
    module = Dropout(0.5)
    assert isinstance(module, torch.nn.Dropout) and module.p == 0.5 and module.state_dict() == {}
    assert torch.equal(module.eval()(x), x)
    torch.manual_seed(0)
    assert (module.train()(x) == 0).any()


def test_dropout_keeps_the_input_dtype():
    x = torch.randn(64, 32, dtype=torch.bfloat16)
    torch.manual_seed(0)
    out = dropout(x, 0.5, training=True)
    assert out.dtype == torch.bfloat16 and (out == 0).any()


def _qkv(seed: int, n: int = 6, m: int = 6, dtype: torch.dtype = torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 4, length, 8, generator=g).to(dtype) for length in (n, m, m)]


@pytest.mark.parametrize("causal", [False, True])
def test_spelled_out_attention_equals_the_fused_kernel_where_nothing_is_dropped(monkeypatch, causal):
    """With every weight kept, the CPU dropout path is the fused kernel without dropout: same
    scaling, padding mask and causal mask."""
    monkeypatch.setattr(transformer, "scaled_keep_mask", lambda shape, p, like: torch.ones(shape, dtype=like.dtype))
    q, k, v = _qkv(0)
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2]).view(2, 1, 1, 6)
    got = transformer.attention(q, k, v, mask, causal, dropout=0.3)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    assert torch.allclose(got, want, atol=1e-5)


def test_attention_dropout_drops_weights_and_rescales_the_rest(monkeypatch):
    masks: list[torch.Tensor] = []

    def recording(shape, p, like):
        mask = dropout_module.scaled_keep_mask(shape, p, like)
        masks.append(mask)
        return mask

    monkeypatch.setattr(transformer, "scaled_keep_mask", recording)
    q, k, v = _qkv(1)
    torch.manual_seed(4)
    got = transformer.attention(q, k, v, dropout=0.5)
    weights = torch.softmax(q @ k.transpose(-2, -1) / 8 ** 0.5, dim=-1)
    assert torch.allclose(got, (weights * masks[0]) @ v, atol=1e-5)
    assert set(masks[0].unique().tolist()) == {0.0, 2.0}


def test_attention_dropout_under_bf16_autocast_runs_in_fp32_and_returns_the_input_dtype(monkeypatch):
    monkeypatch.setattr(transformer, "scaled_keep_mask", lambda shape, p, like: torch.ones(shape, dtype=like.dtype))
    q, k, v = _qkv(2, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = transformer.attention(q, k, v, dropout=0.2)
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
    assert got.dtype == torch.bfloat16 and torch.allclose(got.float(), want, atol=2e-2)
