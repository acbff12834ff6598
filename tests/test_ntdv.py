"""NTDV shared layers (paper 003): the self-attentive + GRU bridge, and training it alone on top of a
frozen translation model (`train.trainable: bridge` with `train --init`)."""
from __future__ import annotations

import math

import pytest
import torch
import yaml
from conftest import tiny_config

from interlingua import load
from interlingua.cli import main
from interlingua.config import parse_config
from interlingua.data.vocab import PAD
from interlingua.errors import LanguageError
from interlingua.model_files.checkpoint import Checkpoint, read_checkpoint
from interlingua.modules.ntdv import NTDVBridge
from interlingua.training.build import build_run
from interlingua.training.step import forward_backward, micro_batches, step_parts
from interlingua.training.trainer import Trainer

D_ENC, D_H, R = 12, 10, 3


@pytest.fixture
def bridge() -> NTDVBridge:
    torch.manual_seed(0)
    return NTDVBridge(D_ENC, D_H, R, ["de", "en"]).eval()


def test_sizes_and_the_vector_is_the_sum_of_the_head_outputs(bridge):
    states, mask = torch.randn(2, 7, D_ENC), torch.ones(2, 7, dtype=torch.bool)
    out = bridge(states, mask, "en")
    assert out.memory.shape == (2, R, D_ENC)          # what the frozen decoder attends over
    assert out.heads.shape == (2, R, D_H) and out.attention.shape == (2, R, 7)
    assert bridge.vector_dim == D_H and bridge.output_dim == D_ENC
    assert torch.allclose(bridge.pooled(out), out.heads.sum(1))
    assert not out.penalty.any()  # paper 003 puts no penalty on the heads
    assert bridge.head_vectors(out).shape == (2, R, D_H)


def test_equations_5_to_9_head_by_head(bridge):
    """The batched layer equals the paper's equations written out for one sentence, head by head."""
    h = torch.randn(5, D_ENC)
    out = bridge(h[None], torch.ones(1, 5, dtype=torch.bool), "de")
    proj = bridge.projections["de"]
    h_hat = h @ proj.weight.T + proj.bias                                   # Eq. 5
    wq, wk = bridge.query_key.weight.view(2, R, D_H, D_H), bridge.query_key.bias.view(2, R, D_H)
    heads = []
    for m in range(R):
        q = h_hat @ wq[0, m].T + wk[0, m]
        k = h_hat @ wq[1, m].T + wk[1, m]
        g = torch.softmax((q * k).sum(-1) / math.sqrt(D_H), dim=0)        # Eq. 6: one score per position
        v = h_hat @ bridge.value_weight[m] + bridge.value_bias[m]
        heads.append((g[:, None] * v).sum(0))                               # Eq. 7
    p = torch.stack(heads)
    assert torch.allclose(out.heads[0], p, atol=1e-5)
    k_seq, _ = bridge.gru(p[None])                                           # Eq. 8, heads in order
    assert torch.allclose(out.memory[0], bridge.out(k_seq[0]), atol=1e-5)  # Eq. 9


def test_no_position_attends_to_another(bridge):
    """Each head pools tokens scored one by one: reordering the tokens or adding padding changes nothing."""
    states = torch.randn(1, 6, D_ENC)
    mask = torch.ones(1, 6, dtype=torch.bool)
    out = bridge(states, mask, "en")
    shuffled = bridge(states[:, torch.randperm(6)], mask, "en")
    assert torch.allclose(out.heads, shuffled.heads, atol=1e-5)
    padded = torch.cat([states, torch.randn(1, 4, D_ENC)], dim=1)
    pad_mask = torch.cat([mask, torch.zeros(1, 4, dtype=torch.bool)], dim=1)
    assert torch.allclose(bridge(padded, pad_mask, "en").heads, out.heads, atol=1e-5)
    assert torch.allclose(out.heads, bridge(states, mask, "en").heads)  # deterministic


def test_a_projection_per_language(bridge):
    states, mask = torch.randn(1, 4, D_ENC), torch.ones(1, 4, dtype=torch.bool)
    assert not torch.allclose(bridge(states, mask, "en").heads, bridge(states, mask, "de").heads)
    with pytest.raises(LanguageError, match="no projection for 'fr'"):
        bridge(states, mask, "fr")


def _ntdv_config(corpus, work, **train) -> dict:
    cfg = tiny_config(corpus, work, directions={"mode": "explicit", "pairs": [["en", "de"], ["de", "en"]]},
                      train={"trainable": "bridge", "epochs": 1, "batch_size": 40, "lr": 0.005, "valid_every": 1000,
                             "precision": "fp32", **train})
    cfg["model"]["bridge"] = {"type": "ntdv", "heads": 4, "hidden": 24}
    return cfg


def test_only_the_new_layers_get_gradients(trained_model, multi30k_corpus, tmp_path):
    run = build_run(parse_config(_ntdv_config(multi30k_corpus, tmp_path / "run")), init=trained_model)
    model = run.network
    model.train()
    assert not model.encoders.training and not model.decoders.training and model.bridge.training
    for direction in (("de", "en"), ("en", "de")):  # each source language has its own projection
        model(run.batches[direction].next()).loss.backward()
    for name, param in model.named_parameters():
        if name.startswith("bridge."):
            assert param.requires_grad and param.grad is not None and param.grad.abs().sum() > 0, name
        else:
            assert not param.requires_grad and param.grad is None, name
    assert {id(p) for g in run.optimizer.param_groups for p in g["params"]} == \
        {id(p) for p in model.bridge.parameters()}


def test_frozen_training_from_the_cli(trained_model, multi30k_corpus, tmp_path):
    """`train --init` with `trainable: bridge`: the epochs are run exactly, every translation weight
    stays what it was, the bridge is new and trained, and the checkpoint embeds as NTDV."""
    cfg_path = tmp_path / "ntdv.yaml"
    cfg_path.write_text(yaml.safe_dump(_ntdv_config(multi30k_corpus, tmp_path / "run", epochs=2)))
    assert main(["train", str(cfg_path), "--init", str(trained_model)]) == 0
    base = read_checkpoint(trained_model)["model"]
    last = Checkpoint.read(tmp_path / "run" / "last.pt")
    n_batches = 2 * math.ceil(200 / 40)  # two directions of 200 pairs, batches of 40
    assert last.training.step == 2 * n_batches
    weights = last.weights
    frozen = [k for k in weights if not k.startswith("bridge.")]
    assert frozen and all(torch.equal(weights[k], base[k]) for k in frozen)
    assert "bridge.projections.en.weight" in weights and "bridge.w1.weight" not in weights
    model = load(tmp_path / "run" / "last.pt", device="cpu")
    vecs = model.encode(["a dog runs.", "two men talk."], lang="en")
    assert vecs.shape == (2, 24) and model.dim == 24 and model.heads == 4
    assert model.encode(["a dog runs."], lang="en", pooling="heads").shape == (1, 4, 24)
    assert model.translate(["ein hund läuft."], src="de", tgt="en")  # the frozen decoder reads the new layers


def test_trainable_bridge_needs_a_base_model(multi30k_corpus, tmp_path, capsys):
    cfg_path = tmp_path / "ntdv.yaml"
    cfg_path.write_text(yaml.safe_dump(_ntdv_config(multi30k_corpus, tmp_path / "run")))
    assert main(["train", str(cfg_path)]) == 2
    assert "--init" in capsys.readouterr().err


def test_base_model_must_match_outside_the_bridge(trained_model, multi30k_corpus, tmp_path, capsys):
    cfg = _ntdv_config(multi30k_corpus, tmp_path / "run")
    cfg["model"]["embed_dim"] = 40
    cfg_path = tmp_path / "ntdv.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    assert main(["train", str(cfg_path), "--init", str(trained_model)]) == 2
    assert "model.embed_dim" in capsys.readouterr().err


def test_both_directions_sum_the_two_costs_of_the_same_pairs(trained_model, multi30k_corpus, tmp_path):
    """`train.both_directions`: a step is one batch of pairs in both directions (paper 003's loss), and
    an epoch is one pass over each pair."""
    cfg = _ntdv_config(multi30k_corpus, tmp_path / "run", both_directions=True, epochs=2)
    run = build_run(parse_config(cfg), init=trained_model)
    assert list(run.batches) == [("de", "en")] and run.max_steps == 2 * math.ceil(200 / 40)
    pairs = run.batches[("de", "en")]
    forward, backward = pairs.batch_both_ways(pairs.next_indices(), run.prefix("en", "de"), run.start("de"))
    assert (forward.src_lang, forward.tgt_lang, backward.src_lang, backward.tgt_lang) == ("de", "en", "en", "de")
    for row in range(forward.src.size(0)):
        n = int(forward.src_lengths[row])
        back_tgt = backward.tgt_out[row][backward.tgt_out[row] > 3]  # the ids past the specials
        assert torch.equal(forward.src[row, :n][forward.src[row, :n] > 3], back_tgt)
    run.batches[("de", "en")].load_state_dict({"epoch": 0, "position": 0})
    micro, ntok = micro_batches(run, step_parts(run))
    assert [(m.batch.src_lang, m.batch.tgt_lang, m.scale) for m in micro] == [("de", "en", 1.0), ("en", "de", 1.0)]
    assert all(torch.equal(m.batch.src, b.src) and torch.equal(m.batch.tgt_out, b.tgt_out)
               for m, b in zip(micro, (forward, backward)))
    assert ntok == 2 * (int(forward.src_lengths.sum()) + int((forward.tgt_out != PAD).sum()))
    run.optimizer.zero_grad(set_to_none=True)
    sums = forward_backward(run, micro)
    nll, n_tgt = sums.nll, sums.target_tokens
    one, two = run.network(forward), run.network(backward)
    assert nll == pytest.approx(one.nll_sum + two.nll_sum, rel=1e-5) and n_tgt == one.n_tokens + two.n_tokens
    got = {n: p.grad.clone() for n, p in run.network.named_parameters() if p.grad is not None}
    run.optimizer.zero_grad(set_to_none=True)
    (one.loss + two.loss).backward()
    assert got and all(torch.allclose(got[n], p.grad, atol=1e-6) for n, p in run.network.named_parameters()
                       if p.grad is not None)
    assert Trainer(run).train().steps == run.max_steps
    cfg["directions"] = {"mode": "explicit", "pairs": [["en", "de"]]}
    with pytest.raises(Exception, match="de->en"):
        build_run(parse_config(cfg), init=trained_model)


def test_untrained_like_resets_every_ntdv_weight(bridge):
    before = {k: v.clone() for k, v in bridge.state_dict().items()}
    for module in bridge.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    assert all(not torch.equal(before[k], v) for k, v in bridge.state_dict().items())
