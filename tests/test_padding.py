"""Sentence vectors and encoder states must not depend on how a batch is padded."""
import numpy as np
import pytest
import torch

from interlingua.config import ModelConfig
from interlingua.modules.encoders import BiLSTMEncoder, reverse_padded
from interlingua.modules.model import TranslationNetwork


def test_reverse_padded_keeps_padding_in_place():
    x = torch.arange(10.0).view(2, 5, 1)
    out = reverse_padded(x, torch.tensor([5, 3]))
    assert out[0, :, 0].tolist() == [4, 3, 2, 1, 0]
    assert out[1, :, 0].tolist() == [7, 6, 5, 8, 9]


def test_encoder_states_independent_of_padding():
    torch.manual_seed(0)
    enc = BiLSTMEncoder(50, 8, 12, layers=2, dropout=0.0).eval()
    sent = torch.randint(4, 50, (1, 5))
    alone, _ = enc(sent, torch.tensor([5]))
    batch = torch.zeros(3, 11, dtype=torch.long)
    batch[0, :5] = sent[0]
    batch[1] = torch.randint(4, 50, (11,))
    batch[2, :2] = torch.randint(4, 50, (2,))
    padded, mask = enc(batch, torch.tensor([5, 11, 2]))
    assert torch.allclose(alone[0], padded[0, :5], atol=1e-5)
    assert (padded[0, 5:] == 0).all() and mask[0].sum() == 5


def test_pooled_bridge_vector_independent_of_padding():
    torch.manual_seed(1)
    cfg = ModelConfig.model_validate({"embed_dim": 8, "encoder": {"hidden": 12}, "bridge": {"heads": 3, "hidden": 6},
                                      "decoder": {"hidden": 8, "layers": 1}, "dropout": 0.0})
    model = TranslationNetwork(cfg, {"en": 40}, ["en"], ["en"]).eval()
    sent = torch.randint(4, 40, (1, 6))
    a = model.run_encoder(sent, torch.tensor([6]), "en").memory
    batch = torch.cat([torch.cat([sent, torch.zeros(1, 14, dtype=torch.long)], 1), torch.randint(4, 40, (1, 20))])
    b = model.run_encoder(batch, torch.tensor([6, 20]), "en").memory
    assert torch.allclose(a[0], b[0], atol=1e-5)


def test_embedder_vectors_independent_of_batching(trained_model):
    from interlingua.inference.api import load
    emb = load(trained_model)
    sents = ["a dog.", "two young men are playing soccer on a green field near a big old tree in the park .",
             "a woman sings"]
    together = emb.encode(sents, "en", batch_size=3)
    alone = np.stack([emb.encode([s], "en")[0] for s in sents])
    assert np.allclose(together, alone, atol=1e-5)
    heads = emb.encode(sents, "en", pooling="heads", batch_size=2)
    assert heads.shape == (3, 4, 64)
    assert np.allclose(heads.mean(1), together, atol=1e-5)


def test_param_init_is_uniform_and_keeps_padding_rows_zero():
    torch.manual_seed(2)
    cfg = ModelConfig.model_validate({"embed_dim": 8, "encoder": {"hidden": 12}, "bridge": {"heads": 3, "hidden": 6},
                                      "decoder": {"hidden": 8, "layers": 1}, "dropout": 0.0, "param_init": 0.1})
    model = TranslationNetwork(cfg, {"en": 40, "de": 30}, ["en"], ["de"])
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert weights.abs().max() <= 0.1 and weights.abs().max() > 0.09  # spread over the whole range
    assert (model.encoders["en"].embed.weight[0] == 0).all() and (model.decoders["de"].embed.weight[0] == 0).all()
    default = TranslationNetwork(cfg.model_copy(update={"param_init": None}), {"en": 40, "de": 30}, ["en"], ["de"])
    assert default.encoders["en"].embed.weight.abs().max() > 1.0  # PyTorch's N(0, 1) embeddings


@pytest.mark.parametrize("bridge", ["none", "attention"])
def test_pooled_vector_independent_of_padding_through_the_embedder(tmp_path, bridge):
    """`bridge: none` mean-pools the encoder states H over the real tokens only: a sentence
    embedded alone and in a batch with longer ones (so padded) gives the same vector."""
    from test_decoding import random_checkpoint

    from interlingua.inference.api import load
    from interlingua.model_files.load import load_model
    ckpt = random_checkpoint(tmp_path / "random.pt", param_init=0.5,
                             bridge={"type": bridge, "heads": 4, "hidden": 32}, encoder={"hidden": 64, "layers": 2})
    emb = load(ckpt)
    assert emb.bridge_attention == (bridge == "attention")
    short = "a dog ."
    longer = ["the small child sits near the big red ball in the park .", "a woman runs on the street near the park ."]
    alone = emb.encode([short], "en")[0]
    batched = emb.encode(longer + [short], "en", batch_size=8)
    n_short = len(emb.vocabs["en"].tokenize(short))
    assert all(len(emb.vocabs["en"].tokenize(s)) > 2 * n_short for s in longer)  # really padded in the batch
    assert np.abs(alone).max() > 0.01
    assert np.allclose(batched[2], alone, atol=1e-5)
    # and the padding is not simply ignored by being tiny: pooling over the padded length would differ
    if bridge == "none":
        network = load_model(ckpt).network
        mem = network.run_encoder(torch.tensor([emb.vocabs["en"].tokenize(short) + [0] * 10]),
                                  torch.tensor([n_short]), "en").memory[0]
        assert not np.allclose(mem.mean(0).detach().numpy(), alone, atol=1e-3)
