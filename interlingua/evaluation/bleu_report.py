"""`interlingua evaluate bleu`: a model's BLEU matrix on a split (`bleu_matrix`) written as files, and with a pivot
also its zero-shot directions translated directly beside it (`pivot_comparison`)."""
from __future__ import annotations

import json
from pathlib import Path

from interlingua.atomic_files import write_text_atomic
from interlingua.evaluation.bleu_matrix import bleu_matrix, split_label, write_matrix
from interlingua.evaluation.pivot_comparison import compare_with_pivot
from interlingua.evaluation.registry import Report
from interlingua.inference.api import load


def evaluate_bleu(checkpoint: str | Path, corpus: str | Path | None = None, split: str = "test_2016_flickr",
                  beam_size: int = 1, batch_size: int = 64, pivot: str | None = None, max_sentences: int | None = None,
                  out_dir: str | Path | None = None, device: str = "cpu", precision: str = "fp32",
                  no_repeat_ngram: int = 0) -> Report:
    """`interlingua evaluate bleu`: the checkpoint's matrix on `split` of `corpus` (default: the corpus it
    was trained on), written as `bleu_<split>_beam<N>[_pivot-<L>][_norepeat<N>]` .md/.json/.png under `out_dir`
    (default: `<checkpoint folder>/eval`; another corpus's split is named `<corpus name>_<split>`:
    `bleu_matrix.split_label`); `no_repeat_ngram` as in `Model.translate`."""
    checkpoint = Path(checkpoint)
    model = load(checkpoint, device, precision)
    corpus = corpus or model.config.corpus
    res = bleu_matrix(model, corpus, split=split, beam_size=beam_size,
                      batch_size=batch_size, pivot=pivot, max_sentences=max_sentences, no_repeat_ngram=no_repeat_ngram)
    out = Path(out_dir or checkpoint.parent / "eval")
    stem = (f"bleu_{split_label(model.config.corpus, corpus, split)}_beam{beam_size}"
            + (f"_pivot-{pivot}" if pivot else "") + (f"_norepeat{no_repeat_ngram}" if no_repeat_ngram else ""))
    title = f"{checkpoint.name} on {split}" + (f", no {no_repeat_ngram}-gram twice" if no_repeat_ngram else "")
    files = write_matrix(res, out, stem, title=title)
    markdown, data = res.to_markdown(title), res.to_json()
    if pivot and res.zero_shot:  # the zero-shot directions also directly: the comparison that matters
        direct = bleu_matrix(model, corpus, split=split, beam_size=beam_size, batch_size=batch_size,
                             max_sentences=max_sentences, pairs=list(res.zero_shot), no_repeat_ngram=no_repeat_ngram)
        comparison = compare_with_pivot(direct, res, cased=not model.config.preprocess.lowercase)
        markdown += "\n" + comparison.to_markdown()
        data["zero_shot_vs_pivot"] = comparison.to_json()
        write_text_atomic(out / f"{stem}.md", markdown)
        write_text_atomic(out / f"{stem}.json", json.dumps(data, indent=1))
    return Report(markdown, data, files, result=res)


def report_bleu(model: str, corpus: str | None, split: str, beam: int, pivot: str | None, batch_size: int,
                max_sentences: int | None, no_repeat_ngram: int, out: str | None, device: str,
                precision: str) -> Report:
    """`interlingua evaluate bleu` (`registry.EVALUATIONS`): the options as the command line gives them."""
    return evaluate_bleu(model, corpus=corpus, split=split, beam_size=beam, batch_size=batch_size, pivot=pivot,
                         max_sentences=max_sentences, out_dir=out, device=device, precision=precision,
                         no_repeat_ngram=no_repeat_ngram)
