import numpy as np
import pytest
import torch

from interlingua.modules.bridges import AttentionBridge, NoBridge, orthogonality_penalty
from interlingua.modules.encoders import lengths_to_mask


def test_shapes_and_masking():
    torch.manual_seed(0)
    bridge = AttentionBridge(input_dim=16, hidden=8, heads=5)
    states = torch.randn(3, 7, 16)
    lengths = torch.tensor([7, 4, 1])
    out = bridge(states, lengths_to_mask(lengths, 7))
    assert out.memory.shape == (3, 5, 16)
    assert out.attention.shape == (3, 5, 7)
    assert out.memory_mask.all()
    # softmax over the real tokens only: rows sum to one, padding gets exactly zero
    assert torch.allclose(out.attention.sum(-1), torch.ones(3, 5), atol=1e-6)
    assert (out.attention[1, :, 4:] == 0).all() and (out.attention[2, :, 1:] == 0).all()
    # a one-token sentence: every head sits on it, M's columns are that token's state
    assert torch.allclose(out.memory[2], states[2, 0].expand(5, 16), atol=1e-6)


def test_attention_matches_equation():
    torch.manual_seed(1)
    bridge = AttentionBridge(input_dim=6, hidden=4, heads=3)
    h = torch.randn(1, 5, 6)
    out = bridge(h, torch.ones(1, 5, dtype=torch.bool))
    w1, w2 = bridge.w1.weight.detach().numpy(), bridge.w2.weight.detach().numpy()
    scores = w2 @ np.maximum(w1 @ h[0].numpy().T, 0)            # (k, n) = W2 ReLU(W1 H^T)
    a = np.exp(scores - scores.max(1, keepdims=True))
    a /= a.sum(1, keepdims=True)
    assert np.allclose(out.attention[0].detach().numpy(), a, atol=1e-5)
    assert np.allclose(out.memory[0].detach().numpy(), a @ h[0].numpy(), atol=1e-5)


def test_penalty_equals_frobenius_formula():
    torch.manual_seed(2)
    a = torch.softmax(torch.randn(4, 6, 9), dim=-1)
    got = orthogonality_penalty(a)
    for i in range(4):
        m = a[i].numpy()
        expected = np.linalg.norm(m @ m.T - np.eye(6), "fro") ** 2
        assert abs(float(got[i]) - expected) < 1e-4
    # orthonormal rows (one-hot on distinct tokens) give zero penalty
    onehot = torch.eye(9)[:6].unsqueeze(0)
    assert float(orthogonality_penalty(onehot)[0]) == 0.0


def test_penalty_ignores_padding():
    torch.manual_seed(3)
    bridge = AttentionBridge(8, 8, 4)
    h = torch.randn(1, 5, 8)
    short = bridge(h[:, :3], torch.ones(1, 3, dtype=torch.bool)).penalty
    padded_h = torch.cat([h[:, :3], torch.randn(1, 6, 8) * 100], 1)
    padded = bridge(padded_h, lengths_to_mask(torch.tensor([3]), 9)).penalty
    assert torch.allclose(short, padded, atol=1e-5)


def test_no_bridge_passes_states_through():
    h = torch.randn(2, 4, 8)
    mask = lengths_to_mask(torch.tensor([4, 2]), 4)
    out = NoBridge()(h, mask)
    assert out.memory is h and out.attention is None and torch.equal(out.memory_mask, mask)
    assert (out.penalty == 0).all()


def test_loss_adds_the_penalty_per_sentence_to_the_summed_cross_entropy():
    """(sum CE + lambda * sum_i ||A_i A_i^T - I||^2) / target tokens, as the papers' per-sentence loss."""
    from interlingua.config import ModelConfig
    from interlingua.modules.model import TranslationNetwork
    torch.manual_seed(3)
    cfg = ModelConfig.model_validate({"embed_dim": 8, "encoder": {"hidden": 12}, "bridge": {"heads": 3, "hidden": 6},
                                      "decoder": {"hidden": 8, "layers": 1}, "dropout": 0.0})
    model = TranslationNetwork(cfg, {"en": 30, "de": 30}, ["en"], ["de"]).eval()
    src, lengths = torch.randint(4, 30, (4, 7)), torch.tensor([7, 6, 5, 3])
    tgt = torch.randint(4, 30, (4, 6))
    tgt[2, 4:] = 0  # padding
    plain = model.loss(src, lengths, tgt, tgt, "en", "de", penalty_weight=0.0)
    with_pen = model.loss(src, lengths, tgt, tgt, "en", "de", penalty_weight=2.0)
    pen_sum = model.run_encoder(src, lengths, "en").penalty.sum().detach()
    assert plain.n_tokens == 22
    assert float(plain.loss.detach()) == pytest.approx(plain.nll_sum / 22, rel=1e-5)
    assert float(with_pen.loss.detach()) == pytest.approx((plain.nll_sum + 2.0 * float(pen_sum)) / 22, rel=1e-5)
