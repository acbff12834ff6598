"""Published Multi30k test_2016_flickr BLEU of the attention-bridge papers (000, Table 1).

Keyed by setting, then source, then target. Used to print the paper's number beside ours.
"""
from __future__ import annotations

_ORDER = ["en", "de", "cs", "fr"]


def _table(rows: dict[str, list[float | None]]) -> dict[str, dict[str, float]]:
    """rows: source -> scores for targets in the paper's column order (en, de, cs, fr)."""
    return {s: {t: v for t, v in zip(_ORDER, vals) if v is not None} for s, vals in rows.items()}


TABLE1: dict[str, dict[str, dict[str, float]]] = {
    "bilingual_nobridge": _table({
        "en": [None, 36.78, 28.00, 55.96], "de": [39.00, None, 23.44, 38.22],
        "cs": [35.89, 28.98, None, 36.44], "fr": [49.54, 32.92, 25.98, None]}),
    "bilingual": _table({
        "en": [None, 35.85, 27.10, 53.03], "de": [38.19, None, 23.97, 37.40],
        "cs": [36.41, 27.28, None, 36.41], "fr": [48.93, 31.70, 25.96, None]}),
    "pivot_en": _table({
        "en": [None, 37.85, 29.51, 57.87], "de": [39.39, None, 0.35, 0.83],
        "cs": [37.20, 0.65, None, 1.02], "fr": [48.49, 0.60, 0.30, None]}),
    "pivot_en_mono": _table({
        "en": [None, 38.92, 30.27, 57.87], "de": [40.17, None, 19.50, 26.46],
        "cs": [37.30, 22.13, None, 22.80], "fr": [50.41, 25.96, 20.09, None]}),
    "m2m": _table({
        "en": [None, 37.70, 29.67, 55.78], "de": [40.68, None, 26.78, 41.07],
        "cs": [38.42, 31.07, None, 40.27], "fr": [49.92, 34.63, 26.92, None]}),
    "m2m_mono": _table({
        "en": [None, 38.48, 30.47, 57.35], "de": [41.82, None, 26.90, 41.49],
        "cs": [39.58, 31.51, None, 40.87], "fr": [50.94, 35.25, 28.80, None]}),
}


def paper_bleu(setting: str, src: str, tgt: str) -> float | None:
    return TABLE1.get(setting, {}).get(src, {}).get(tgt)
