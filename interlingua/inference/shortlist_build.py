"""Build a model's lexical shortlist (`interlingua.data.shortlist`) from the training bitext of its corpus.

The pairs are read from the corpus's `train` split (the one the model's config names, or another
corpus YAML), tokenised exactly as the model reads text (`tokenize_inputs`: normalisation,
truncation; on both sides, so a target language needs no encoder), for every direction the model
was trained on; streamed in chunks, so a corpus of millions of lines is counted without holding
its text, and in one pass over each file group, each language tokenised once for all the directions
that read it.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from interlingua.config import PreprocessConfig
from interlingua.data.corpus import load_corpus, stream_group
from interlingua.data.inputs import tokenize_inputs
from interlingua.data.shortlist import DEFAULT_FREQUENT, DEFAULT_PER_TOKEN, CooccurrenceCounter, Shortlist
from interlingua.data.vocab import Vocab
from interlingua.errors import DataError
from interlingua.inference.api import Model

log = logging.getLogger(__name__)

CHUNK_ROWS = 20_000


def _tokenized(lines: list[str], vocab: Vocab, preprocess: PreprocessConfig) -> list[np.ndarray | None]:
    """Each line's ids as the model reads it; None for a blank line (its pairs are not counted)."""
    kept = [i for i, line in enumerate(lines) if line.strip()]
    out: list[np.ndarray | None] = [None] * len(lines)
    for i, ids in zip(kept, tokenize_inputs([lines[i] for i in kept], vocab, preprocess)):
        out[i] = ids
    return out


def _count(model: Model, corpus_path: Path, directions: Sequence[tuple[str, str]], max_pairs: int | None,
           progress: bool) -> dict[tuple[str, str], CooccurrenceCounter]:
    """Every direction's counts in one pass over each file group of the train split: each language of a
    chunk is tokenised once, whatever number of directions read it; at most `max_pairs` pairs a direction."""
    counters = {(s, t): CooccurrenceCounter(len(model.vocabs[s]), len(model.vocabs[t])) for s, t in directions}
    seen = dict.fromkeys(counters, 0)

    def wants(d: tuple[str, str]) -> bool:
        return max_pairs is None or seen[d] < max_pairs

    with tqdm(desc="shortlist", unit="line", disable=not progress) as bar:
        for group in load_corpus(corpus_path).groups("train"):
            wanted = [d for d in counters if d[0] in group.files and d[1] in group.files and wants(d)]
            langs = sorted({lang for d in wanted for lang in d})
            for chunk in (stream_group(group, langs, CHUNK_ROWS) if wanted else ()):
                ids = {lang: _tokenized(chunk[lang], model.vocabs[lang], model.preprocess) for lang in langs}
                for d in wanted:
                    for a, b in zip(ids[d[0]], ids[d[1]]):
                        if not wants(d):
                            break
                        if a is not None and b is not None:
                            counters[d].add(a, b)
                            seen[d] += 1
                bar.update(len(chunk[langs[0]]))
                if not any(wants(d) for d in wanted):
                    break
    return counters


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
    directions = model.languages.trained
    tables = {}
    for (src, tgt), counter in _count(model, corpus_path, directions, max_pairs, progress).items():
        try:
            tables[(src, tgt)] = counter.table(per_token, frequent)
        except DataError:
            log.warning("no training pairs for %s->%s in %s: that direction decodes over the whole vocabulary",
                        src, tgt, corpus_path)
    if not tables:
        raise DataError(f"{corpus_path} has no training pairs for any direction of the model "
                        f"({', '.join(f'{s}->{t}' for s, t in directions)})")
    return Shortlist(tables, per_token, frequent)
