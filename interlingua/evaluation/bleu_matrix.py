"""The full source x target BLEU / chrF matrix of a model on a split (`interlingua evaluate bleu`: `bleu_report`).

Hypotheses are detokenised text scored against the raw reference files with lowercased
sacreBLEU (13a), the papers' signature, and also cased (paper 004 reports cased BLEU); directions
never trained are marked zero-shot. Each direction's off-target rate (the share of outputs a
language identifier does not find in the requested language) stands beside the identifier's
accuracy on that language's references, its ceiling. With a pivot, directions from or into the
pivot language are translated directly, the others through it.
"""
from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sacrebleu.metrics import BLEU, CHRF

from interlingua.atomic_files import write_text_atomic
from interlingua.data import language_id
from interlingua.data.corpus import load_corpus, read_group
from interlingua.data.directions import Direction
from interlingua.errors import DataError
from interlingua.evaluation.plots import plot_score_matrix
from interlingua.inference.api import Model

BLEU_SIGNATURE_NOTE = "sacreBLEU, lowercased, tokenize 13a (signature nrefs:1|case:lc|eff:no|tok:13a|smooth:exp)"


@dataclass
class MatrixResult:
    split: str
    languages: list[str]
    bleu: dict[str, dict[str, float]]
    chrf: dict[str, dict[str, float]]
    zero_shot: list[tuple[str, str]]
    beam_size: int
    pivot: str | None
    seconds: dict[str, float] = field(default_factory=dict)
    signature: str = ""
    bleu_cased: dict[str, dict[str, float]] = field(default_factory=dict)
    off_target: dict[str, dict[str, float]] = field(default_factory=dict)
    """Percent of outputs of each direction not identified as the target language."""
    lid_ceiling: dict[str, float] = field(default_factory=dict)
    """Percent of each language's reference sentences the identifier gets right."""
    outputs: dict[Direction, list[str]] = field(default_factory=dict, repr=False, compare=False)
    """Each direction's translations, in the order of `references` (kept in memory for paired tests between
    two results on the same split: `pivot_comparison`; not written to the JSON)."""
    references: dict[Direction, list[str]] = field(default_factory=dict, repr=False, compare=False)
    """Each direction's reference translations (the non-blank aligned lines of the split)."""

    def to_json(self) -> dict:
        return {"split": self.split, "languages": self.languages, "bleu": self.bleu, "chrf": self.chrf,
                "zero_shot": [f"{s}-{t}" for s, t in self.zero_shot], "beam_size": self.beam_size,
                "pivot": self.pivot, "seconds": self.seconds, "signature": self.signature,
                "bleu_cased": self.bleu_cased, "off_target": self.off_target, "lid_ceiling": self.lid_ceiling}

    @classmethod
    def from_json(cls, data: dict) -> MatrixResult:
        """The inverse of `to_json` (results written before the cased/off-target fields read too)."""
        keys = ("split", "languages", "bleu", "chrf", "beam_size", "pivot", "seconds", "signature",
                "bleu_cased", "off_target", "lid_ceiling")
        return cls(**{k: data[k] for k in keys if k in data},
                   zero_shot=[tuple(x.split("-")) for x in data.get("zero_shot", [])])

    def mean(self, table: str, zero_shot: bool, where: Callable[[str, str], bool] | None = None) -> float | None:
        """Mean of `table` ('bleu', 'bleu_cased', 'chrf', 'off_target') over the zero-shot or the trained
        directions (only those (source, target) for which `where` holds, when given)."""
        zs = set(self.zero_shot)
        values = [v for s, row in getattr(self, table).items() for t, v in row.items()
                  if ((s, t) in zs) == zero_shot and v is not None and (where is None or where(s, t))]
        return sum(values) / len(values) if values else None

    def to_markdown(self, title: str = "", cased: bool | None = None) -> str:
        """The tables as markdown; `cased` True or False keeps only that BLEU (the one that matches how the
        model was trained: a lowercased model's cased BLEU says nothing of it), None both."""
        zs = set(self.zero_shot)
        out = [f"# {title or 'BLEU matrix'}", "",
               f"Split `{self.split}`, beam {self.beam_size}{', pivot ' + self.pivot if self.pivot else ''}. "
               f"{self.signature}. Rows: source, columns: target; *italic* = zero-shot (direction never trained).", ""]
        tables = [("BLEU (lowercased)", self.bleu if cased is not True else {}),
                  ("BLEU (cased)", self.bleu_cased if cased is not False else {}), ("chrF", self.chrf),
                  ("Off-target rate (%)", self.off_target)]
        for name, table in ((n, t) for n, t in tables if t):
            out += [f"## {name}", "", "| src \\ tgt | " + " | ".join(self.languages) + " |",
                    "|---" * (len(self.languages) + 1) + "|"]
            for s in self.languages:
                cells = []
                for t in self.languages:
                    v = table.get(s, {}).get(t)
                    cells.append("-" if v is None else (f"*{v:.2f}*" if (s, t) in zs else f"{v:.2f}"))
                out.append(f"| **{s}** | " + " | ".join(cells) + " |")
            out.append("")
        if self.lid_ceiling:
            out += ["Language identifier (langid.py, restricted to the model's languages) on the references, "
                    "% identified correctly: "
                    + ", ".join(f"{k} {v:.1f}" for k, v in sorted(self.lid_ceiling.items())), ""]
        return "\n".join(out)


def load_split_texts(corpus_path: Path, split: str, max_sentences: int | None = None) -> list[dict[str, list[str]]]:
    corpus = load_corpus(corpus_path)
    return [read_group(g, limit=max_sentences) for g in corpus.groups(split)]


def parallel_texts(groups: list[dict[str, list[str]]], src: str, tgt: str) -> tuple[list[str], list[str]]:
    srcs, refs = [], []
    for g in groups:
        if src in g and tgt in g:
            for a, b in zip(g[src], g[tgt]):
                if a.strip() and b.strip():
                    srcs.append(a)
                    refs.append(b)
    return srcs, refs


def bleu_matrix(model: Model, corpus_path: str | Path, split: str = "test_2016_flickr", beam_size: int = 1,
                length_penalty: float = 1.0, batch_size: int = 64, pivot: str | None = None,
                languages: list[str] | None = None, max_sentences: int | None = None, progress: bool = True,
                pairs: list[tuple[str, str]] | None = None, no_repeat_ngram: int = 0) -> MatrixResult:
    """Translate and score every direction of the model among `languages` (or only `pairs`) on `split`
    (`no_repeat_ngram`: `Model.translate`'s)."""
    groups = load_split_texts(Path(corpus_path), split, max_sentences)
    known = model.languages
    sources, targets = set(known.sources), set(known.targets)
    langs = sorted(languages or sources | targets)
    trained = set(known.trained)
    bleu: dict[str, dict[str, float]] = {}
    chrf: dict[str, dict[str, float]] = {}
    zero_shot, seconds = [], {}
    bleu_metric, chrf_metric = BLEU(lowercase=True, tokenize="13a"), CHRF(lowercase=True)
    cased_metric = BLEU(tokenize="13a")
    bleu_cased: dict[str, dict[str, float]] = {}
    off_target: dict[str, dict[str, float]] = {}
    identify = language_id.supported(langs)
    wanted = set(pairs) if pairs is not None else None
    signature = ""
    outputs: dict[Direction, list[str]] = {}
    references: dict[Direction, list[str]] = {}
    for s in langs:
        for t in langs:
            if s == t or s not in sources or t not in targets or (wanted is not None and (s, t) not in wanted):
                continue
            if pivot and (pivot not in targets or pivot not in sources):
                raise DataError(f"pivot '{pivot}' needs both an encoder and a decoder in the model")
            srcs, refs = parallel_texts(groups, s, t)
            if not srcs:
                continue
            t0 = time.perf_counter()
            hyps = model.translate(srcs, s, t, beam=beam_size, length_penalty=length_penalty, batch_size=batch_size,
                                   pivot=pivot if pivot not in (s, t) else None, progress=progress,
                                   no_repeat_ngram=no_repeat_ngram)
            seconds[f"{s}-{t}"] = round(time.perf_counter() - t0, 2)
            outputs[s, t], references[s, t] = hyps, refs
            b = bleu_metric.corpus_score(hyps, [refs])
            signature = str(bleu_metric.get_signature())
            bleu.setdefault(s, {})[t] = round(b.score, 2)
            chrf.setdefault(s, {})[t] = round(chrf_metric.corpus_score(hyps, [refs]).score, 2)
            bleu_cased.setdefault(s, {})[t] = round(cased_metric.corpus_score(hyps, [refs]).score, 2)
            if identify:
                off_target.setdefault(s, {})[t] = round(language_id.off_target_rate(hyps, t, langs), 2)
            if (s, t) not in trained:
                zero_shot.append((s, t))
    if not bleu:
        raise DataError(f"split '{split}' has no parallel text for any direction of the model ({', '.join(langs)})")
    ceiling = {}
    if identify:
        for lang in sorted({t for row in bleu.values() for t in row}):
            refs = [line for g in groups if lang in g for line in g[lang] if line.strip()]
            ceiling[lang] = round(100.0 - language_id.off_target_rate(refs, lang, langs), 2)
    return MatrixResult(split, langs, bleu, chrf, zero_shot, beam_size, pivot, seconds, signature,
                        bleu_cased, off_target, ceiling, outputs, references)


def split_label(model_corpus: str | Path, corpus: str | Path, split: str) -> str:
    """How result files name a split: the split alone on the corpus the model was trained on, `<corpus name>_<split>`
    on any other, so that scoring another corpus's `val` never replaces the files of the model's own."""
    if Path(corpus).resolve() == Path(model_corpus).resolve():
        return split
    return f"{re.sub(r'[^A-Za-z0-9.-]+', '-', load_corpus(corpus).name).strip('-') or 'corpus'}_{split}"


def write_matrix(result: MatrixResult, out_dir: str | Path, stem: str = "bleu", title: str = "") -> list[Path]:
    """Markdown + JSON + BLEU and chrF heat maps."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md, js = out_dir / f"{stem}.md", out_dir / f"{stem}.json"
    write_text_atomic(md, result.to_markdown(title))
    write_text_atomic(js, json.dumps(result.to_json(), indent=1))
    zs = set(result.zero_shot)
    pngs = []
    for name, table in (("bleu", result.bleu), ("chrf", result.chrf), ("off_target", result.off_target)):
        if not table:
            continue
        png = out_dir / f"{stem}_{name}.png"
        plot_score_matrix(table, result.languages, zs,
                          f"{ {'bleu': 'BLEU', 'chrf': 'chrF', 'off_target': 'Off-target %'}[name]} on {result.split}",
                          png)
        pngs.append(png)
    return [md, js, *pngs]
