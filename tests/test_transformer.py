"""The Transformer kinds: incremental decoding equals teacher forcing, and the layer changes of
paper 004 (residual removal, position query, variational dropout) do what they say.

Tiny random models, no training.
"""
from __future__ import annotations

import pytest
import torch
from conftest import tiny_config

from interlingua.config import ModelConfig, parse_config
from interlingua.errors import ConfigError
from interlingua.modules import transformer
from interlingua.modules.model import TranslationNetwork
from interlingua.modules.search import beam_search, beam_search_nbest, greedy_search
from interlingua.modules.transformer import TransformerEncoder, VariationalDropout

VOCAB = 19


def model(encoder: dict | None = None, decoder: dict | None = None, bridge: str = "attention",
          dropout: float = 0.3, seed: int = 0) -> TranslationNetwork:
    torch.manual_seed(seed)
    cfg = ModelConfig.model_validate({
        "embed_dim": 12,
        "encoder": (encoder if "type" in (encoder or {}) else
                    {"type": "transformer", "hidden": 16, "heads": 4, "layers": 3, **(encoder or {})}),
        "bridge": {"type": bridge, "heads": 3, "hidden": 8},
        "decoder": {"type": "transformer", "hidden": 16, "heads": 4, "layers": 2, **(decoder or {})},
        "dropout": dropout})
    return TranslationNetwork(cfg, {"en": VOCAB, "de": VOCAB}, ["en"], ["de"]).eval()


def padded_batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([7, 4, 1, 6])
    src = torch.randint(4, VOCAB, (4, 7), generator=gen)
    src[torch.arange(7)[None, :] >= lengths[:, None]] = 0
    return src, lengths


@pytest.mark.parametrize("settings", [
    pytest.param({}, id="pre-sinusoidal-attention"),
    pytest.param({"bridge": "none"}, id="pre-sinusoidal-none"),
    pytest.param({"norm": "post", "positions": "learned"}, id="post-learned-attention"),
    pytest.param({"bilstm": True}, id="bilstm-encoder"),
    pytest.param({"residual_drop_layer": 2, "position_query": True, "variational_dropout": True}, id="paper004"),
])
def test_cached_steps_equal_teacher_forcing(settings):
    settings = dict(settings)
    bridge = settings.pop("bridge", "attention")
    kinds = {k: settings.pop(k) for k in ("norm", "positions", "variational_dropout") if k in settings}
    encoder = ({"type": "bilstm", "hidden": 16, "layers": 1} if settings.pop("bilstm", False)
               else {**kinds, **settings})
    net = model(encoder, kinds, bridge)
    src, lengths = padded_batch()
    tgt = torch.randint(4, VOCAB, (4, 8), generator=torch.Generator().manual_seed(2))
    tgt[1, 5:] = 0  # padded targets: real positions never see the padding after them
    with torch.no_grad():
        decoder, state = net.start_decoding(net.run_encoder(src, lengths, "en"), "de")
        assert_steps_equal_teacher_forcing(decoder, state, tgt)


def assert_steps_equal_teacher_forcing(decoder, state, tgt: torch.Tensor):
    """Step-by-step log-probabilities over `tgt` equal those of one teacher-forced pass; the last state."""
    states, _ = decoder(tgt, state)
    full = torch.log_softmax(decoder.generator(states).float(), dim=-1)
    steps = []
    for t in range(tgt.size(1)):
        logp, state = decoder.step(tgt[:, t], state)
        steps.append(logp)
    assert torch.allclose(torch.stack(steps, 1), full, atol=1e-5, rtol=0)
    return state
    assert state.caches[0].keys.size(2) == tgt.size(1)  # the cache grew one position per step


def test_search_reorders_the_cache():
    """Greedy equals beam 1; batched beam search equals each sentence searched alone."""
    net = model(seed=3)
    src, lengths = padded_batch(4)
    with torch.no_grad():
        decoder, state = net.start_decoding(net.run_encoder(src, lengths, "en"), "de")
        assert_search_is_per_sentence(decoder, state, src.size(0))


def assert_search_is_per_sentence(decoder, state, sentences: int, steps: int = 12) -> None:
    """Greedy equals beam 1, and batched greedy and beam search equal each sentence searched alone."""
    greedy = greedy_search(decoder, state, steps)
    assert beam_search(decoder, state, steps, beam_size=1) == greedy
    batched = beam_search_nbest(decoder, state, steps, beam_size=3)
    for i in range(sentences):
        one = state.select(torch.tensor([i]))
        assert greedy_search(decoder, one, steps) == [greedy[i]]
        alone = beam_search_nbest(decoder, one, steps, beam_size=3)[0]
        assert [h for _, h in alone] == [h for _, h in batched[i]]
        assert [s for s, _ in alone] == pytest.approx([s for s, _ in batched[i]], abs=1e-5)


def test_encoder_is_exact_under_padding():
    net = model()
    encoder = net.encoders["en"]
    src, lengths = padded_batch()
    with torch.no_grad():
        states, mask = encoder(src, lengths)
        for i, n in enumerate(lengths.tolist()):
            alone, _ = encoder(src[i:i + 1, :n], lengths[i:i + 1])
            assert torch.allclose(states[i, :n], alone[0], atol=1e-5)
            assert (states[i, n:] == 0).all() and mask[i].sum() == n


def _uniform(q, k, v, mask=None, causal=False, dropout=0.0):
    """Attention with equal weights on every allowed key (mask: True where allowed)."""
    weights = torch.ones(q.size(0), q.size(1), q.size(2), k.size(2))
    if mask is not None:
        weights = weights * mask
    return (weights / weights.sum(-1, keepdim=True)) @ v


def test_residual_drop_layer_forgets_the_token_at_its_position(monkeypatch):
    """With uniform attention, the layer without its self-attention residual gives every position
    the same output (nothing of the token at that position is left); the other layers do not."""
    monkeypatch.setattr(transformer, "attention", _uniform)
    encoder = model({"residual_drop_layer": 2}).encoders["en"]
    assert [layer.residual for layer in encoder.layers] == [True, False, True]
    x = torch.randn(2, 5, 16)
    keys = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    with torch.no_grad():
        dropped = encoder.layers[1](x, keys)
        kept = encoder.layers[0](x, keys)
        swapped = encoder.layers[1](x[:, [1, 0, 2, 3, 4]], keys)
    assert torch.allclose(dropped, dropped[:, :1].expand_as(dropped), atol=1e-6)
    assert torch.allclose(swapped, dropped, atol=1e-6)
    assert not torch.allclose(kept, kept[:, :1].expand_as(kept), atol=1e-3)


def test_position_query_ignores_token_content(monkeypatch):
    """In the residual-drop layer the queries are the same whatever the tokens; elsewhere they are not."""
    seen: list[torch.Tensor] = []

    def recording(q, k, v, mask=None, causal=False, dropout=0.0):
        seen.append(q.clone())
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)

    monkeypatch.setattr(transformer, "attention", recording)
    encoder = model({"residual_drop_layer": 2, "position_query": True, "query_wavelength": 100.0}).encoders["en"]
    lengths = torch.tensor([6, 6])
    with torch.no_grad():
        encoder(torch.randint(4, VOCAB, (2, 6), generator=torch.Generator().manual_seed(0)), lengths)
        encoder(torch.randint(4, VOCAB, (2, 6), generator=torch.Generator().manual_seed(1)), lengths)
    first, second = seen[:3], seen[3:]
    assert torch.equal(first[1], second[1])
    assert torch.equal(first[1][0], first[1][1])  # the same for every sentence
    assert not torch.allclose(first[0], second[0]) and not torch.allclose(first[2], second[2])
    q = encoder.layers[1].attn.queries(transformer.sinusoids(torch.arange(6), 16, 100.0).unsqueeze(0))
    assert torch.allclose(first[1][:1], q)


def test_variational_dropout_masks_are_constant_over_time():
    drop = VariationalDropout(0.5).train()
    out = drop(torch.ones(3, 9, 40))
    assert torch.equal(out, out[:, :1].expand_as(out)) and (out == 0).any() and (out == 2).any()
    assert torch.equal(drop.eval()(torch.ones(2, 3, 4)), torch.ones(2, 3, 4))

    net = model({"variational_dropout": True}, {"variational_dropout": True}, dropout=0.5).train()
    assert not any(isinstance(m, torch.nn.Dropout) for m in net.modules())
    ratios: list[torch.Tensor] = []
    hooks = [m.register_forward_hook(lambda _m, inp, out: ratios.append(out / inp[0]))
             for m in net.modules() if isinstance(m, VariationalDropout)]
    src = torch.randint(4, VOCAB, (3, 6))
    net.loss(src, torch.tensor([6, 6, 6]), torch.randint(4, VOCAB, (3, 5)), torch.randint(4, VOCAB, (3, 5)), "en", "de")
    for h in hooks:
        h.remove()
    # encoder: embeddings + 3 layers x (2 sub-layers + ff inside); decoder: embeddings + 2 x (3 + 1)
    assert len(ratios) == 1 + 3 * 3 + 1 + 2 * 4
    for r in ratios:  # out / in, undefined where the input is 0 (after the ReLU)
        defined = ~r.isnan()
        high = r.masked_fill(~defined, float("-inf")).amax(1)
        low = r.masked_fill(~defined, float("inf")).amin(1)
        seen = defined.any(1)
        assert seen.any() and torch.allclose(high[seen], low[seen], atol=1e-5), "mask varies over time"


@pytest.mark.parametrize("encoder, message", [
    ({"position_query": True}, "position_query needs residual_drop_layer"),
    ({"residual_drop_layer": 4}, "beyond the last layer"),
    ({"hidden": 18}, "multiple of heads"),
])
def test_invalid_settings_name_the_key(tmp_path, encoder, message):
    cfg = tiny_config(tmp_path / "corpus.yaml", tmp_path,
                      model={"encoder": {"type": "transformer", "layers": 3, "heads": 4, **encoder}})
    with pytest.raises(ConfigError, match=message) as err:
        parse_config(cfg)
    assert "model.encoder" in str(err.value)


def test_width_from_embed_dim_must_divide_into_heads():
    cfg = ModelConfig.model_validate({"embed_dim": 10, "encoder": {"type": "transformer", "heads": 4}})
    with pytest.raises(ConfigError, match="multiple of heads"):
        TransformerEncoder.from_config(cfg.encoder, vocab_size=VOCAB, embed_dim=10, dropout=0.0)


def test_search_stops_at_a_learned_position_table():
    """A decoder with learned positions decodes at most its table's size, whatever max_len asks."""
    from interlingua.modules.search import translate_ids

    class Pieces:
        def decode(self, ids):
            return " ".join(map(str, ids))

    m = model(decoder={"positions": "learned", "max_positions": 8}, seed=3)
    seqs = [src[:n].numpy() for src, n in zip(*padded_batch())]
    for beam in (1, 3):
        out = translate_ids(m, {"en": Pieces(), "de": Pieces()}, seqs, "en", "de", batch_size=4, beam=beam, max_len=30)
        assert all(len(o.split()) <= 8 for o in out) and any(out)


def test_attention_and_word_dropout_act_in_training_only():
    plain = model(dropout=0.0)
    dropping = model({"attention_dropout": 0.5, "word_dropout": 0.5}, {"attention_dropout": 0.5, "word_dropout": 0.5},
                     dropout=0.0)
    dropping.load_state_dict(plain.state_dict())  # the options add no weights
    src, lengths = padded_batch()
    encoder, same = plain.encoders["en"], dropping.encoders["en"]
    with torch.no_grad():
        assert torch.equal(encoder(src, lengths)[0], same(src, lengths)[0])  # eval mode: no dropout at all
        same.train()
        torch.manual_seed(3)
        first = same(src, lengths)[0]
        assert not torch.equal(first, encoder(src, lengths)[0])
        assert not torch.equal(first, same(src, lengths)[0])  # a new draw each call


def test_word_dropout_drops_whole_tokens_and_keeps_their_positions():
    cfg = transformer.TransformerEncoderConfig(hidden=16, heads=4, word_dropout=0.5)
    embedding = transformer._Embedding(VOCAB, 16, 16, cfg, dropout=0.0).train()
    ids = torch.randint(4, VOCAB, (8, 30), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    tokens = embedding(ids) - transformer.sinusoids(torch.arange(30), 16)  # what the tokens added
    dropped = tokens.abs().amax(-1) < 1e-6
    assert 0.3 < dropped.float().mean() < 0.7  # about half of the positions, each whole
    kept = embedding.embed(ids)[~dropped] * embedding.scale / 0.5
    assert torch.allclose(tokens[~dropped], kept, atol=1e-5)  # the kept ones scaled by 1 / (1 - p)
    embedding.eval()
    assert torch.allclose(embedding(ids) - transformer.sinusoids(torch.arange(30), 16),
                          embedding.embed(ids) * embedding.scale, atol=1e-6)


def test_a_tiny_run_trains_with_the_authors_dropouts(multi30k_corpus, tmp_path):
    """The dropouts reach training: the same seed and batches without them give other losses; with them the dev
    loss falls and the checkpoint keeps them."""
    import json

    import interlingua
    from interlingua.training.trainer import train

    def run(name: str, **dropouts):
        options = {"type": "transformer", "hidden": 32, "heads": 4, "layers": 1, **dropouts}
        cfg = parse_config(tiny_config(multi30k_corpus, tmp_path / name, preprocess={"max_valid_sentences": 10},
                                       model={"embed_dim": 32, "encoder": options, "bridge": {"type": "none"},
                                              "decoder": options},
                                       train={"max_steps": 12, "valid_every": 6, "log_every": 4,
                                              "adam_betas": [0.9, 0.98]}))
        result = train(cfg)
        losses = [json.loads(line)["loss"] for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()
                  if json.loads(line)["type"] == "train"]
        return result, losses

    result, losses = run("dropouts", attention_dropout=0.2, word_dropout=0.1)
    assert result.steps == 12 and [h.step for h in result.history] == [6, 12]
    assert result.history[-1].mean_loss < result.history[0].mean_loss  # it learns
    _, plain = run("plain")
    assert len(losses) == len(plain) == 3 and all(a != b for a, b in zip(losses, plain))  # the dropouts act
    saved = interlingua.load(result.best_checkpoint, "cpu").config
    assert saved.model.encoder.attention_dropout == saved.model.decoder.attention_dropout == 0.2
    assert saved.model.encoder.word_dropout == saved.model.decoder.word_dropout == 0.1
    assert saved.train.adam_betas == (0.9, 0.98)


@pytest.mark.parametrize("causal", [False, True])
def test_bf16_attention_trains_in_fp32_and_decodes_in_bf16(causal):
    """The fused CPU kernel's bf16 backward pass is several times slower than its fp32 one: with gradients on,
    bf16 attention is the fp32 kernel's (its output and gradients rounded to bf16); without them (decoding),
    the bf16 kernel's own."""
    g = torch.Generator().manual_seed(0)
    q, k, v = [torch.randn(2, 4, 6, 8, generator=g).bfloat16().requires_grad_() for _ in range(3)]
    mask = None if causal else torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, None, :]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = transformer.attention(q, k, v, mask=mask, causal=causal)
    fp32 = [t.detach().float().requires_grad_() for t in (q, k, v)]
    want = torch.nn.functional.scaled_dot_product_attention(*fp32, attn_mask=mask, is_causal=causal)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want.bfloat16())
    got.float().sum().backward()
    want.sum().backward()
    for ours, theirs in zip((q, k, v), fp32):
        assert ours.grad is not None and torch.equal(ours.grad, theirs.grad.bfloat16())
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        decoded = transformer.attention(q, k, v, mask=mask, causal=causal)
        assert torch.equal(decoded, torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_beam_steps_attention_is_the_attention(dtype):
    """A beam step's cross-attention (a sentence's hypotheses as queries over its one memory) is written out on the
    CPU in fp32, where the fused kernel is slow at a handful of queries: the same output within rounding, padding
    ignored; in other precisions it is the fused kernel's own."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 4, 5, 8, generator=g).to(dtype)
    k, v = [torch.randn(3, 4, 7, 8, generator=g).to(dtype) for _ in range(2)]
    mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3, [True] + [False] * 6])[:, None, None, :]
    with torch.inference_mode():
        got, want = transformer.beam_step_attention(q, k, v, mask), transformer.attention(q, k, v, mask)
        if dtype == torch.float32:
            assert torch.allclose(got, want, atol=1e-6, rtol=0) and not torch.equal(got, want)
            v[1, :, 4:] = v[2, :, 1:] = 1e6  # what padding holds never reaches the output
            assert torch.allclose(transformer.beam_step_attention(q, k, v, mask), want, atol=1e-6, rtol=0)
        else:
            assert torch.equal(got, want)
