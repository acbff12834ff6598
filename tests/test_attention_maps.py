"""What a sentence's encoder and bridge attend to (`Model.attention_maps`, `TransformerEncoder.self_attention`)
and which directions are supervised, zero-shot or can go through a pivot (`Languages.route`, `Languages.pivot`):
the library side of the page that `interlingua serve` shows.

Tiny random models, no training: attention weights are distributions whatever the weights are.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_config
from test_decoding import _sentences, random_checkpoint
from test_transformer import model as transformer_model
from test_transformer import padded_batch

import interlingua
from interlingua.config import parse_config
from interlingua.data.vocab import Vocab, language_tag
from interlingua.errors import InterlinguaError
from interlingua.inference.api import Languages
from interlingua.model_files.checkpoint import build_payload, read_checkpoint, save_atomic
from interlingua.modules import transformer
from interlingua.modules.model import TranslationNetwork

TRANSFORMER = {"embed_dim": 32, "encoder": {"type": "transformer", "layers": 2, "heads": 2},
               "decoder": {"type": "transformer", "layers": 1, "heads": 2}}
SENTENCES = ["a dog runs in the park .", "", "the woman eats a small red ball near the street ."]


def bridge_checkpoint(path: Path) -> Path:
    """BiLSTM + attention bridge on en, de, fr, trained (as the checkpoint says) on en<->de and en<->fr only."""
    random_checkpoint(path, langs=("en", "de", "fr"))
    payload = read_checkpoint(path)
    payload["directions"] = [["de", "en"], ["en", "de"], ["en", "fr"], ["fr", "en"]]
    save_atomic(payload, path)
    return path


def transformer_checkpoint(path: Path, bridge: str = "none") -> Path:
    """A 2-layer Transformer encoder (2 heads) with no bridge, or with an attention bridge."""
    return random_checkpoint(path, langs=("en", "de"), bridge={"type": bridge}, **TRANSFORMER)


def shared_checkpoint(path: Path) -> Path:
    """One shared Transformer + bridge for en and de with the <2xx> tag before the source."""
    langs = ("en", "de")
    cfg = parse_config(tiny_config(path.parent / "corpus.yaml", path.parent,
                                   directions={"mode": "explicit", "pairs": [["en", "de"], ["de", "en"]]},
                                   model={**TRANSFORMER, "shared": True}))
    vocab = Vocab.train(_sentences("en") + _sentences("de"), vocab_size=150,
                        user_symbols=[language_tag(lang) for lang in langs], threads=1)
    torch.manual_seed(0)
    net = TranslationNetwork(cfg.model, {lang: len(vocab) for lang in langs}, list(langs), list(langs))
    save_atomic(build_payload(cfg, net, {lang: vocab for lang in langs}, [("en", "de"), ("de", "en")]), path)
    return path


@pytest.fixture(scope="module")
def bridge_path(tmp_path_factory):
    return bridge_checkpoint(tmp_path_factory.mktemp("bridge") / "model.pt")


@pytest.fixture(scope="module")
def bridge_model(bridge_path):
    return interlingua.load(bridge_path, "cpu")


@pytest.fixture(scope="module")
def transformer_none(tmp_path_factory):
    return interlingua.load(transformer_checkpoint(tmp_path_factory.mktemp("tnone") / "model.pt"), "cpu")


# --- Model.attention_maps -------------------------------------------------------------------------


def test_bridge_maps_are_the_bridge_attention_over_the_subwords(bridge_model):
    maps = bridge_model.attention_maps(SENTENCES, "en", batch_size=2)
    assert bridge_model.self_attention_layers == 0
    for text, m in zip(SENTENCES, maps):
        assert m.self_attention is None
        if not text:
            assert m.tokens == [] and m.bridge.shape == (bridge_model.heads, 0)
            continue
        alone = bridge_model.attention_maps([text], "en")[0]
        assert m.tokens == alone.tokens == [bridge_model.vocabs["en"].id_to_piece(int(i))
                                            for i in bridge_model.token_ids([text], "en")[0]]
        assert m.bridge.shape == (bridge_model.heads, len(m.tokens))
        np.testing.assert_allclose(m.bridge.sum(1), 1.0, atol=1e-5)
        np.testing.assert_allclose(m.bridge, alone.bridge, atol=1e-6)  # batching changes nothing


def test_transformer_maps_are_every_layers_self_attention(transformer_none):
    model = transformer_none
    maps = model.attention_maps(SENTENCES, "de", batch_size=2)
    assert model.self_attention_layers == 2
    for text, m in zip(SENTENCES, maps):
        n = len(m.tokens)
        assert m.bridge is None and m.self_attention.shape == (2, 2, n, n)
        assert n == (len(model.token_ids([text], "de")[0]) if text else 0)
        if n:
            np.testing.assert_allclose(m.self_attention.sum(-1), 1.0, atol=1e-5)
            alone = model.attention_maps([text], "de")[0].self_attention
            np.testing.assert_allclose(m.self_attention, alone, atol=1e-5)  # padding in the batch changes nothing


def test_transformer_with_a_bridge_shows_both(tmp_path):
    model = interlingua.load(transformer_checkpoint(tmp_path / "model.pt", bridge="attention"), "cpu")
    m = model.attention_maps(["a dog runs ."], "en")[0]
    n = len(m.tokens)
    assert m.bridge.shape == (model.heads, n) and m.self_attention.shape == (2, 2, n, n)
    heads = model.attention_maps(["a dog runs ."], "en", self_attention=False)[0]  # the bridge's alone
    assert heads.tokens == m.tokens and heads.self_attention is None
    np.testing.assert_allclose(heads.bridge, m.bridge, atol=1e-6)


def test_a_shared_models_language_tag_is_a_column_of_its_own(tmp_path):
    """The bridge and the encoder attend over the <2xx> tag too: the tokens say so, with the encoder's maps or
    without."""
    model = interlingua.load(shared_checkpoint(tmp_path / "model.pt"), "cpu")
    m = model.attention_maps(["a dog runs ."], "en")[0]
    words = [model.vocabs["en"].id_to_piece(int(i)) for i in model.token_ids(["a dog runs ."], "en")[0]]
    assert m.tokens == ["<2en>", *words]
    assert m.bridge.shape == (model.heads, len(m.tokens)) and m.self_attention.shape[-1] == len(m.tokens)
    heads = model.attention_maps(["a dog runs ."], "en", self_attention=False)[0]
    assert heads.tokens == m.tokens and heads.bridge.shape == m.bridge.shape


def test_a_model_without_attention_says_so(tmp_path):
    model = interlingua.load(random_checkpoint(tmp_path / "model.pt", bridge={"type": "none"}), "cpu")
    with pytest.raises(InterlinguaError, match="shows no attention"):
        model.attention_maps(["a dog runs ."], "en")


# --- TransformerEncoder.self_attention --------------------------------------------------------------


@pytest.mark.parametrize("encoder", [
    pytest.param({}, id="pre-norm"),
    pytest.param({"norm": "post", "positions": "learned"}, id="post-norm"),
    pytest.param({"residual_drop_layer": 2, "position_query": True}, id="position-query"),
])
def test_self_attention_weights_are_the_ones_the_forward_pass_applies(monkeypatch, encoder):
    """Each layer's weights, applied to its values, give what the fused attention of `forward` computed."""
    net = transformer_model(encoder)
    enc = net.encoders["en"]
    src, lengths = padded_batch()
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    fused = transformer.attention

    def recording(q, k, v, mask=None, causal=False, dropout=0.0):
        out = fused(q, k, v, mask, causal)
        seen.append((out, v))
        return out

    monkeypatch.setattr(transformer, "attention", recording)
    with torch.no_grad():
        weights, mask = enc.self_attention(src, lengths)
        seen.clear()
        enc(src, lengths)
    assert len(weights) == len(seen) == enc.self_attention_layers == 3
    for w, (out, v) in zip(weights, seen):
        assert w.shape == (4, 4, 7, 7)
        real = mask[:, None, :, None]  # rows of real tokens
        np.testing.assert_allclose(w.sum(-1)[mask[:, None, :].expand_as(w.sum(-1))].numpy(), 1.0, atol=1e-5)
        assert not w[~mask[:, None, None, :].expand_as(w)].any()  # nothing on padded keys
        np.testing.assert_allclose((w @ v).masked_fill(~real, 0).numpy(), out.masked_fill(~real, 0).numpy(),
                                   atol=1e-5)


def test_the_forward_pass_is_unchanged_by_reading_the_weights():
    net = transformer_model()
    enc = net.encoders["en"]
    src, lengths = padded_batch()
    with torch.no_grad():
        states, _ = enc.layer_states(src, lengths)
        h, _ = enc(src, lengths)
    assert torch.equal(states[-1], h)


# --- Languages.route, Languages.pivot ------------------------------------------------------------------


def test_directions_are_supervised_or_zero_shot_with_a_pivot(bridge_model):
    langs = bridge_model.languages
    assert langs.route("en", "de") == "supervised" and langs.route("de", "fr") == "zero-shot"
    assert langs.pivot("de", "fr") == "en" and langs.pivot("fr", "de") == "en"
    assert langs.pivot("en", "de") is None  # no third language has both legs


def test_the_pivot_is_the_hub_of_the_trained_directions():
    trained = (("a", "b"), ("b", "a"), ("a", "c"), ("c", "a"), ("c", "d"), ("d", "c"), ("a", "d"), ("d", "a"),
               ("b", "c"), ("c", "b"))
    langs = Languages(("a", "b", "c", "d"), ("a", "b", "c", "d"), trained)
    assert langs.pivot("b", "d") in ("a", "c")
    assert langs.pivot("b", "d") == "a"  # a and c both have the legs and 6 directions each: the first by name
    langs = Languages(("a", "b", "c", "d"), ("a", "b", "c", "d"), trained + (("c", "x"),))
    assert langs.pivot("b", "d") == "c"  # now c is in more trained directions
