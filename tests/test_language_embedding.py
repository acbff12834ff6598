"""The Transformer decoder's target-language embedding (`model.decoder.language_embedding: concat`).

A learned vector per target language is concatenated to every decoder input embedding and projected
back, relu(W [e; l] + b), before the positions. Tiny random models check that it reaches every position,
that `none` leaves the decoder as it was, and that search and cached steps work with it; a tiny shared
model trained for a few seconds on the synthetic multi-way corpus of tests/test_extension.py then loads,
translates (also in int8), round-trips, is extended with a language and fine-tuned, and is refused by
the CTranslate2 export.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from test_extension import NEW, OLD, _batch, config, corpus, sentences  # noqa: F401 - corpus is a fixture
from test_int8 import fake_times
from test_transformer import assert_search_is_per_sentence, assert_steps_equal_teacher_forcing

import interlingua
from interlingua.cli import main
from interlingua.config import ModelConfig, parse_config
from interlingua.errors import ConfigError, LanguageError
from interlingua.model_files.checkpoint import build_payload, save_atomic
from interlingua.model_files.ctranslate2_export import UnsupportedModelError
from interlingua.model_files.load import load_model
from interlingua.modules import int8
from interlingua.modules.model import TranslationNetwork
from interlingua.modules.transformer import TransformerDecoder
from interlingua.training.extension import extend_checkpoint
from interlingua.training.trainer import train

VOCAB = 23
LANGS = ["xa", "xb", "xc"]
DECODER = {"type": "transformer", "hidden": 16, "heads": 4, "layers": 2, "word_dropout": 0.1}


def tiny(language_embedding: str | None = "concat", shared: bool = True, seed: int = 0,
         **decoder) -> TranslationNetwork:
    """A random shared (or per-language) Transformer model over LANGS, in eval mode; embeddings of 12
    projected to the decoder's 16 (the concatenation comes after that projection)."""
    torch.manual_seed(seed)
    dec = {**DECODER, **decoder}
    if language_embedding is not None:
        dec["language_embedding"] = language_embedding
    cfg = ModelConfig.model_validate({
        "embed_dim": 12, "shared": shared, "tag_position": "decoder_start",
        "encoder": {"type": "transformer", "hidden": 16, "heads": 4, "layers": 1},
        "bridge": {"type": "attention", "heads": 3, "hidden": 8}, "decoder": dec, "dropout": 0.2})
    return TranslationNetwork(cfg, {lang: VOCAB for lang in LANGS}, LANGS, LANGS).eval()


def batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Padded sources (4, 7), their lengths, and padded targets (4, 8)."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([7, 4, 1, 6])
    src = torch.randint(4, VOCAB, (4, 7), generator=gen)
    src[torch.arange(7)[None, :] >= lengths[:, None]] = 0
    tgt = torch.randint(4, VOCAB, (4, 8), generator=gen)
    tgt[1, 5:] = 0
    return src, lengths, tgt


def cli(argv: list[str], capsys) -> tuple[int, list[str]]:
    code = main(argv)
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def shared_decoder(net: TranslationNetwork) -> TransformerDecoder:
    dec = net.decoders["shared"]
    assert isinstance(dec, TransformerDecoder)
    return dec


# -- the module ---------------------------------------------------------------------------------------

def test_the_language_vector_reaches_every_position():
    """Changing only the target language's vector changes the embedding the first layer reads at every
    position (not only at the tag), and so the decoder's output everywhere; the loss at any one position
    alone has a gradient for that language's vector (and none for the other languages')."""
    net = tiny()
    dec = shared_decoder(net)
    src, lengths, tgt = batch()
    emb = dec.embedding
    lang = dec.language_embeddings["xb"]
    with torch.no_grad():
        before = emb(tgt, language=lang)
        after = emb(tgt, language=lang + torch.randn(lang.shape))
    assert (before - after).abs().amax(-1).gt(1e-4).all()  # every row, every position

    bridged = net.run_encoder(src, lengths, "xa")
    with torch.no_grad():
        decoder, state = net.start_decoding(bridged, "xb")
        out, _ = decoder(tgt, state)
        dec.language_embeddings["xb"].add_(torch.randn(16))
        changed, _ = decoder(tgt, decoder.start_state(bridged.memory, bridged.memory_mask, language="xb"))
    assert (out - changed).abs().amax(-1).gt(1e-4).all()

    for t in range(tgt.size(1)):
        net.zero_grad()
        decoder, state = net.start_decoding(net.run_encoder(src, lengths, "xa"), "xb")
        states, _ = decoder(tgt[:, :t + 1], state)
        torch.log_softmax(decoder.generator(states[:, t]), -1)[:, 5].sum().backward()
        assert dec.language_embeddings["xb"].grad.abs().sum() > 0, t
        assert dec.language_embeddings["xa"].grad is None or not dec.language_embeddings["xa"].grad.any()


def test_the_training_loss_trains_the_target_language_vector():
    net = tiny().train()
    src, lengths, tgt = batch()
    tgt_in, tgt_out = tgt.clone(), torch.roll(tgt, -1, 1)
    net.loss(src, lengths, tgt_in, tgt_out, "xa", "xc").loss.backward()
    grads = {lang: p.grad for lang, p in shared_decoder(net).language_embeddings.items()}
    assert grads["xc"] is not None and grads["xc"].abs().sum() > 0
    assert all(grads[lang] is None or not grads[lang].any() for lang in ("xa", "xb"))


def test_none_leaves_the_decoder_as_it_was():
    """`none` (the default) adds no parameter: the decoder's state-dict keys are today's, exactly, and
    the same seed builds the same weights as a config without the key; concat adds the projection and
    one vector per target language, keyed by language code."""
    expected = {"embedding.embed.weight", "embedding.proj.weight", "final_norm.weight", "final_norm.bias",
                "generator.weight", "generator.bias"}
    for i in range(2):
        for attn in ("self_attn", "cross_attn"):
            expected |= {f"layers.{i}.{attn}.{p}.{w}" for p in ("q_proj", "kv_proj", "out_proj")
                         for w in ("weight", "bias")}
        expected |= {f"layers.{i}.norms.{n}.{w}" for n in range(3) for w in ("weight", "bias")}
        expected |= {f"layers.{i}.ff.{n}.{w}" for n in (0, 3) for w in ("weight", "bias")}
    default, none, concat = tiny(None), tiny("none"), tiny("concat")
    assert set(shared_decoder(default).state_dict()) == expected
    assert shared_decoder(none).language_embeddings is None and shared_decoder(none).embedding.language_proj is None
    a, b = default.state_dict(), none.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert set(shared_decoder(concat).state_dict()) - expected == {
        "embedding.language_proj.weight", "embedding.language_proj.bias",
        "language_embeddings.xa", "language_embeddings.xb", "language_embeddings.xc"}
    assert shared_decoder(concat).embedding.language_proj.weight.shape == (16, 32)
    # a per-language model: each decoder embeds its own language alone
    per_language = tiny(shared=False)
    assert {lang: d.languages for lang, d in per_language.decoders.items()} == {lang: [lang] for lang in LANGS}


def test_the_option_is_the_transformer_decoders():
    with pytest.raises(ValueError, match="language_embedding"):
        ModelConfig.model_validate({"decoder": {"type": "lstm", "language_embedding": "concat"}})
    with pytest.raises(ValueError, match="language_embedding"):
        ModelConfig.model_validate({"decoder": {"type": "transformer", "language_embedding": "add"}})
    cfg = ModelConfig.model_validate({"embed_dim": 8, "decoder": {"type": "transformer", "heads": 2,
                                                                   "language_embedding": "concat"}})
    with pytest.raises(ConfigError, match="needs the decoder's target languages"):
        TransformerDecoder.from_config(cfg.decoder, vocab_size=9, embed_dim=8, memory_dim=8, dropout=0.0)


@pytest.mark.parametrize("decoder", [
    pytest.param({}, id="pre-sinusoidal"),
    pytest.param({"norm": "post", "positions": "learned", "variational_dropout": True}, id="post-learned"),
    pytest.param({"hidden": None, "heads": 4}, id="no-projection"),
])
def test_cached_steps_equal_teacher_forcing(decoder):
    net = tiny(**decoder)
    src, lengths, tgt = batch()
    for lang in LANGS:
        with torch.no_grad():
            decoder_, state = net.start_decoding(net.run_encoder(src, lengths, "xa"), lang)
            state = assert_steps_equal_teacher_forcing(decoder_, state, tgt)
        assert state.language is shared_decoder(net).language_embeddings[lang]


@torch.no_grad()
def test_search_uses_each_target_languages_own_vector():
    """Greedy equals beam 1, batched beams equal each sentence alone (the vector survives reordering), and
    the target language alone (same memory, same start token) changes the distribution: each uses its own."""
    net = tiny(seed=3)
    with torch.no_grad():  # large enough weights that outputs depend on the input
        for p in net.parameters():
            if p.dim() > 1:
                p.mul_(2.0)
    src, lengths, _ = batch(4)
    bridged = net.run_encoder(src, lengths, "xa")
    first = {}
    for lang in LANGS:
        decoder, state = net.start_decoding(bridged, lang)
        first[lang], _ = decoder.step(torch.full((4,), 5), state)
        assert_search_is_per_sentence(decoder, state, src.size(0))
    assert not torch.allclose(first["xa"], first["xb"]) and not torch.allclose(first["xb"], first["xc"])


def test_a_language_without_an_embedding_is_a_clear_error():
    net = tiny()
    src, lengths, _ = batch()
    bridged = net.run_encoder(src, lengths, "xa")
    with pytest.raises(LanguageError, match="no decoder for 'zz'"):
        net.start_decoding(bridged, "zz")
    dec = shared_decoder(net)
    with pytest.raises(LanguageError, match=r"no language embedding for 'zz' \(languages: xa, xb, xc\)"):
        dec.start_state(bridged.memory, bridged.memory_mask, language="zz")
    with pytest.raises(ValueError, match="start_state needs it"):
        dec.start_state(bridged.memory, bridged.memory_mask)
    # without the option the language is not needed
    plain = shared_decoder(tiny("none"))
    assert plain.start_state(bridged.memory, bridged.memory_mask).language is None


# -- a trained model ----------------------------------------------------------------------------------

MODEL = {"embed_dim": 32, "shared": True, "tag_position": "decoder_start", "bridge": {"type": "none"},
         "encoder": {"type": "transformer", "layers": 1, "heads": 2, "ff_dim": 64},
         "decoder": {"type": "transformer", "layers": 1, "heads": 2, "ff_dim": 64, "tie_embeddings": True,
                     "word_dropout": 0.1, "language_embedding": "concat"},
         "dropout": 0.0}


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory) -> tuple[Path, Path]:  # noqa: F811 - the imported fixture
    """(a concat model trained 80 steps on {xa,xc}<->xb, that model extended with xn)."""
    work = tmp_path_factory.mktemp("concat")
    old = train(parse_config(config(corpus, work / "run", MODEL, OLD, 80))).last_checkpoint
    return Path(old), extend_checkpoint(old, NEW, work / "extended.pt", vocab_size=40, seed=1).out


def test_trained_model_loads_translates_and_round_trips(trained, corpus, tmp_path):  # noqa: F811
    old_path, _ = trained
    model = interlingua.load(old_path, "cpu")
    assert model.config.model.decoder.language_embedding == "concat"
    texts = sentences(corpus, "xa")[:8]
    out = {tgt: model.translate(texts, "xa", tgt, beam=2) for tgt in ("xb", "xc")}
    assert all(len(v) == len(texts) and any(v) for v in out.values())
    assert out["xb"] != out["xc"]  # xc: zero-shot, still its own language's vector
    with pytest.raises(LanguageError, match="no decoder for 'zz'"):
        model.translate(texts, "xa", "zz")
    # .pt again and a model folder: the same vectors, the same translations
    loaded = load_model(old_path)
    again = tmp_path / "again.pt"
    save_atomic(build_payload(loaded.config, loaded.network, loaded.vocabs, loaded.directions), again)
    folder = model.save(tmp_path / "folder")
    for path in (again, folder):
        back = interlingua.load(path, "cpu")
        assert back.translate(texts, "xa", "xb", beam=2) == out["xb"], path
        vectors = shared_decoder(load_model(path).network).language_embeddings
        assert all(torch.equal(v, shared_decoder(loaded.network).language_embeddings[k]) for k, v in vectors.items())


def test_int8_quantizes_the_projection_and_translates(trained, corpus, monkeypatch, tmp_path):  # noqa: F811
    old_path, _ = trained
    with pytest.raises(ConfigError, match="no layer of this model is big enough"):  # the tiny model's layers
        interlingua.load(old_path, "cpu", "int8")
    monkeypatch.setattr(int8, "MIN_INT8_WEIGHTS", 0)
    # the kernel choice is measured on the machine (tests/test_int8.py); here int8 pays at every layer shape
    monkeypatch.setenv("INTERLINGUA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(int8, "time_kernels", fake_times(lambda shape: "int_mm"))
    q, fp32 = interlingua.load(old_path, "cpu", "int8"), interlingua.load(old_path, "cpu")
    assert q.runtime.precision == "int8"
    network = load_model(old_path).network
    int8.quantize_network(network)  # what loading in int8 does
    assert isinstance(shared_decoder(network).embedding.language_proj, int8.Int8Linear)
    texts = sentences(corpus, "xa")[:20]
    quantized, plain = q.translate(texts, "xa", "xb"), fp32.translate(texts, "xa", "xb")
    assert len(quantized) == len(texts)
    assert sum(a == b for a, b in zip(quantized, plain)) >= 0.8 * len(texts)  # measured: all 20


def test_extend_gives_the_new_language_the_mean_vector_and_fine_tunes(trained, corpus, tmp_path, capsys):  # noqa: F811
    old_path, ext_path = trained
    before, after = load_model(old_path).network.state_dict(), load_model(ext_path).network.state_dict()
    key = "decoders.shared.language_embeddings."
    assert {k for k in after if k.startswith(key)} == {key + lang for lang in [*OLD, NEW]}
    old_vectors = torch.stack([before[key + lang] for lang in OLD])
    assert torch.allclose(after[key + NEW], old_vectors.double().mean(0).float())
    assert all(torch.equal(after[key + lang], before[key + lang]) for lang in OLD)
    # old directions translate as before; the new language translates both ways
    old, ext = interlingua.load(old_path, "cpu"), interlingua.load(ext_path, "cpu")
    texts = sentences(corpus, "xa")[:10]
    assert ext.translate(texts, "xa", "xb", beam=2) == old.translate(texts, "xa", "xb", beam=2)
    assert len(ext.translate(texts, "xb", NEW, beam=2)) == len(ext.translate(sentences(corpus, NEW)[:10], NEW, "xa"))

    # fine-tuning trains the new vector and lowers the loss into the new language
    cfg = config(corpus, tmp_path / "finetune", MODEL, [*OLD, NEW], 60)
    cfg_path = tmp_path / "finetune.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    assert main(["train", str(cfg_path), "--init", str(ext_path)]) == 0
    tuned = load_model(tmp_path / "finetune" / "last.pt")
    assert not torch.equal(shared_decoder(tuned.network).language_embeddings[NEW].detach(), after[key + NEW])

    def nll(loaded):
        with torch.inference_mode():
            out = loaded.network(_batch(loaded, corpus, "xb", NEW, split="val"))
        return out.nll_sum / out.n_tokens

    assert nll(tuned) < 0.75 * nll(load_model(ext_path))  # measured: 5.0 -> 1.7


def test_cli_extend_names_the_new_languages_own_weights(trained, tmp_path, capsys):  # noqa: F811
    old_path, _ = trained
    out = tmp_path / "cli_extended.pt"
    assert main(["extend", str(old_path), "--lang", NEW, "--out", str(out), "--vocab-size", "40", "--seed", "1"]) == 0
    printed = capsys.readouterr().out
    assert f"its own weights (the old languages' mean): decoders.shared.language_embeddings.{NEW}" in printed, printed


def test_ctranslate2_export_refuses_it(trained, tmp_path, capsys):  # noqa: F811
    old_path, _ = trained
    out = tmp_path / "ct2"
    needle = "decoder.language_embedding concat"
    code, lines = cli(["export", "ctranslate2", str(old_path), str(out)], capsys)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    for part in ("cannot export this model to CTranslate2", needle,
                 "CTranslate2's Transformer decoder has no language embedding"):
        assert part in lines[0], (part, lines[0])
    assert not out.exists()
    with pytest.raises(UnsupportedModelError, match=needle):
        interlingua.load(old_path, "cpu").export_ctranslate2(out)
