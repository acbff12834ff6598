"""The translation half of `interlingua evaluate crosslingual`: BLEU and off-target rates of every
trained (non-copy) and zero-shot direction, and each zero-shot direction again through a pivot.

Scoring is bleu_matrix.py's (sacreBLEU lowercased and cased, chrF, off-target rates with
data/language_id.py); this module only picks the directions and the pivots and flattens the matrices
into one dict per direction. A zero-shot direction goes through the preferred pivot where both legs
were trained, else through the model's own choice (`Languages.pivot`), else it has no pivot score.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from interlingua.data.directions import Direction
from interlingua.evaluation.bleu_matrix import MatrixResult, bleu_matrix
from interlingua.evaluation.pivot_comparison import compare_with_pivot
from interlingua.inference.api import Languages, Model

log = logging.getLogger(__name__)

SCORES = ("bleu", "bleu_cased", "chrf", "off_target")
"""MatrixResult tables copied per direction (pivot scores get the prefix `pivot_`)."""


def translated_directions(languages: Languages) -> list[Direction]:
    """Trained directions other than copies (A -> A), then the zero-shot ones."""
    return [(s, t) for s, t in languages.trained if s != t] + list(languages.zero_shot)


def pivot_for(languages: Languages, src: str, tgt: str, preferred: str | None) -> str | None:
    """`preferred` where src -> preferred and preferred -> tgt were both trained, else `Languages.pivot`."""
    done = set(languages.trained)
    if preferred and preferred not in (src, tgt) and (src, preferred) in done and (preferred, tgt) in done:
        return preferred
    return languages.pivot(src, tgt)


def pivot_routes(languages: Languages, preferred: str | None) -> dict[Direction, str | None]:
    """The pivot of each zero-shot direction; one warning names the directions that could not use `preferred`."""
    routes = {d: pivot_for(languages, *d, preferred) for d in languages.zero_shot}
    moved = [f"{s}->{t}" for (s, t), p in routes.items() if preferred not in (None, s, t) and p != preferred]
    if moved:
        log.warning("pivot '%s' lacks a trained leg for %s: the model's own pivot is used there, if any "
                    "(the report names each direction's pivot)", preferred, ", ".join(moved))
    return routes


def _cells(result: MatrixResult, src: str, tgt: str, prefix: str = "") -> dict[str, float | None]:
    return {prefix + name: getattr(result, name).get(src, {}).get(tgt) for name in SCORES}


def translation_scores(model: Model, corpus: str | Path, split: str, *, beam: int = 1, pivot: str | None = "en",
                       max_sentences: int | None = None, batch_size: int = 64, progress: bool = True,
                       no_repeat_ngram: int = 0) -> tuple[dict[Direction, dict], dict[str, float]]:
    """{(src, tgt): route, bleu, bleu_cased, chrf, off_target, pivot, pivot_bleu, ..., pivot_p_value} for every
    translated direction (pivot fields None for supervised ones and where no pivot has two trained legs;
    `pivot_p_value`: the paired bootstrap test of direct against pivot in the BLEU the model is read in), and the
    language identifier's accuracy on each target language's references (the off-target rates' ceiling)."""
    languages = model.languages
    directions = translated_directions(languages)
    if not directions:
        return {}, {}
    settings: dict[str, Any] = dict(beam_size=beam, batch_size=batch_size, max_sentences=max_sentences,
                                    progress=progress, no_repeat_ngram=no_repeat_ngram)
    direct = bleu_matrix(model, corpus, split, pairs=directions, **settings)
    no_pivot = {"pivot": None, **dict.fromkeys(f"pivot_{name}" for name in SCORES), "pivot_p_value": None}
    cased = not model.config.preprocess.lowercase
    rows = {d: {"route": languages.route(*d), **_cells(direct, *d), **no_pivot} for d in directions}
    routes = pivot_routes(languages, pivot)
    for via in sorted({p for p in routes.values() if p}):
        pairs = [d for d, p in routes.items() if p == via]
        result = bleu_matrix(model, corpus, split, pivot=via, pairs=pairs, **settings)
        tested = {(r.src, r.tgt): r.p_value for r in compare_with_pivot(direct, result, cased).rows}
        for d in pairs:
            rows[d].update(pivot=via, **_cells(result, *d, prefix="pivot_"), pivot_p_value=tested.get(d))
    return rows, direct.lid_ceiling
