"""Zero-shot with the source language's mean offset taken out of the shared layer, at inference only.

Run: python bench/zero_shot_offset.py CHECKPOINT [CHECKPOINT ...] [--split val] [--pool 3000]
     [--data data/multi30k] [--out bench/results/zero_resource.jsonl]

The question: the bridge's output M (k rows of d) of German sentences sits, on average, elsewhere than that of
English ones (a per-language offset, which the cross-lingual report also probes), and the French decoder was
trained on English and French memories only. Does moving a German memory by the mean difference lift de->fr
without any training (so no supervised BLEU lost)? For each model, direction (de->fr, fr->de) and goal (the
English mean, the target language's, their average) at strengths a = 0.5 and 1: memory + a (mean_goal -
mean_source), the means per bridge row over the first --pool training sentences of each language, then greedy
`Model.generate`; beside them the direct zero-shot and the pivot through English of the same model. Scored with
cased sacreBLEU (13a) on the --split references: a dev split, where a variant is chosen before any test set is
read. One line per model to --out.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sacrebleu  # noqa: E402
import torch  # noqa: E402
from _results import append_result  # noqa: E402

from interlingua import load  # noqa: E402
from interlingua.data.corpus import read_lines  # noqa: E402
from interlingua.inference.representation import Representation  # noqa: E402

DIRECTIONS = (("de", "fr"), ("fr", "de"))
STRENGTHS = (0.5, 1.0)


def mean_memory(rep: Representation) -> torch.Tensor:
    """(k, d): the mean over sentences of each bridge row (every sentence has the same k rows)."""
    return torch.stack([m.float() for m in rep.memory]).mean(0)


def shifted(rep: Representation, shift: torch.Tensor) -> Representation:
    return dataclasses.replace(rep, memory=tuple(m + shift.to(m.dtype) for m in rep.memory))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoints", nargs="+")
    ap.add_argument("--split", default="val")
    ap.add_argument("--pool", type=int, default=3000, help="training sentences per language for the means")
    ap.add_argument("--data", default=str(ROOT / "data" / "multi30k"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "zero_resource.jsonl"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    data = Path(args.data)

    def lines(split: str, lang: str) -> list[str]:
        return read_lines(data / f"{split}.{lang}.gz")

    for checkpoint in args.checkpoints:
        model = load(checkpoint)
        means = {lang: mean_memory(model.represent(lines("train", lang)[:args.pool], lang))
                 for lang in ("de", "en", "fr")}
        bleu: dict[str, float] = {}
        for src, tgt in DIRECTIONS:
            sources, refs = lines(args.split, src), lines(args.split, tgt)
            rep = model.represent(sources, src)

            def score(hyps: list[str], refs: list[str] = refs) -> float:
                return round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)

            bleu[f"{src}-{tgt} direct"] = score(model.generate(rep, tgt))
            bleu[f"{src}-{tgt} pivot"] = score(model.translate(sources, src, tgt, pivot="en"))
            for goal in ("en", tgt, "mean"):
                target = (means["en"] + means[tgt]) / 2 if goal == "mean" else means[goal]
                for a in STRENGTHS:
                    moved = shifted(rep, a * (target - means[src]))
                    bleu[f"{src}-{tgt} to {goal} a{a:g}"] = score(model.generate(moved, tgt))
        offsets = {f"{a}-{b}": round(float((means[a] - means[b]).norm()), 2)
                   for a, b in (("de", "en"), ("fr", "en"), ("de", "fr"))}
        append_result(args.out, {"kind": "zero_shot_offset", "checkpoint": checkpoint, "split": args.split,
                                 "pool": args.pool, "bleu_cased": bleu, "offset_norms": offsets,
                                 "mean_norms": {lang: round(float(m.norm()), 2) for lang, m in means.items()}})


if __name__ == "__main__":
    main()
