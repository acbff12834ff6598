"""Turn user text into model input the same way training text was prepared."""
from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from interlingua.config import PreprocessConfig
from interlingua.data.batching import pad_sources
from interlingua.data.corpus import normalize_line
from interlingua.data.vocab import Vocab

log = logging.getLogger(__name__)


def text_problem(text: object) -> str | None:
    """Why `text` cannot be read as one input text, or None when it can. Python strings may hold
    lone UTF-16 surrogates (from `"\\ud800"` in JSON, or `surrogateescape` decoding), which no
    tokenizer or file can take; they are refused here, by name, before they reach sentencepiece."""
    if not isinstance(text, str):
        return f"is of type {type(text).__name__}, not a string"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return (f"is not valid Unicode text: U+{ord(text[err.start]):04X} at character {err.start} is a lone "
                "UTF-16 surrogate, which cannot be encoded as UTF-8")
    return None


def check_input_texts(texts: object, name: str = "texts") -> Sequence[str]:
    """`texts` itself when it is a sequence of valid strings. A bare string is refused (iterating it
    would give one text per character), and so is any item that is not valid text, by its index:
    `TypeError` for the wrong types, `ValueError` for strings that are not valid Unicode."""
    if isinstance(texts, (str, bytes)):
        raise TypeError(f"{name} must be a list of strings, got a single {type(texts).__name__}: "
                        f"pass [{name[:-1] if name.endswith('s') else name}] for one text")
    if not isinstance(texts, Sequence):
        raise TypeError(f"{name} must be a list of strings, got {type(texts).__name__}")
    for index, text in enumerate(texts):
        problem = text_problem(text)
        if problem is not None:
            error = TypeError if not isinstance(text, str) else ValueError
            raise error(f"{name}[{index}] {problem}")
    return texts


def tokenize_inputs(sentences: Sequence[str], vocab: Vocab, pre: PreprocessConfig,
                  empty_output: str = "their output is empty") -> list[np.ndarray]:
    """Normalise and tokenise; over-long inputs are truncated to `max_len` with one warning, and
    empty ones (nothing left after normalisation) are counted in one warning that ends with
    `empty_output`, what the caller gives them. Invalid texts raise (`check_input_texts`)."""
    ids = _subwords(sentences, vocab, pre)
    too_long = [i + 1 for i in _overlong(ids, pre.max_len)]  # line numbers
    if too_long:
        shown = ", ".join(map(str, too_long[:5])) + (", ..." if len(too_long) > 5 else "")
        log.warning("%d input line(s) longer than max_len=%d subwords were truncated (%s %s)", len(too_long),
                    pre.max_len, "line" if len(too_long) == 1 else "lines", shown)
    empty = sum(len(x) == 0 for x in ids)
    if empty:
        log.warning("%d empty input line(s): %s", empty, empty_output)
    return [np.asarray(x[:pre.max_len], dtype=np.int64) for x in ids]


def overlong_inputs(sentences: Sequence[str], vocab: Vocab, pre: PreprocessConfig) -> list[int]:
    """The indices of `sentences` longer than `pre.max_len` subwords, which `tokenize_inputs` cuts to it."""
    return _overlong(_subwords(sentences, vocab, pre), pre.max_len)


def _subwords(sentences: Sequence[str], vocab: Vocab, pre: PreprocessConfig) -> list[list[int]]:
    """The ids of each sentence, normalised as in training and not yet cut (invalid texts raise)."""
    check_input_texts(sentences)
    return vocab.tokenize_batch([normalize_line(s, pre.lowercase, pre.normalize) for s in sentences])


def _overlong(ids: Sequence[Sequence[int]], max_len: int) -> list[int]:
    return [i for i, x in enumerate(ids) if len(x) > max_len]


def length_sorted_batches(seqs: list[np.ndarray], batch_size: int, prefix: int | None = None,
                          max_tokens: int | None = None) -> Iterator[tuple[list[int], torch.Tensor, torch.Tensor]]:
    """Yield (original indices, padded ids, lengths) over the non-empty sequences, longest first:
    `batch_size` sequences a batch, fewer where `max_tokens` caps the padded batch (rows x longest
    row), so that a few very long inputs (documents) do not make one huge batch."""
    for idx in length_sorted_groups([len(s) for s in seqs], batch_size, max_tokens):
        src, lengths = pad_sources([seqs[i] for i in idx], prefix)
        yield idx, src, lengths


def length_sorted_groups(lengths: Sequence[int], batch_size: int, max_tokens: int | None = None) -> Iterator[list[int]]:
    """The indices of each of `length_sorted_batches`' batches, from the sequences' lengths alone (0: empty,
    left out): what lets a decoder re-form exactly the batches its encoder ran (`Model.generate`)."""
    order = sorted((i for i, n in enumerate(lengths) if n), key=lambda i: -lengths[i])
    start = 0
    while start < len(order):
        size = batch_size if max_tokens is None else max(1, min(batch_size, max_tokens // lengths[order[start]]))
        yield order[start:start + size]
        start += size
