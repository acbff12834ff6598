"""Text -> interlingua -> any language (`Model.represent`, `Model.generate`): a representation written out
in a target is, byte for byte, the translation into it (greedy and beam), for the attention-bridge LSTM
and for a shared Transformer without a bridge; a model that puts the target's tag in the source
encodes for one target and says so; empty texts stay empty; `generate` refuses anything but its own
model's representation (tensors, other weights, another width, dtype or device, NaN memory) by name.

Tiny random models, no training: uniform weights in [-0.5, 0.5] make each output depend on its input;
the checks of `generate` use the session's trained model (conftest) and its untrained twin.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_config
from test_decoding import _sentences, random_checkpoint

import interlingua
from interlingua.config import parse_config
from interlingua.data.inputs import tokenize_inputs
from interlingua.data.vocab import Vocab, language_tag
from interlingua.errors import ArgumentError, ArgumentTypeError, LanguageError, TargetMismatchError
from interlingua.model_files.checkpoint import build_payload, save_atomic
from interlingua.model_files.load import load_model
from interlingua.modules.model import TranslationNetwork
from interlingua.modules.search import translate_ids

LANGS = ("en", "de", "fr")
SENTENCES = ["a dog runs in the park .", "", "the woman eats a small red ball near the street .", "a child sits .",
             "the big cat", "a man sits on the blue ball near a small child in the park ."]
TRANSFORMER = {"embed_dim": 32, "encoder": {"type": "transformer", "layers": 2, "heads": 2},
               "decoder": {"type": "transformer", "layers": 1, "heads": 2}}


def shared_checkpoint(path: Path, **model) -> Path:
    """One shared model for en, de and fr over a joint vocabulary with the <2xx> tags; `model` overrides
    the tiny model config (e.g. `tag_position`, `bridge`)."""
    pairs = [[s, t] for s in LANGS for t in LANGS if s != t]
    cfg = parse_config(tiny_config(path.parent / "corpus.yaml", path.parent,
                                   directions={"mode": "explicit", "pairs": pairs},
                                   model={"shared": True, "param_init": 0.5, **model}))
    vocab = Vocab.train([s for lang in LANGS for s in _sentences(lang)], vocab_size=150,
                        user_symbols=[language_tag(lang) for lang in LANGS], threads=1)
    torch.manual_seed(0)
    net = TranslationNetwork(cfg.model, {lang: len(vocab) for lang in LANGS}, list(LANGS), list(LANGS))
    save_atomic(build_payload(cfg, net, {lang: vocab for lang in LANGS}, [tuple(p) for p in pairs]), path)
    return path


def streamed(model: interlingua.Model, texts: list[str], src: str, tgt: str, **settings) -> list[str]:
    """The translation as dev validation makes it: `translate_ids`, each batch encoded and searched at once,
    no representation kept (the path `translate` took before it was `represent` + `generate`)."""
    seqs = tokenize_inputs(texts, model.vocabs[src], model.preprocess)
    with model.runtime.autocast():
        return translate_ids(load_model(model.path).network, dict(model.vocabs), seqs, src, tgt,
                             max_len_cap=4 * model.preprocess.max_len, **settings)


@pytest.fixture(scope="module")
def bridge_model(tmp_path_factory) -> interlingua.Model:
    """BiLSTM encoder, attention bridge (4 heads), LSTM decoders: one per language."""
    return interlingua.load(random_checkpoint(tmp_path_factory.mktemp("bridge") / "model.pt", langs=LANGS,
                                              param_init=0.5), "cpu")


@pytest.fixture(scope="module")
def shared_transformer(tmp_path_factory) -> interlingua.Model:
    """Paper 004's setting: one Transformer for every language, no bridge, the tag in place of BOS."""
    path = tmp_path_factory.mktemp("shared") / "model.pt"
    return interlingua.load(shared_checkpoint(path, tag_position="decoder_start", bridge={"type": "none"},
                                              **TRANSFORMER), "cpu")


@pytest.fixture(scope="module")
def prefixed_model(tmp_path_factory) -> interlingua.Model:
    """Johnson et al.'s setting: the target's <2xx> tag before the source."""
    path = tmp_path_factory.mktemp("prefixed") / "model.pt"
    return interlingua.load(shared_checkpoint(path, tag_position="source_prefix", bridge={"type": "none"},
                                              **TRANSFORMER), "cpu")


@pytest.mark.parametrize("name", ["bridge_model", "shared_transformer"])
@pytest.mark.parametrize("beam", [1, 5])
def test_generate_from_one_representation_is_the_translation_into_every_target(request, name, beam):
    model = request.getfixturevalue(name)
    for batch_size in (64, 2):  # one batch, and several: generate puts back the batches the encoder ran
        rep = model.represent(SENTENCES, "en", batch_size)
        outputs = {tgt: model.generate(rep, tgt, beam=beam, batch_size=batch_size) for tgt in LANGS}
        for tgt, generated in outputs.items():
            assert generated == model.translate(SENTENCES, "en", tgt, beam=beam, batch_size=batch_size), tgt
            assert generated == streamed(model, SENTENCES, "en", tgt, beam=beam, batch_size=batch_size), tgt
            assert generated[1] == "" and all(generated[i] for i in (0, 2, 3))
        assert len({tuple(out) for out in outputs.values()}) == len(LANGS)  # each target its own words
        assert len(set(outputs["de"])) > 2  # and each sentence its own translation


def test_a_representation_is_the_bridge_output_per_sentence(bridge_model, shared_transformer):
    rep = bridge_model.represent(SENTENCES, "en")
    assert len(rep) == len(SENTENCES) and (rep.src, rep.tgt) == ("en", None)
    heads = bridge_model.encode(SENTENCES, "en", pooling="heads")  # the attention bridge's M, row by row
    for i, text in enumerate(SENTENCES):
        if text:
            assert rep.memory[i].shape == (bridge_model.heads, bridge_model.dim) and bool(rep.mask[i].all())
            assert rep.memory[i].device == bridge_model.device
            torch.testing.assert_close(rep.memory[i], torch.from_numpy(heads[i]))
    # Without a bridge the decoders read the encoder states: one row per subword (no tag in the source).
    rep = shared_transformer.represent(SENTENCES, "de")
    for memory, mask, ids in zip(rep.memory, rep.mask, shared_transformer.token_ids(SENTENCES, "de")):
        assert memory.shape[0] == mask.shape[0] == len(ids) and bool(mask.all())


def test_a_slice_of_a_representation_is_those_sentences(bridge_model):
    rep = bridge_model.represent(SENTENCES, "en", batch_size=1)
    alone = bridge_model.generate(rep, "de", batch_size=1)
    assert bridge_model.generate(rep[2:5], "de", batch_size=1) == alone[2:5]
    assert bridge_model.generate(rep[[5, 0]], "de", batch_size=1) == [alone[5], alone[0]]
    assert bridge_model.generate(rep[-1], "fr", batch_size=1) == bridge_model.translate(SENTENCES[-1:], "en", "fr")
    assert rep[2:5].memory[0] is rep.memory[2] and len(rep[::2]) == 3


def test_empty_texts_have_an_empty_memory_and_translation(bridge_model, shared_transformer):
    for model in (bridge_model, shared_transformer):
        rep = model.represent(["", "   "], "en")
        assert rep.lengths == (0, 0) and all(m.shape[0] == 0 for m in rep.memory)
        assert model.generate(rep, "de", beam=3) == ["", ""] == model.translate(["", "   "], "en", "de", beam=3)
        empty = model.represent([], "en")
        assert len(empty) == 0 and model.generate(empty, "fr") == []


def test_a_source_prefix_model_encodes_for_one_target(prefixed_model, bridge_model, shared_transformer):
    assert prefixed_model.target_in_source
    assert not bridge_model.target_in_source and not shared_transformer.target_in_source
    with pytest.raises(LanguageError, match=r"source_prefix.*tgt="):
        prefixed_model.represent(SENTENCES, "en")
    rep = prefixed_model.represent(SENTENCES, "en", tgt="de")
    assert rep.tgt == "de"
    for beam in (1, 5):
        generated = prefixed_model.generate(rep, "de", beam=beam)
        assert generated == prefixed_model.translate(SENTENCES, "en", "de", beam=beam)
        assert generated == streamed(prefixed_model, SENTENCES, "en", "de", beam=beam, batch_size=64)
    with pytest.raises(TargetMismatchError, match=r"encoded for target 'de'.*source_prefix.*'fr'"):
        prefixed_model.generate(rep, "fr")
    # The tag is read by the encoder: another target is another encoding.
    other = prefixed_model.represent(SENTENCES, "en", tgt="fr")
    assert not torch.equal(other.memory[0], rep.memory[0])
    # Elsewhere `tgt` is accepted and ignored: the representation serves every target.
    assert bridge_model.represent(SENTENCES, "en", tgt="de").tgt is None


def test_generate_checks_its_arguments(bridge_model):
    rep = bridge_model.represent(SENTENCES[:1], "en")
    with pytest.raises(LanguageError, match="no decoder for 'xx'"):
        bridge_model.generate(rep, "xx")
    with pytest.raises(LanguageError, match="no encoder for 'xx'"):
        bridge_model.represent(SENTENCES, "xx")
    with pytest.raises(ValueError, match="beam"):
        bridge_model.generate(rep, "de", beam=0)
    with pytest.raises(ValueError, match="beam_stop"):
        bridge_model.generate(rep, "de", beam=2, beam_stop="first")


# -- generate checks what it is given: through the session's trained model ---------------------------

@pytest.fixture(scope="module")
def trained(trained_model) -> interlingua.Model:
    return interlingua.load(trained_model, "cpu")


@pytest.mark.parametrize("given", [torch.zeros(1, 4, 64), np.zeros((1, 4, 64), dtype=np.float32), None,
                                   [torch.zeros(4, 64)]], ids=["tensor", "array", "None", "list"])
def test_generate_refuses_what_is_no_representation(trained, given):
    with pytest.raises(ArgumentTypeError, match=r"^representation: expected a Representation \(from Model.represent\), "
                                                f"got {type(given).__name__ if given is not None else None}$"):
        trained.generate(given, "de")


def test_generate_refuses_memory_of_another_width_dtype_or_device(trained):
    rep = trained.represent(["a dog runs .", "", "two men sit ."], "en")
    width = rep.memory[0].shape[1]
    for memory, needle in (
            (tuple(m[:, :-1] for m in rep.memory), f"text 0 is {width - 1} wide; this model's decoders read memory "
                                                   f"{width} wide"),
            (tuple(torch.cat([m, m], 1) for m in rep.memory), f"text 0 is {2 * width} wide"),
            (tuple(m.double() for m in rep.memory), "text 0 is float64; this model reads float32"),
            (tuple(m.half() for m in rep.memory), "text 0 is float16; this model reads float32"),
            (tuple(m.to(torch.int32) for m in rep.memory), "text 0 is int32"),
            (tuple(m.to("meta") for m in rep.memory), "text 0 is on meta; the model is on cpu"),
            (tuple(m.reshape(-1) for m in rep.memory), r"text 0 is not a \(rows, width\) tensor")):
        with pytest.raises(ArgumentError, match="^representation: the memory of " + needle):
            trained.generate(dataclasses.replace(rep, memory=memory), "de")
    with pytest.raises(ArgumentError, match="mask of text 2 is not a bool vector"):
        trained.generate(dataclasses.replace(rep, mask=rep.mask[:2] + (rep.mask[2][:-1],)), "de")
    with pytest.raises(ArgumentError, match="3 memories, 2 masks and 3 lengths"):
        trained.generate(dataclasses.replace(rep, mask=rep.mask[:2]), "de")
    assert trained.generate(rep, "de") == trained.translate(["a dog runs .", "", "two men sit ."], "en", "de")


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_generate_refuses_non_finite_memory(trained, value):
    rep = trained.represent(["a dog runs .", "two men sit ."], "en")
    damaged = rep.memory[1].clone()
    damaged[0, 3] = value
    with pytest.raises(ArgumentError, match="^representation: the memory of text 1 holds NaN or infinite values$"):
        trained.generate(dataclasses.replace(rep, memory=(rep.memory[0], damaged)), "de")


def test_generate_writes_out_only_its_own_models_representations(trained, trained_model, untrained_model, tmp_path):
    other = interlingua.load(untrained_model, "cpu")  # the same architecture and width, other weights
    rep = other.represent(["a dog runs ."], "en")
    with pytest.raises(ArgumentError, match="^representation: it was made by another model"):
        trained.generate(rep, "de")
    with pytest.raises(ArgumentError, match="carries no model fingerprint"):
        trained.generate(dataclasses.replace(trained.represent(["a dog"], "en"), fingerprint=""), "de")
    # the same weights, however loaded, are the same model: a representation kept from one serves the other
    again = interlingua.load(trained.save(tmp_path / "folder"), "cpu")
    assert again.fingerprint == trained.fingerprint != other.fingerprint
    mine = trained.represent(["a dog runs .", "two men sit ."], "en")
    assert again.generate(mine[::-1], "de") == trained.translate(["two men sit .", "a dog runs ."], "en", "de")
