"""Documents as model input: split into sentences (sentence-splitter, Moses' rules per language) and
turned into subword ids under a token limit, with warnings that name the documents concerned."""
from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from sentence_splitter import SentenceSplitter, SentenceSplitterException

from interlingua.config import PreprocessConfig
from interlingua.data.corpus import normalize_line
from interlingua.data.vocab import Vocab
from interlingua.errors import DataError
from interlingua.textio import read_input_lines

log = logging.getLogger(__name__)

DOCUMENT_TOKENS = 2000
"""Subwords a whole document keeps as one sequence (paper 003's DV limit, 2,000 there in BPE units)."""
SENTENCE_TOKENS = 500
"""Subwords each sentence keeps (paper 003's SV limit)."""


@functools.cache
def _splitter(lang: str) -> SentenceSplitter:
    try:
        return SentenceSplitter(language=lang)
    except SentenceSplitterException:
        log.warning("no sentence-splitting rules for '%s': English rules are used", lang)
        return SentenceSplitter(language="en")


def split_sentences(text: str, lang: str) -> list[str]:
    """The sentences of one document (empty ones dropped); a document without any gives []."""
    return [s for s in (x.strip() for x in _splitter(lang).split(text)) if s]


def name_items(indices: Sequence[int], what: str = "document", shown: int = 8) -> str:
    """'documents 3, 17 and 25' / 'documents 3, 17, ... (40 in all)': 0-based positions in the input."""
    idx = [str(i) for i in indices]
    if len(idx) == 1:
        return f"{what} {idx[0]}"
    if len(idx) > shown:
        return f"{what}s {', '.join(idx[:shown])}, ... ({len(idx)} in all)"
    return f"{what}s {', '.join(idx[:-1])} and {idx[-1]}"


def tokenize_documents(texts: Sequence[str], vocab: Vocab, pre: PreprocessConfig, max_tokens: int,
                       owners: Sequence[int] | None = None) -> list[np.ndarray]:
    """Normalise and tokenise each text as one sequence, cut to `max_tokens` subwords; one warning
    names the documents whose text was cut, another those with an empty text (nothing left after
    normalisation). `owners`: the document of each text where the texts are sentences."""
    ids = vocab.tokenize_batch([normalize_line(t, pre.lowercase, pre.normalize) for t in texts])
    doc = (lambda i: i) if owners is None else owners.__getitem__
    where = "" if owners is None else "sentences of "
    cut = sorted({doc(i) for i, x in enumerate(ids) if len(x) > max_tokens})
    if cut:
        log.warning("%s%s longer than %d subwords truncated to that length", where, name_items(cut), max_tokens)
    empty = sorted({doc(i) for i, x in enumerate(ids) if not x})
    if empty and owners is None:
        log.warning("%s empty: %s", name_items(empty),
                    "its vector is zeros" if len(empty) == 1 else "their vectors are zeros")
    return [np.asarray(x[:max_tokens], dtype=np.int64) for x in ids]


def read_labelled_documents(docs_path: Path, labels_path: Path, label_names: Sequence[str] | None = None
                            ) -> tuple[list[str], np.ndarray, list[str]]:
    """Documents (one a line) and their labels (one a line, any names): (texts, label ids, label names).
    Label ids index `label_names`, by default the sorted names found; a count mismatch, an empty label
    or a label outside `label_names` is an error naming the file and line."""
    texts, labels = (_lines(docs_path), _lines(labels_path))
    if len(texts) != len(labels):
        raise DataError(f"{docs_path} has {len(texts)} documents but {labels_path} has {len(labels)} labels: "
                        "one label a line, in the documents' order")
    for n, label in enumerate(labels, start=1):
        if not label.strip():
            raise DataError(f"{labels_path}, line {n}: empty label")
    names = list(label_names) if label_names is not None else sorted({x.strip() for x in labels})
    index = {name: i for i, name in enumerate(names)}
    ids = []
    for n, label in enumerate(labels, start=1):
        if label.strip() not in index:
            raise DataError(f"{labels_path}, line {n}: label {label.strip()!r} is not among the training labels "
                            f"({', '.join(names)})")
        ids.append(index[label.strip()])
    return texts, np.asarray(ids, dtype=np.int64), names


def _lines(path: Path) -> list[str]:
    return read_input_lines(Path(path))  # a file, a pipe or a device; a folder or a missing file named
