"""Sentencepiece subword vocabularies, one per language (or one joint), kept as bytes.

The serialized model travels inside checkpoints so that one file is enough to translate.
"""
from __future__ import annotations

import io
from collections.abc import Iterable, Sequence

import sentencepiece as spm

PAD, UNK, BOS, EOS = 0, 1, 2, 3


def language_tag(lang: str) -> str:
    """The target-language token of the fully shared (Johnson et al.) model."""
    return f"<2{lang}>"


def source_prefix(vocab: "Vocab", tgt_lang: str, shared: bool) -> int | None:
    """The id every source sentence starts with: the `<2tgt>` tag of a shared model, None otherwise.

    Training, dev validation, translation and embedding all prefix sources through this one function."""
    return vocab.piece_id(language_tag(tgt_lang)) if shared else None


class Vocab:
    """A sentencepiece model with fixed special ids (pad 0, unk 1, bos 2, eos 3)."""

    def __init__(self, proto: bytes):
        self.proto = proto
        self.sp = spm.SentencePieceProcessor(model_proto=proto)

    @classmethod
    def train(cls, sentences: Iterable[str], vocab_size: int, user_symbols: Sequence[str] = (), threads: int = 2) -> "Vocab":
        """BPE on the given (already normalised) sentences; the size is a soft limit on tiny data."""
        buf = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(s for s in sentences if s),
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

    def __len__(self) -> int:
        return self.sp.get_piece_size()

    def tokenize(self, text: str) -> list[int]:
        """Subword ids of one (normalised) line."""
        return self.sp.encode(text)

    def tokenize_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Subword ids of each line."""
        return self.sp.encode(list(texts))

    def decode(self, ids: Sequence[int]) -> str:
        return self.sp.decode([i for i in ids if i > EOS])

    def pieces(self, text: str) -> list[str]:
        return self.sp.encode(text, out_type=str)

    def piece_id(self, piece: str) -> int:
        pid = self.sp.piece_to_id(piece)
        if pid == UNK:
            raise KeyError(piece)
        return pid
