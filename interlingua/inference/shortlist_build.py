"""Build a model's lexical shortlist (`interlingua.data.shortlist`) from the training bitext of its corpus.

The pairs are read from the corpus's `train` split (the one the model's config names, or another
corpus YAML), tokenised exactly as the model reads text (`tokenize_inputs`: normalisation,
truncation; on both sides, so a target language needs no encoder), for every direction the model
was trained on; streamed in chunks, so a corpus of millions of lines is counted without holding
its text.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from tqdm import tqdm

from interlingua.data.corpus import load_corpus, stream_group
from interlingua.data.inputs import tokenize_inputs
from interlingua.data.shortlist import DEFAULT_FREQUENT, DEFAULT_PER_TOKEN, Shortlist, count_table
from interlingua.errors import DataError
from interlingua.inference.api import Model

log = logging.getLogger(__name__)

CHUNK_ROWS = 20_000


def _direction_pairs(model: Model, corpus_path: Path, src: str, tgt: str,
                     max_pairs: int | None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    corpus = load_corpus(corpus_path)
    preprocess = model.preprocess
    seen = 0
    for group in corpus.groups("train"):
        if src not in group.files or tgt not in group.files:
            continue
        for chunk in stream_group(group, [src, tgt], CHUNK_ROWS):
            keep = [i for i, (a, b) in enumerate(zip(chunk[src], chunk[tgt])) if a.strip() and b.strip()]
            src_ids = tokenize_inputs([chunk[src][i] for i in keep], model.vocabs[src], preprocess)
            tgt_ids = tokenize_inputs([chunk[tgt][i] for i in keep], model.vocabs[tgt], preprocess)
            for pair in zip(src_ids, tgt_ids):
                yield pair
                seen += 1
                if max_pairs is not None and seen >= max_pairs:
                    return


def build_shortlist(model: Model, corpus: str | Path | None = None, *, per_token: int = DEFAULT_PER_TOKEN,
                    frequent: int = DEFAULT_FREQUENT, max_pairs: int | None = None,
                    progress: bool = False) -> Shortlist:
    """The shortlist of every direction `model` was trained on that `corpus` (default: the model's own
    corpus YAML) has training pairs for; at most `max_pairs` pairs per direction (None: all)."""
    if per_token < 0 or frequent < 0 or (per_token == 0 and frequent == 0):
        raise ValueError(f"per_token ({per_token}) and frequent ({frequent}) must be >= 0, not both 0")
    corpus_path = Path(corpus) if corpus is not None else Path(model.config.corpus)
    if not corpus_path.is_file():
        raise DataError(f"corpus {corpus_path} not found: give the corpus YAML the model was trained on")
    tables = {}
    directions = model.languages.trained
    for src, tgt in tqdm(directions, desc="shortlist", unit="direction", disable=not progress):
        pairs = _direction_pairs(model, corpus_path, src, tgt, max_pairs)
        try:
            tables[(src, tgt)] = count_table(pairs, len(model.vocabs[src]), len(model.vocabs[tgt]),
                                             per_token, frequent)
        except DataError:
            log.warning("no training pairs for %s->%s in %s: that direction decodes over the whole vocabulary",
                        src, tgt, corpus_path)
    if not tables:
        raise DataError(f"{corpus_path} has no training pairs for any direction of the model "
                        f"({', '.join(f'{s}->{t}' for s, t in directions)})")
    return Shortlist(tables, per_token, frequent)
