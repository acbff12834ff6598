"""`interlingua extend`: add a language to a trained shared model (paper 004, "Adaptation Procedure").

The new language gets a sentencepiece model of its own, learned on its training text with the
model's preprocessing and holding its tag `<2xx>`; the model's id space grows by that vocabulary's
pieces, appended after the existing ids (the specials pad/unk/bos/eos keep ids 0-3, which both
vocabularies share). Old token ids do not move, so the old languages tokenize exactly as before.

Every weight sized by the id space (encoder input embeddings, decoder embeddings, the output
projection's rows and bias; a tied embedding stays one tensor) gains rows for the new ids,
initialised as the mean of the existing non-special rows (ids 4 onward) plus Gaussian noise of
standard deviation `noise` drawn from a generator seeded with `seed`. A weight kept per language
(a dict keyed by language code, such as a Transformer decoder's `language_embedding: concat`
vectors) gets an entry for the new language: the mean of the old languages' entries. Everything
else is copied.

Each target language then produces only its own vocabulary's ids (`interlingua.modules.outputs`),
so translating between old languages gives exactly the old model's output; fine-tune the result
with `interlingua train CONFIG --init extended.pt`.

The new language's training text is read through `interlingua.data.prepare` (the data layer), the
model through `interlingua.model_files`.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from interlingua.data.prepare import language_training_text
from interlingua.data.vocab import EOS, Vocab, language_tag, link_tags
from interlingua.errors import CheckpointError, ConfigError, LanguageError
from interlingua.model_files.checkpoint import Checkpoint, check_output
from interlingua.model_files.load import load_model
from interlingua.model_files.loaded import AddedLanguage
from interlingua.modules.model import TranslationNetwork

DEFAULT_VOCAB_SIZE = 4000
DEFAULT_NOISE = 0.01
"""Standard deviation of the noise on the new rows: small next to the rows' own spread
(Transformer embeddings start at 1/sqrt(embed_dim), 0.09 at 128), enough to tell the new ids apart."""


@dataclass
class Extension:
    """What `extend_checkpoint` wrote."""

    out: Path
    lang: str
    old_size: int
    """Ids before extension (the old vocabulary's size)."""
    new_size: int
    """Ids after extension: the new language's pieces are ids old_size .. new_size - 1."""
    grown: list[str]
    """The weights that gained rows."""
    added: list[str] = field(default_factory=list)
    """The new language's own weights (its entry of a per-language dict), the mean of the old languages'."""


def new_language_vocab(texts: Iterable[str], lang: str, vocab_size: int, id_space: int,
                       sample: int | None = None) -> Vocab:
    """The new language's sentencepiece model (with its tag), its pieces placed after `id_space` ids;
    learned from at most `sample` of the lines, drawn at random, where given."""
    trained = Vocab.train(texts, vocab_size, user_symbols=[language_tag(lang)], threads=1, sample=sample)
    trained.warn_if_smaller(vocab_size, f"vocab_size (the new '{lang}' vocabulary)")
    return Vocab(trained.proto, offset=id_space - (EOS + 1))


def _per_language_sources(name: str, lang: str, old_langs: Iterable[str], source: dict[str, torch.Tensor]
                          ) -> list[torch.Tensor]:
    """The old languages' weights beside `name`, a weight of the new language `lang` in a dict keyed by
    language code (`name` with the component `lang` replaced by each old language, where `source` has it)."""
    parts = name.split(".")
    found = []
    for i in (i for i, part in enumerate(parts) if part == lang):
        for other in old_langs:
            sibling = ".".join([*parts[:i], other, *parts[i + 1:]])
            if sibling in source:
                found.append(source[sibling])
    return found


@torch.no_grad()
def grow_rows(old: TranslationNetwork, new: TranslationNetwork, old_size: int, noise: float, seed: int,
              lang: str | None = None, added: list[str] | None = None) -> list[str]:
    """Copy `old`'s weights into `new`, whose id-space-sized weights have more rows: those rows are the
    mean of the old non-special rows plus N(0, noise^2) noise. Returns the names of the grown weights.
    The new language `lang`'s own entries of per-language weights (which `old` lacks) are the mean of the
    old languages' entries; their names are appended to `added`."""
    source = old.state_dict()
    old_langs = sorted(set(old.encoder_langs) | set(old.decoder_langs))
    gen = torch.Generator().manual_seed(seed)
    grown = []
    for name, param in new.named_parameters():  # a tied weight comes once
        if name not in source:
            siblings = _per_language_sources(name, lang, old_langs, source) if lang is not None else []
            if not siblings or any(s.shape != param.shape for s in siblings):
                raise CheckpointError(f"cannot extend the model: weight '{name}' has no counterpart to start from")
            param.copy_(torch.stack([s.double() for s in siblings]).mean(0).to(param.dtype))
            if added is not None:
                added.append(name)
            continue
        before = source[name]
        if before.shape == param.shape:
            param.copy_(before)
        elif before.shape[1:] == param.shape[1:] and before.shape[0] == old_size and param.shape[0] > old_size:
            extra = param.shape[0] - old_size
            mean = before[EOS + 1:].double().mean(0)
            rows = mean + noise * torch.randn((extra, *param.shape[1:]), generator=gen, dtype=torch.float64)
            param.copy_(torch.cat([before, rows.to(before.dtype)]))
            grown.append(name)
        else:
            raise CheckpointError(f"cannot extend weight '{name}': shape {tuple(before.shape)} -> {tuple(param.shape)}")
    for name, buf in new.named_buffers():
        buf.copy_(source[name])
    return grown


def extend_checkpoint(path: str | Path, lang: str, out: str | Path, *, corpus: str | Path | None = None,
                      vocab_size: int = DEFAULT_VOCAB_SIZE, noise: float = DEFAULT_NOISE, seed: int = 0,
                      force: bool = False) -> Extension:
    """Add `lang` to the trained shared model at `path` (its vocabulary learned on `corpus`, by default
    the one it was trained on) and write the extended, translation-only checkpoint to `out` (refused where
    it is `path`, `corpus` or a training checkpoint, unless `force`: `check_output`)."""
    check_output(out, [path, corpus], force=force)
    loaded = load_model(path, "cpu")
    cfg = loaded.config
    if not cfg.model.shared:
        raise ConfigError(f"{path}: adding a language needs a shared model (model.shared: true, one encoder "
                          f"and one decoder for all languages); this one has one per language")
    known = sorted(set(loaded.vocabs) | set(loaded.network.encoder_langs) | set(loaded.network.decoder_langs))
    if lang in known:
        raise LanguageError(f"language '{lang}' is already in the model ({', '.join(known)})")
    if vocab_size < EOS + 2:
        raise ConfigError(f"vocab_size must be at least {EOS + 2}, got {vocab_size}")
    if noise < 0:
        raise ConfigError(f"noise must be >= 0, got {noise}")
    texts = language_training_text(corpus or cfg.corpus, lang, cfg.preprocess)
    old_size = loaded.network.decoder_for(loaded.network.decoder_langs[0]).generator.out_features
    new_vocab = new_language_vocab(texts, lang, vocab_size, old_size, cfg.preprocess.vocab_sample)
    vocabs = {**loaded.vocabs, lang: new_vocab}
    link_tags(vocabs)
    network = TranslationNetwork(cfg.model, {code: len(v) for code, v in vocabs.items()},
                               [*loaded.network.encoder_langs, lang], [*loaded.network.decoder_langs, lang])
    added: list[str] = []
    grown = grow_rows(loaded.network, network, old_size, noise, seed, lang, added)
    network.restrict_to_vocabs(vocabs)
    extended = Checkpoint.of(cfg, network, vocabs, loaded.directions)
    extended.extended = [*loaded.provenance.extended, AddedLanguage(lang, str(path), vocab_size, noise, seed)]
    out = Path(out)
    extended.save(out)
    return Extension(out, lang, old_size, len(vocabs[lang]), grown, added)
