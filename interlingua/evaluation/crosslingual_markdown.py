"""The markdown and the heat maps of a cross-lingual report (`crosslingual_record.CrosslingualReport`)."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from interlingua.evaluation.crosslingual_record import CrosslingualReport
from interlingua.evaluation.plots import plot_score_matrix

VECTOR_COLUMNS = (("retrieval", "retrieval %", 1), ("retrieval_centered", "centred %", 1),
                  ("retrieval_ratio_margin", "ratio margin %", 1),
                  ("retrieval_centered_ratio_margin", "centred ratio margin %", 1),
                  ("margin", "margin", 3), ("margin_centered", "margin centred", 3),
                  ("cos_translation", "cos translation", 3), ("cos_unrelated", "cos unrelated", 3))
TRANSLATION_COLUMNS = (("bleu", "BLEU", 2), ("bleu_cased", "BLEU cased", 2), ("off_target", "off-target %", 1),
                       ("pivot_bleu", "pivot BLEU", 2), ("pivot_bleu_cased", "pivot BLEU cased", 2),
                       ("pivot_off_target", "pivot off-target %", 1))
HEAT_MAPS = (("retrieval", "Top-1 retrieval % (cosine)", 1),
             ("retrieval_centered", "Top-1 retrieval % (centred cosine)", 1),
             ("margin", "Margin: cos(translation) - cos(nearest other)", 2))


def _fmt(value: float | int | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _fmt_at(summary: Mapping[str, float | int | str | None], key: str, digits: int) -> str:
    """`_fmt` of a numeric summary entry (the summary also holds text, e.g. `retrieval_min_pair`)."""
    value = summary[key]
    assert not isinstance(value, str), f"summary[{key!r}] is text, not a number"
    return _fmt(value, digits)


def _triple(summary: dict, key: str, digits: int) -> str:
    """supervised / zero-shot / via pivot means of one translation score."""
    return " / ".join(_fmt(summary[f"{key}_{part}_mean"], digits) for part in ("supervised", "zero_shot", "pivot"))


def summary_lines(report: CrosslingualReport) -> list[str]:
    s = report.summary
    rows = [("top-1 retrieval %, cosine: mean / min over pairs",
             f"{_fmt_at(s, 'retrieval_mean', 1)} / {_fmt_at(s, 'retrieval_min', 1)} ({s['retrieval_min_pair']})"),
            ("top-1 retrieval %, centred cosine: mean / min",
             f"{_fmt_at(s, 'retrieval_centered_mean', 1)} / {_fmt_at(s, 'retrieval_centered_min', 1)}"),
            ("margin (centred)", f"{_fmt_at(s, 'margin_mean', 3)} ({_fmt_at(s, 'margin_centered_mean', 3)})"),
            ("cos to the translation / to an unrelated sentence / to the nearest unrelated",
             " / ".join(_fmt_at(s, k, 3)
                        for k in ("cos_translation_mean", "cos_unrelated_mean", "cos_nearest_unrelated_mean"))),
            ("language probe accuracy % vs chance",
             f"{_fmt_at(s, 'probe_accuracy', 1)} vs {_fmt_at(s, 'probe_chance', 1)}")]
    if report.beam is not None:
        rows += [("BLEU lowercased: supervised / zero-shot / via pivot", _triple(s, "bleu", 2)),
                 ("BLEU cased: supervised / zero-shot / via pivot", _triple(s, "bleu_cased", 2)),
                 ("off-target %: supervised / zero-shot / via pivot", _triple(s, "off_target", 1))]
    return ["| measure | value |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows)]


def matrix_lines(report: CrosslingualReport, cell: Callable[[dict], str]) -> list[str]:
    """A source x target table of the source languages; zero-shot cells in italics."""
    langs, zero_shot = report.languages, report.zero_shot
    out = ["| src \\ tgt | " + " | ".join(langs) + " |", "|---" * (len(langs) + 1) + "|"]
    for s in langs:
        cells = []
        for t in langs:
            row = report.pairs.get(f"{s}-{t}")
            text = cell(row) if row else "-"
            cells.append(f"*{text}*" if (s, t) in zero_shot else text)
        out.append(f"| **{s}** | " + " | ".join(cells) + " |")
    return out


def pair_lines(report: CrosslingualReport) -> list[str]:
    columns = VECTOR_COLUMNS + (TRANSLATION_COLUMNS if report.beam is not None else ())
    head = ["pair", "route", *(c[1] for c in columns)] + (["pivot"] if report.beam is not None else [])
    out = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for key, row in report.pairs.items():
        cells = [key, row["route"] or "-", *(_fmt(row[k], digits) for k, _, digits in columns)]
        out.append("| " + " | ".join(cells + ([row["pivot"] or "-"] if report.beam is not None else [])) + " |")
    return out


def markdown(report: CrosslingualReport) -> str:
    preferred = report.pivot or "the model's own"
    blocking = f", no {report.no_repeat_ngram}-gram twice" if report.no_repeat_ngram else ""
    translation = (f"Translations: beam {report.beam}{blocking}, zero-shot directions also through a pivot (preferred: "
                   f"{preferred}), sacreBLEU 13a lowercased and cased; off-target: outputs "
                   "a language identifier does not find in the target language." if report.beam is not None
                   else "No translation (`--no-bleu`).")
    ceiling = (["", "Language identifier on the references, % right: "
                + ", ".join(f"{k} {v:.1f}" for k, v in sorted(report.lid_ceiling.items()))]
               if report.lid_ceiling else [])
    return "\n".join([
        f"# Cross-lingual report: {report.model}", "",
        f"Split `{report.split}` of {report.corpus}: {report.sentences} sentences in each of "
        f"{', '.join(report.languages)} "
        "(line i of every language is the same sentence; blank and repeated lines left out). Retrieval: top-1 "
        "among all sentences of the other language, plain cosine and after subtracting each language's mean "
        f"vector. Language probe: logistic regression on {report.probe['train_sentences']} sentences per language, "
        f"tested on the other {report.probe['test_sentences']}. {translation} Rows: source, columns: target; "
        "*italic*: zero-shot direction.", "",
        "## Summary", "", *summary_lines(report), *ceiling, "",
        "## Top-1 retrieval % (cosine / centred cosine)", "",
        *matrix_lines(report, lambda r: f"{_fmt(r['retrieval'], 1)} / {_fmt(r['retrieval_centered'], 1)}"), "",
        "## Margin: cos(translation) - cos(nearest other sentence) (centred)", "",
        *matrix_lines(report, lambda r: f"{_fmt(r['margin'], 3)} ({_fmt(r['margin_centered'], 3)})"), "",
        "## Per pair", "", *pair_lines(report), "",
        *([report.pivot_comparison().to_markdown()] if report.beam is not None else []),
        "Seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in report.seconds.items()), ""])


def plot_heat_maps(report: CrosslingualReport, out_dir: Path, stem: str) -> list[Path]:
    """<stem>_<score>.png for retrieval, centred retrieval and margin; zero-shot pairs starred."""
    files = []
    for key, title, digits in HEAT_MAPS:
        png = Path(out_dir) / f"{stem}_{key}.png"
        plot_score_matrix(report.matrix(key), report.languages, report.zero_shot, f"{title} on {report.split}", png,
                          digits=digits)
        files.append(png)
    return files
