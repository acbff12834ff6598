"""`interlingua evaluate crosslingual`: one report of how language-agnostic a model is, for any
model kind (per-language encoders + attention bridge, a shared Transformer without bridge, NTDV).

On a multi-way split (line i of every language file is the same sentence), for every ordered pair of
the model's source languages: top-1 translation retrieval with plain and per-language centred cosine
(and both with the ratio margin), the cosine margin between a sentence's translation and the nearest
other sentence, the mean cosine to the translation and to an unrelated sentence
(crosslingual_scores.py); over all of them a linear language probe beside chance; and, unless
switched off, BLEU of every trained and zero-shot direction, the zero-shot ones also through a pivot,
with off-target rates (crosslingual_translation.py). Only `Model.encode`, `Model.translate` and
`Model.languages` are used. The JSON is flat: `summary` (means), `pairs` ("src-tgt" -> one dict of
every score, None where not measured) and `probe`.
"""
from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from interlingua.atomic_files import write_text_atomic
from interlingua.errors import DataError, LanguageError
from interlingua.evaluation.bleu_matrix import load_split_texts, split_label
from interlingua.evaluation.crosslingual_markdown import markdown, plot_heat_maps
from interlingua.evaluation.crosslingual_record import CrosslingualReport
from interlingua.evaluation.crosslingual_scores import MIN_SENTENCES, RETRIEVAL_KEYS, language_probe, pair_vector_scores
from interlingua.evaluation.crosslingual_translation import SCORES, translated_directions, translation_scores
from interlingua.evaluation.registry import Report
from interlingua.inference.api import Languages, Model, load

GAP_KEYS = ("margin", "margin_centered", "cos_translation", "cos_unrelated", "cos_nearest_unrelated")
PAIR_KEYS = ("src", "tgt", "route", *RETRIEVAL_KEYS.values(), *GAP_KEYS, *SCORES,
             "pivot", *(f"pivot_{s}" for s in SCORES), "pivot_p_value")
"""Every per-pair dict has these keys, in this order (None where a score was not measured)."""


# --- the test set ------------------------------------------------------------------------------


def aligned_indices(group: Mapping[str, Sequence[str]], langs: Sequence[str]) -> list[int]:
    """Line numbers that are non-blank in every language and repeat no earlier kept line in any, so that
    each sentence's translation is the one right candidate."""
    seen: dict[str, set[str]] = {lang: set() for lang in langs}
    keep = []
    for i, lines in enumerate(zip(*(group[lang] for lang in langs))):
        if all(line.strip() for line in lines) and not any(line in seen[lang] for lang, line in zip(langs, lines)):
            keep.append(i)
            for lang, line in zip(langs, lines):
                seen[lang].add(line)
    return keep


def multiway_texts(corpus: Path, split: str, langs: Sequence[str], needed: Sequence[str] = (),
                   limit: int | None = None) -> dict[str, list[str]]:
    """The aligned sentences of `langs` in `split` (the first `limit` lines); every language of `langs` and
    `needed` (the translation's targets) must be in the split, `langs` in one multi-way group."""
    groups = load_split_texts(corpus, split, limit)
    present = {lang for g in groups for lang in g}
    missing = [lang for lang in dict.fromkeys([*langs, *needed]) if lang not in present]
    if missing:
        raise LanguageError(f"split '{split}' of {corpus} has no text in the model's language(s) {', '.join(missing)} "
                            f"(it has {', '.join(sorted(present))})")
    group = next((g for g in groups if all(lang in g for lang in langs)), None)
    if group is None:
        raise DataError(f"split '{split}' of {corpus} has no multi-way files holding all of {', '.join(langs)}: "
                        "retrieval needs line i of every language to be the same sentence")
    keep = aligned_indices(group, langs)
    if len(keep) < MIN_SENTENCES:
        raise DataError(f"split '{split}' of {corpus} has {len(keep)} aligned non-blank sentences"
                        f"{f' in its first {limit} lines' if limit else ''}; the report needs at least {MIN_SENTENCES}")
    return {lang: [group[lang][i] for i in keep] for lang in langs}


# --- putting it together -----------------------------------------------------------------------


def _pairs(languages: Languages, vector_scores: Mapping[tuple[str, str], dict],
           translations: Mapping[tuple[str, str], dict]) -> dict[str, dict]:
    """One flat dict per ordered pair with a vector score or a translation, every key of PAIR_KEYS."""
    out = {}
    for s, t in dict.fromkeys([*vector_scores, *translations]):
        route = languages.route(s, t) if s in languages.sources and t in languages.targets else None
        row = {**dict.fromkeys(PAIR_KEYS), "src": s, "tgt": t, "route": route}
        row.update({k: round(v, 2) for k, v in vector_scores.get((s, t), {}).items() if k in RETRIEVAL_KEYS.values()})
        row.update({k: round(v, 4) for k, v in vector_scores.get((s, t), {}).items() if k in GAP_KEYS})
        row.update(translations.get((s, t), {}))
        out[f"{s}-{t}"] = row
    return out


def summarize(pairs: Mapping[str, dict], probe: Mapping[str, float | int]) -> dict[str, float | int | str | None]:
    """Means over pairs of every score (translation scores per route), the weakest retrieval
    pair, the probe beside chance, and how many pairs and directions each mean covers."""
    rows = list(pairs.values())

    def values(key: str, route: str | None = None) -> list[float]:
        return [r[key] for r in rows if r[key] is not None and (route is None or r["route"] == route)]

    def mean(key: str, route: str | None = None) -> float | None:
        found = values(key, route)
        return round(float(np.mean(found)), 4) if found else None

    out: dict[str, float | int | str | None] = {f"{key}_mean": mean(key)
                                                for key in (*RETRIEVAL_KEYS.values(), *GAP_KEYS)}
    weakest = min((r for r in rows if r["retrieval"] is not None), key=lambda r: r["retrieval"], default=None)
    out["retrieval_min"] = weakest["retrieval"] if weakest else None
    out["retrieval_min_pair"] = f"{weakest['src']}-{weakest['tgt']}" if weakest else None
    out["retrieval_centered_min"] = min(values("retrieval_centered"), default=None)
    out.update(probe_accuracy=probe["accuracy"], probe_chance=probe["chance"])
    for score in SCORES:
        out[f"{score}_supervised_mean"] = mean(score, "supervised")
        out[f"{score}_zero_shot_mean"] = mean(score, "zero-shot")
        out[f"{score}_pivot_mean"] = mean(f"pivot_{score}")
    out.update(retrieval_pairs=len(values("retrieval")), supervised_directions=len(values("bleu", "supervised")),
               zero_shot_directions=len(values("bleu", "zero-shot")), pivot_directions=len(values("pivot_bleu")))
    return out


def _open(checkpoint: Model | str | Path, device: str, precision: str) -> tuple[Model, str]:
    if isinstance(checkpoint, Model):
        return checkpoint, "model"
    return load(checkpoint, device, precision), str(checkpoint)


def evaluate_crosslingual(checkpoint: Model | str | Path, corpus: str | Path | None = None,
                          split: str = "test_2016_flickr", *, beam: int = 1, pivot: str | None = "en",
                          limit: int | None = None, bleu: bool = True, batch_size: int = 64, device: str = "auto",
                          precision: str = "fp32", seed: int = 0, progress: bool = True,
                          name: str | None = None, no_repeat_ngram: int = 0) -> CrosslingualReport:
    """The report of the module docstring for `checkpoint` (a loaded Model, or a checkpoint / model folder
    loaded on `device` in `precision`) on `split` of `corpus` (default: the corpus the model was trained on),
    its first `limit` lines; `bleu=False` skips translation. `seed` draws the probe's halves; `no_repeat_ngram` as
    in `Model.translate`."""
    start = time.perf_counter()
    model, default_name = _open(checkpoint, device, precision)
    corpus = Path(corpus or model.config.corpus)
    languages = model.languages
    langs = list(languages.sources)
    if len(langs) < 2:
        raise LanguageError("a cross-lingual report compares two or more source languages; "
                            f"the model reads only {langs}")
    known = sorted(set(languages.sources) | set(languages.targets))
    if bleu and pivot is not None and pivot not in known:  # a typo, not a language some directions lack legs for
        raise LanguageError(f"pivot '{pivot}' is not a language of the model ({', '.join(known)})")
    targets = [t for _, t in translated_directions(languages)] if bleu else []
    texts = multiway_texts(corpus, split, langs, targets, limit)
    seconds: dict[str, float] = {}

    def lap(key: str, since: float) -> float:
        now = time.perf_counter()
        seconds[key] = round(now - since, 2)
        return now

    t = time.perf_counter()
    vectors = {lang: model.encode(texts[lang], lang, batch_size=batch_size)
               for lang in tqdm(langs, desc="sentence vectors", disable=not progress)}
    t = lap("encode", t)
    scores = pair_vector_scores(vectors)
    t = lap("retrieval", t)
    probe = language_probe(vectors, seed)
    t = lap("probe", t)
    translations: dict[tuple[str, str], dict] = {}
    ceiling: dict[str, float] = {}
    if bleu:
        translations, ceiling = translation_scores(model, corpus, split, beam=beam, pivot=pivot, max_sentences=limit,
                                                   batch_size=batch_size, progress=progress,
                                                   no_repeat_ngram=no_repeat_ngram)
        lap("translation", t)
    pairs = _pairs(languages, scores, translations)
    lap("total", start)
    return CrosslingualReport(name or default_name, str(corpus), split, langs, len(texts[langs[0]]),
                              summarize(pairs, probe), pairs, probe, beam if bleu else None, pivot if bleu else None,
                              ceiling, seconds, cased=not model.config.preprocess.lowercase,
                              no_repeat_ngram=no_repeat_ngram if bleu else 0)


def write_crosslingual(report: CrosslingualReport, out_dir: str | Path, stem: str | None = None) -> list[Path]:
    """<stem>.md, <stem>.json and the heat maps <stem>_retrieval.png, _retrieval_centered.png, _margin.png in
    `out_dir`; the stem (default crosslingual_report_<split>) keeps them apart from the sentence suites' files."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = stem or f"crosslingual_report_{report.split}"
    md, js = out / f"{stem}.md", out / f"{stem}.json"
    write_text_atomic(md, markdown(report))
    write_text_atomic(js, json.dumps(report.to_json(), indent=1))
    return [md, js, *plot_heat_maps(report, out, stem)]


def report_crosslingual(model: str, corpus: str | None, split: str, beam: int, pivot: str | None, batch_size: int,
                        max_sentences: int | None, no_repeat_ngram: int, no_bleu: bool, out: str | None, device: str,
                        precision: str) -> Report:
    """`interlingua evaluate crosslingual` (`registry.EVALUATIONS`): the report of `model`, written under `out`
    (default: <model folder>/eval); the pivot defaults to en."""
    loaded = load(model, device, precision)
    report = evaluate_crosslingual(loaded, corpus=corpus, split=split, beam=beam, pivot=pivot or "en",
                                   limit=max_sentences, bleu=not no_bleu, batch_size=batch_size,
                                   no_repeat_ngram=no_repeat_ngram, name=model)
    files = write_crosslingual(report, out or Path(model).parent / "eval",
                               f"crosslingual_report_{split_label(loaded.config.corpus, report.corpus, split)}")
    return Report(markdown(report), report.to_json(), files, result=report)
