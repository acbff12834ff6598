"""Kinds and registries: each model slot is built by its registry from the config's `type`;
search works on any `Decoder`; checkpoints written before slots had kinds load and give the
same translations and vectors (tests/fixtures/legacy_*, written by make_legacy_checkpoints.py)."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from interlingua.config import BRIDGE_KINDS, DECODER_KINDS, ENCODER_KINDS, ModelConfig, load_config
from interlingua.data.vocab import EOS
from interlingua.errors import InterlinguaError
from interlingua.inference.api import Model
from interlingua.model_files.checkpoint import load_checkpoint, read_checkpoint
from interlingua.modules.base import Bridge, Decoder, DecoderStateLike, Encoder
from interlingua.modules.bridges import AttentionBridge, NoBridge
from interlingua.modules.decoders import LSTMDecoder, LSTMDecoderConfig
from interlingua.modules.encoders import BiLSTMEncoder, BiLSTMEncoderConfig
from interlingua.modules.model import TranslationNetwork
from interlingua.modules.ntdv import NTDVBridgeConfig
from interlingua.modules.registry import BRIDGES, DECODERS, ENCODERS, Registry
from interlingua.modules.search import beam_search, greedy_search
from interlingua.modules.transformer import TransformerEncoderConfig

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[1]


def test_registries_hold_the_builtin_kinds():
    """A superset: kinds added by other modules (a user's own, another test's) may sit beside these."""
    assert {"bilstm", "transformer"} <= set(ENCODERS.names()) and ENCODERS.get("bilstm") is BiLSTMEncoder
    assert {"attention", "none", "ntdv"} <= set(BRIDGES.names())
    assert BRIDGES.get("attention") is AttentionBridge and BRIDGES.get("none") is NoBridge
    assert {"lstm", "transformer"} <= set(DECODERS.names()) and DECODERS.get("lstm") is LSTMDecoder
    with pytest.raises(KeyError, match="no decoder kind 'gru' .*registered: .*lstm, .*transformer"):
        DECODERS.get("gru")


def test_each_kind_registers_its_config_class_beside_its_module():
    """The slot's config type is read from the registry: every registered kind validates, with the
    config class its module registered, and a kind's config lives in the kind's own module."""
    for registry in (ENCODERS, BRIDGES, DECODERS):
        assert registry.configs.names() == registry.names()
        for name in registry.names():
            config = registry.configs.get(name)
            assert config is not None and config.model_fields["type"].default == name
            assert config.__module__ == registry.get(name).__module__, (registry.slot, name)
    assert ENCODER_KINDS is ENCODERS.configs and BRIDGE_KINDS is BRIDGES.configs and DECODER_KINDS is DECODERS.configs
    cfg = ModelConfig.model_validate({"encoder": {"type": "transformer", "heads": 2}, "bridge": {"type": "ntdv"}})
    assert isinstance(cfg.encoder, TransformerEncoderConfig) and isinstance(cfg.bridge, NTDVBridgeConfig)
    assert isinstance(ModelConfig().decoder, LSTMDecoderConfig)


def test_register_checks_the_base_class_the_config_and_duplicate_names():
    reg = Registry("encoder", Encoder)
    with pytest.raises(TypeError, match="must subclass Encoder"):
        reg.register("x", config=BiLSTMEncoderConfig)(nn.Linear)
    with pytest.raises(TypeError, match=r"BiLSTMEncoderConfig must declare `type: Literal\['x'\] = 'x'`"):
        reg.register("x", config=BiLSTMEncoderConfig)(BiLSTMEncoder)
    with pytest.raises(TypeError, match="its config must subclass KindConfig"):
        reg.register("bilstm", config=dict)(BiLSTMEncoder)  # type: ignore[arg-type]
    assert reg.names() == []  # nothing of a refused registration stays
    reg.register("bilstm", config=BiLSTMEncoderConfig)(BiLSTMEncoder)
    assert reg.names() == ["bilstm"] and reg.configs.names() == ["bilstm"]
    with pytest.raises(ValueError, match="already registered"):
        reg.register("bilstm", config=BiLSTMEncoderConfig)(type("Other", (BiLSTMEncoder,), {}))
    with pytest.raises(ValueError, match="already has the config class BiLSTMEncoderConfig"):
        reg.configs.add("bilstm", type("OtherConfig", (BiLSTMEncoderConfig,), {}))


def test_only_the_config_module_imported_still_knows_every_built_in_kind():
    """Parsing a config finds the kind modules by itself: no caller has to import them first."""
    code = ("import sys\n"
            "from interlingua.config import parse_config\n"
            "assert not any(m.startswith('interlingua.modules') for m in sys.modules)\n"
            "cfg = parse_config({'corpus': 'c.yaml', 'model': {'encoder': {'type': 'transformer', 'heads': 2},\n"
            "                                                  'bridge': {'type': 'ntdv'}}})\n"
            "print(type(cfg.model.encoder).__module__, type(cfg.model.bridge).__module__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert out.split() == ["interlingua.modules.transformer", "interlingua.modules.ntdv"]


@pytest.mark.parametrize("bridge", ["attention", "none", "ntdv"])
def test_the_model_builds_its_slots_by_type(bridge):
    cfg = ModelConfig.model_validate({"embed_dim": 8, "encoder": {"hidden": 8, "layers": 1},
                                      "bridge": {"type": bridge, "heads": 2, "hidden": 4},
                                      "decoder": {"hidden": 8, "layers": 1}})
    model = TranslationNetwork(cfg, {"en": 10, "de": 11}, ["en"], ["de"])
    assert isinstance(model.encoder_for("en"), Encoder) and isinstance(model.bridge, Bridge)
    assert isinstance(model.decoder_for("de"), Decoder)
    assert model.bridge.kind == bridge and model.decoder_for("de").kind == "lstm"
    assert model.has_bridge == model.bridge.attention_available == (bridge != "none")
    assert model.bridge.heads == (None if bridge == "none" else 2) and model.bridge.output_dim == 8


def test_model_call_is_the_training_loss():
    from interlingua.data.batching import make_batch
    torch.manual_seed(0)
    cfg = ModelConfig.model_validate({"embed_dim": 8, "encoder": {"hidden": 8, "layers": 1},
                                      "bridge": {"heads": 2, "hidden": 4}, "decoder": {"hidden": 8, "layers": 1},
                                      "dropout": 0.0})
    model = TranslationNetwork(cfg, {"en": 10, "de": 10}, ["en"], ["de"])
    b = make_batch([np.array([4, 5, 6]), np.array([7, 8])], [np.array([5, 9]), np.array([4, 4, 6])], "en", "de")
    called = model(b, penalty_weight=0.5, label_smoothing=0.1)
    direct = model.loss(b.src, b.src_lengths, b.tgt_in, b.tgt_out, "en", "de", 0.5, 0.1)
    assert torch.equal(called.loss, direct.loss) and called.n_tokens == direct.n_tokens == 7
    assert called.nll_sum == direct.nll_sum and called.penalty == direct.penalty


@dataclass
class MeanState(DecoderStateLike):
    """A new kind's own state: one vector per row; the search selects rows through it (`select`; the beam
    variants fall back to it)."""
    vector: torch.Tensor

    @property
    def batch_size(self):
        return self.vector.size(0)

    def select(self, index):
        return MeanState(self.vector.index_select(0, index))


class UnigramDecoder(Decoder):
    """A decoder kind that is not an LSTM: the next token depends on the memory and the previous token only."""

    def __init__(self, vocab: int, dim: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.generator = nn.Linear(dim, vocab)

    @classmethod
    def from_config(cls, cfg, **_):
        raise NotImplementedError

    def start_state(self, memory, memory_mask, language=None):
        m = memory_mask.unsqueeze(-1).to(memory.dtype)
        return MeanState((memory * m).sum(1) / m.sum(1))

    def forward(self, tgt_in, state):
        return torch.tanh(self.embed(tgt_in) + state.vector.unsqueeze(1)), None

    def step(self, prev, state):
        out, _ = self(prev.unsqueeze(1), state)
        return torch.log_softmax(self.generator(out[:, 0]), -1), state


@torch.inference_mode()
def test_search_runs_any_decoder_kind():
    torch.manual_seed(0)
    dec = UnigramDecoder(9, 6)
    with torch.no_grad():
        dec.generator.bias[EOS] -= 1.0
    state = dec.start_state(torch.randn(5, 3, 6), torch.tensor([[1, 1, 0]] * 5, dtype=torch.bool))
    greedy = greedy_search(dec, state, 7)
    assert len(greedy) == 5 and all(len(h) <= 7 for h in greedy)
    assert beam_search(dec, state, 7, beam_size=1) == greedy
    assert len(beam_search(dec, state, 7, beam_size=3)) == 5


def test_every_shipped_recipe_parses_to_its_kinds():
    """The attention-bridge papers' recipes name no kind (the defaults); paper 004's study (Multi30k,
    also at convergence, and IWSLT 2017, and its Transformer rows in the interlingua and
    zero-resource studies, zs_*) and paper 003's NTDV recipes name their own: Transformers unless 'lstm'
    is in the name, the ntdv bridge where 'ntdv' ends the name."""
    recipes = sorted((REPO / "recipes").rglob("*.yaml"))
    assert len(recipes) > 10
    for r in recipes:
        m = load_config(r).model
        transformer = ({"zero_shot", "zero_shot_converged", "ntdv", "iwslt17"} & set(r.parts)
                       or ({"interlingua", "zero_resource"} & set(r.parts) and r.stem.startswith("zs_"))) \
                and "lstm" not in r.stem
        assert (m.encoder.type, m.decoder.type) == (
            ("transformer", "transformer") if transformer else ("bilstm", "lstm")), r
        if r.stem.endswith("ntdv"):
            assert m.bridge.type == "ntdv", r
        else:
            assert m.bridge.type in ("attention", "none"), r


@pytest.mark.parametrize("name", ["attention", "nobridge_feed"])
def test_checkpoint_written_before_kinds_translates_and_embeds_the_same(name):
    """The fixture was written by the code before slots had kinds (no `decoder.type` stored)."""
    path = FIXTURES / f"legacy_{name}.pt"
    assert "type" not in read_checkpoint(path)["config"]["model"]["decoder"]
    expected = json.loads((FIXTURES / f"legacy_{name}.json").read_text(encoding="utf-8"))
    loaded = load_checkpoint(path)
    assert loaded.config.model.decoder.type == "lstm"
    tr, emb = Model(loaded), Model(loaded)
    sentences = expected["sentences"]
    for key, want in expected["translations"].items():
        s, t, beam = key.split("-")
        assert tr.translate(sentences[s], s, t, beam=int(beam[4:]), max_len=12) == want, key
    for lang, want in expected["mean"].items():
        np.testing.assert_allclose(emb.encode(sentences[lang], lang), np.array(want), rtol=1e-5, atol=1e-6)
    for lang, want in expected["heads"].items():
        np.testing.assert_allclose(emb.encode(sentences[lang], lang, pooling="heads"), np.array(want),
                                   rtol=1e-5, atol=1e-6)
    for lang, want in expected["attention"].items():
        for got, w in zip((m.bridge for m in emb.attention_maps(sentences[lang], lang, self_attention=False)), want):
            np.testing.assert_allclose(got, np.array(w, dtype=np.float32).reshape(got.shape), rtol=1e-5, atol=1e-6)
    if not loaded.network.has_bridge:
        with pytest.raises(InterlinguaError, match="bridge: none"):
            emb.encode(sentences["en"], "en", pooling="heads")
