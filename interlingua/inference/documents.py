"""Document vectors (paper 003, Sec. 2.3 and 3.2) from any model: the bridge's sentence vector
(`Bridge.pooled`: NTDV's sum of head outputs, the attention bridge's mean of M, a model without a
bridge's mean of H) of a whole document or of its sentences.

    unit "document"   DV: the document as one sequence, cut at 2,000 subwords
    unit "sentences"  SV: the mean of its sentence vectors, each sentence cut at 500 subwords

With `other` (a second language of the model), each document also gets a vector on the other
side: it is translated into `other` sentence by sentence (greedy, as the paper does, since these
models were trained on sentences) and the translation is embedded by `other`'s encoder; for DV the
translated sentences are joined into one sequence. The variants, keyed by language (a, b sorted):
`a`, `b`, `a:b` (concatenation) and `a+b` (sum). Token limits count subwords of the model's vocabulary.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from interlingua.arguments import COUNT, DOCUMENT_UNITS, check_choice
from interlingua.data.document_text import (
    DOCUMENT_TOKENS,
    SENTENCE_TOKENS,
    name_items,
    split_sentences,
    tokenize_documents,
)
from interlingua.data.inputs import check_input_texts
from interlingua.errors import InterlinguaError
from interlingua.inference.api import Model

log = logging.getLogger(__name__)

Unit = Literal["document", "sentences"]
BATCH_TOKENS = 4096
"""Padded subwords per batch at most: long documents go a few at a time (attention grows with n^2)."""


@dataclass
class DocumentVectors:
    vectors: dict[str, np.ndarray]
    """Variant -> (n_documents, d) float32 (`a:b`: 2d)."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall clock of each part: `encode` (forward passes only) and, with `other`, `translate`."""
    translations: list[list[str]] | None = None
    """With `other`: each document's sentences translated into it."""


def variant_names(lang: str, other: str | None) -> list[str]:
    """The variants `embed_documents` returns, in table order."""
    if other is None:
        return [lang]
    a, b = sorted((lang, other))
    return [a, b, f"{a}:{b}", f"{a}+{b}"]


def translate_documents(model: Model, docs: Sequence[str], src: str, tgt: str, batch_size: int = 64,
                        progress: bool = False) -> list[list[str]]:
    """Each document's sentences translated greedily from `src` into `tgt` (one list per document)."""
    check_input_texts(docs, "docs")
    sentences = [split_sentences(d, src) for d in docs]
    flat = [s for doc in sentences for s in doc]
    out = iter(model.translate(flat, src, tgt, beam=1, batch_size=batch_size, progress=progress)) if flat else iter([])
    return [[next(out) for _ in doc] for doc in sentences]


def embed_documents(model: Model, docs: Sequence[str], lang: str, unit: Unit = "document", other: str | None = None,
                    translations: Sequence[Sequence[str]] | None = None, batch_size: int = 16,
                    progress: bool = False) -> DocumentVectors:
    """Vectors of `docs` (written in `lang`) as DV or SV, on `lang`'s side and, with `other`, on
    `other`'s side and both combined. `translations` (per document, its sentences in `other`)
    saves translating again. Empty documents get zero vectors and a warning naming them."""
    check_input_texts(docs, "docs")
    check_choice("unit", unit, DOCUMENT_UNITS)
    COUNT.check("batch_size", batch_size)
    model.check_source(lang)
    if other is not None:
        if other == lang:
            raise InterlinguaError(f"the other side must be another language than the documents' ('{lang}')")
        model.check_target(other)  # translated into `other` ...
        model.check_source(other)  # ... and embedded by its encoder
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    own = _vectors(model, [split_sentences(d, lang) for d in docs] if unit == "sentences" else list(docs),
                   lang, unit, batch_size)
    seconds["encode"] = time.perf_counter() - start
    vectors = {lang: own}
    translated: list[list[str]] | None = None
    if other is not None:
        if translations is not None:
            if len(translations) != len(docs):
                raise InterlinguaError(f"{len(translations)} translations for {len(docs)} documents")
            translated = [list(t) for t in translations]
        else:
            start = time.perf_counter()
            translated = translate_documents(model, docs, lang, other, progress=progress)
            seconds["translate"] = time.perf_counter() - start
        start = time.perf_counter()
        side = translated if unit == "sentences" else [" ".join(t) for t in translated]
        vectors[other] = _vectors(model, side, other, unit, batch_size)
        seconds["encode"] += time.perf_counter() - start
        a, b = sorted((lang, other))
        vectors = {a: vectors[a], b: vectors[b], f"{a}:{b}": np.concatenate([vectors[a], vectors[b]], axis=1),
                   f"{a}+{b}": vectors[a] + vectors[b]}
    return DocumentVectors(vectors, seconds, translated)


def _vectors(model: Model, docs: Sequence[str] | Sequence[Sequence[str]], lang: str, unit: Unit,
             batch_size: int) -> np.ndarray:
    vocab, pre = model.vocabs[lang], model.preprocess
    readable = model.max_source_length(lang)
    limit = (lambda n: n) if readable is None else (lambda n: min(n, readable - 1))
    if unit == "document":
        seqs = tokenize_documents(docs, vocab, pre, limit(DOCUMENT_TOKENS))  # type: ignore[arg-type]
        return model.encode_ids(seqs, lang, batch_size, max_tokens=BATCH_TOKENS)
    owner = [i for i, sents in enumerate(docs) for _ in sents]
    flat = [s for sents in docs for s in sents]
    seqs = tokenize_documents(flat, vocab, pre, limit(SENTENCE_TOKENS), owners=owner)
    per_sentence = model.encode_ids(seqs, lang, max(batch_size, 64), max_tokens=BATCH_TOKENS)
    out = np.zeros((len(docs), model.dim), dtype=np.float32)
    counts = np.zeros(len(docs))
    for row, (i, ids) in enumerate(zip(owner, seqs)):
        if len(ids):
            out[i] += per_sentence[row]
            counts[i] += 1
    empty = [i for i in range(len(docs)) if counts[i] == 0]
    if empty:
        log.warning("%s without any sentence: zero vectors", name_items(empty))
    return out / np.maximum(counts, 1)[:, None].astype(np.float32)
