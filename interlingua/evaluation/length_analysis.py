"""BLEU by source-length bucket (the papers' Figure 3): where does a fixed-size bridge lose?

Sentences are bucketed by the number of whitespace tokens of the source (as in the papers'
analysis), each bucket scored with lowercased sacreBLEU, for any set of models.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from sacrebleu.metrics import BLEU  # noqa: E402

from interlingua.atomic_files import write_text_atomic
from interlingua.evaluation.registry import Report, named_checkpoints  # noqa: E402
from interlingua.figures import save_figure  # noqa: E402
from interlingua.inference.api import Model, load  # noqa: E402

DEFAULT_EDGES = (10, 20, 30)


def bucket_names(edges: tuple[int, ...]) -> list[str]:
    names, low = [], 1
    for e in edges:
        names.append(f"{low}-{e}")
        low = e + 1
    return names + [f"{low}+"]


def bucket_of(n_tokens: int, edges: tuple[int, ...]) -> int:
    for i, e in enumerate(edges):
        if n_tokens <= e:
            return i
    return len(edges)


@dataclass
class LengthResult:
    buckets: list[str]
    counts: list[int]
    bleu: dict[str, list[float | None]]
    """model name -> BLEU per bucket (None for an empty bucket)."""


def bleu_by_length(models: dict[str, Model], sources: list[str], references: list[str], src: str, tgt: str,
                   edges: tuple[int, ...] = DEFAULT_EDGES, beam_size: int = 1) -> LengthResult:
    names = bucket_names(edges)
    ids = [bucket_of(len(s.split()), edges) for s in sources]
    counts = [ids.count(i) for i in range(len(names))]
    metric = BLEU(lowercase=True, tokenize="13a")
    scores: dict[str, list[float | None]] = {}
    for name, tr in models.items():
        hyps = tr.translate(sources, src, tgt, beam=beam_size)
        row = []
        for b in range(len(names)):
            h = [x for x, i in zip(hyps, ids) if i == b]
            r = [x for x, i in zip(references, ids) if i == b]
            row.append(round(metric.corpus_score(h, [r]).score, 2) if h else None)
        scores[name] = row
    return LengthResult(names, counts, scores)


def write_length_report(result: LengthResult, out_dir: Path, title: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md = [f"# {title}", "",
          "| model | " + " | ".join(f"{b} ({n})" for b, n in zip(result.buckets, result.counts)) + " |",
          "|---" * (len(result.buckets) + 1) + "|"]
    for name, row in result.bleu.items():
        md.append(f"| {name} | " + " | ".join("-" if v is None else f"{v:.2f}" for v in row) + " |")
    write_text_atomic(out_dir / "length_buckets.md", "\n".join(md) + "\n")
    write_text_atomic(out_dir / "length_buckets.json", json.dumps(result.__dict__, indent=1))
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, row in result.bleu.items():
        ax.plot(result.buckets, [float("nan") if v is None else v for v in row], marker="o", label=name)
    ax.set_xlabel("source length (tokens)")
    ax.set_ylabel("BLEU")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    png = save_figure(fig, out_dir / "length_buckets.png")
    return [out_dir / "length_buckets.md", out_dir / "length_buckets.json", png]


def evaluate_lengths(checkpoints: dict[str, Path], src: str, tgt: str, out_dir: Path,
                     corpus: str | Path | None = None, split: str = "test_2016_flickr", beam_size: int = 1,
                     device: str = "cpu") -> tuple[LengthResult, list[Path]]:
    """`interlingua analyze lengths`: BLEU by source length of each named checkpoint on `split` of
    `corpus` (default: the first model's), written as length_buckets.md/.json/.png under `out_dir`."""
    from interlingua.evaluation.bleu_matrix import load_split_texts, parallel_texts
    models = {name: load(path, device) for name, path in checkpoints.items()}
    corpus = corpus or next(iter(models.values())).config.corpus
    sources, references = parallel_texts(load_split_texts(Path(corpus), split), src, tgt)
    result = bleu_by_length(models, sources, references, src, tgt, beam_size=beam_size)
    files = write_length_report(result, out_dir, f"BLEU by source length, {src}->{tgt} ({split})")
    return result, files


def report_lengths(checkpoint: str | None, model: list[str] | None, src: str, tgt: str, split: str,
                   corpus: str | None, beam: int, out: str | None, device: str) -> Report:
    """`interlingua analyze lengths` (`registry.EVALUATIONS`): written under `out` (default: <first model
    folder>/analysis)."""
    models = named_checkpoints(model, "lengths", checkpoint)
    out_dir = Path(out or next(iter(models.values())).parent / "analysis")
    result, files = evaluate_lengths(models, src, tgt, out_dir, corpus=corpus, split=split, beam_size=beam,
                                     device=device)
    return Report(files[0].read_text(encoding="utf-8"), dict(result.__dict__), files, result=result)
