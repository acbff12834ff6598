"""Sentencepiece subword vocabularies, one per language (or one joint), kept as bytes.

The serialized model travels inside checkpoints so that one file is enough to translate.
"""
from __future__ import annotations

import io
import itertools
import logging
import math
import random
from collections.abc import Iterable, Sequence
from typing import Any

import sentencepiece as spm

PAD, UNK, BOS, EOS = 0, 1, 2, 3

SAMPLE_SEED = 1
"""The seed of the sample of training sentences a vocabulary learns from (`Vocab.train(sample=...)`)."""


def reservoir_sample(items: Iterable[str], k: int, seed: int) -> list[str]:
    """`k` of `items` drawn uniformly at random in one pass (all of them where there are no more), the same ones
    for the same `seed` in every process: reservoir sampling with geometric skips (Li's algorithm L, 1994), so
    the generator is drawn from about k log(n / k) times, not n times."""
    rng = random.Random(seed)
    stream = iter(items)
    kept = list(itertools.islice(stream, k))
    if len(kept) < k:
        return kept
    w = math.exp(math.log(1.0 - rng.random()) / k)
    while True:
        skip = math.floor(math.log(1.0 - rng.random()) / math.log(1.0 - w)) if w < 1.0 else 0
        nxt = next(itertools.islice(stream, skip, None), None)
        if nxt is None:
            return kept
        kept[rng.randrange(k)] = nxt
        w *= math.exp(math.log(1.0 - rng.random()) / k)


def language_tag(lang: str) -> str:
    """The target-language token of the fully shared (Johnson et al.) model."""
    return f"<2{lang}>"


def source_prefix(vocab: Vocab, tgt_lang: str, shared: bool, tag_position: str = "source_prefix") -> int | None:
    """The id every source sentence starts with: the `<2tgt>` tag of a shared model whose tag goes on
    the source side (`model.tag_position: source_prefix`), None otherwise.

    Training, dev validation, translation and embedding all prefix sources through this one function."""
    return vocab.piece_id(language_tag(tgt_lang)) if shared and tag_position == "source_prefix" else None


def decoder_start(vocab: Vocab, tgt_lang: str, shared: bool, tag_position: str = "source_prefix") -> int:
    """The decoder's first input: the `<2tgt>` tag in place of BOS for a shared model whose tag goes on
    the target side (`model.tag_position: decoder_start`, paper 004: nothing marks the source), BOS otherwise.

    Training batches, dev loss and search all start the decoder through this one function."""
    return vocab.piece_id(language_tag(tgt_lang)) if shared and tag_position == "decoder_start" else BOS


log = logging.getLogger(__name__)


class Vocab:
    """A sentencepiece model with fixed special ids (pad 0, unk 1, bos 2, eos 3).

    A language added to a trained shared model (`interlingua extend`) brings its own sentencepiece
    model whose pieces live after the existing ids: `offset` shifts every non-special id, so the
    old vocabulary's ids stay as they were. `tags` names the language tags of the other
    vocabularies of that id space, so a source prefix finds `<2xx>` whichever vocabulary holds it."""

    def __init__(self, proto: bytes, offset: int = 0):
        self.proto = proto
        self.offset = offset
        self.sp = spm.SentencePieceProcessor(model_proto=proto)
        self.tags: dict[str, int] = {}
        """Pieces of other vocabularies in the same id space (language tags) -> their ids."""

    @classmethod
    def train(cls, sentences: Iterable[str], vocab_size: int, user_symbols: Sequence[str] = (), threads: int = 2,
              sample: int | None = None) -> Vocab:
        """BPE on the given (already normalised) sentences; the size is a soft limit on tiny data.
        With `sample`, only that many sentences are kept, drawn at random as they stream by
        (`reservoir_sample`), so a corpus of any size trains in bounded memory, and drawn the same way every
        time, so that the same corpus gives the same vocabulary (a cache prepared again must match the
        checkpoints already trained on it; sentencepiece's own sampling differed from process to process
        even with its seed set)."""
        buf = io.BytesIO()
        lines: Iterable[str] = (s for s in sentences if s)
        if sample:
            lines = reservoir_sample(lines, sample, SAMPLE_SEED)
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines),
            model_writer=buf,
            model_type="bpe",
            vocab_size=vocab_size,
            hard_vocab_limit=False,
            character_coverage=1.0,
            pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS,
            user_defined_symbols=list(user_symbols),
            normalization_rule_name="identity",
            num_threads=threads,
            minloglevel=2,
            max_sentence_length=1 << 16,
        )
        return cls(buf.getvalue())

    def warn_if_smaller(self, asked: int, what: str) -> None:
        """Warn where sentencepiece built fewer pieces than `asked`: its limit is soft (a text too small for
        the size asked gets what it supports, silently), and a user who asked for a size should learn he
        did not get it. `what` names the setting and the vocabulary."""
        built = self.sp.get_piece_size()
        if built < asked:
            log.warning("%s: %d pieces asked for, but the training text supports only %d: the vocabulary has %d",
                        what, asked, built, built)

    def __len__(self) -> int:
        """The end of this vocabulary's ids (its size, plus the offset of an added language's)."""
        return self.sp.get_piece_size() + self.offset

    def _shift(self, ids: list[int]) -> list[int]:
        return [i + self.offset if i > EOS else i for i in ids] if self.offset else ids

    def tokenize(self, text: str) -> list[int]:
        """Subword ids of one (normalised) line."""
        return self._shift(self.sp.encode(text))

    def tokenize_batch(self, texts: Sequence[str], threads: int | None = None) -> list[list[int]]:
        """Subword ids of each line (on `threads` threads of sentencepiece's own, or its default)."""
        threading: dict[str, Any] = {"num_threads": threads} if threads else {}
        ids = self.sp.encode(list(texts), **threading)
        return [self._shift(x) for x in ids] if self.offset else ids

    def decode(self, ids: Sequence[int]) -> str:
        """Text of the ids; specials and ids of other vocabularies are dropped."""
        return self.sp.decode([i - self.offset for i in ids if EOS + self.offset < i < len(self)])

    def pieces(self, text: str) -> list[str]:
        return self.sp.encode(text, out_type=str)

    def piece_id(self, piece: str) -> int:
        pid = self.sp.piece_to_id(piece)
        if pid == UNK:
            if piece in self.tags:
                return self.tags[piece]
            raise KeyError(piece)
        return pid + self.offset if pid > EOS else pid

    def id_to_piece(self, i: int) -> str:
        """The piece of one of this vocabulary's ids (the id space's specials included)."""
        return self.sp.id_to_piece(i - self.offset if i > EOS else i)

    def id_ranges(self) -> list[tuple[int, int]]:
        """The ids this vocabulary can produce, as [start, end) ranges: the specials and its own pieces."""
        return [(0, len(self))] if not self.offset else [(0, EOS + 1), (EOS + 1 + self.offset, len(self))]


def vocabs_from_protos(protos: dict[str, bytes], offsets: dict[str, int] | None = None) -> dict[str, Vocab]:
    """The vocabularies of a checkpoint: languages with the same model and offset share one object;
    where some offset is set (a language was added), every vocabulary also knows the others' tags."""
    offsets = offsets or {}
    cache: dict[tuple[bytes, int], Vocab] = {}
    vocabs = {}
    for lang, p in protos.items():
        key = (p, int(offsets.get(lang, 0)))
        if key not in cache:  # a joint vocabulary's sentencepiece model is loaded once
            cache[key] = Vocab(*key)
        vocabs[lang] = cache[key]
    if any(offsets.values()):
        link_tags(vocabs)
    return vocabs


def link_tags(vocabs: dict[str, Vocab]) -> None:
    """Let every vocabulary find every language's `<2xx>` tag, whichever vocabulary holds it."""
    tags: dict[str, int] = {}
    for _lang, v in vocabs.items():
        for other in vocabs:
            tag = language_tag(other)
            if tag not in tags and v.sp.piece_to_id(tag) != UNK:
                tags[tag] = v.piece_id(tag)
    for v in {id(v): v for v in vocabs.values()}.values():
        v.tags = dict(tags)


def vocab_offsets(vocabs: dict[str, Vocab]) -> dict[str, int]:
    """Per language, the offset of its ids; empty where no language was added to a trained model."""
    return {lang: v.offset for lang, v in vocabs.items()} if any(v.offset for v in vocabs.values()) else {}
