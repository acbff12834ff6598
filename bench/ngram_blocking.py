"""What blocking repeated n-grams when decoding (`Model.translate(no_repeat_ngram=N)`) does to supervised, zero-shot
and pivot BLEU of a de/en/fr model with de<->fr never paired (the demo's).

Run: python bench/ngram_blocking.py CHECKPOINT [CHECKPOINT ...] [--split val] [--ngrams 0,3,4] [--beam 1]
     [--data data/multi30k] [--out bench/results/ngram_blocking.jsonl]

For each model and N: translation (greedy, or --beam) of every direction of the --split, the zero-shot ones also
through English (both legs blocked alike), cased sacreBLEU (13a). One line per model and N: each direction's BLEU,
the supervised mean and zero-shot minus pivot (mean of de->fr and fr->de). Choose N on a dev split (`val`) before
reading a test set.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sacrebleu  # noqa: E402
import torch  # noqa: E402
from _results import append_result  # noqa: E402

from interlingua import load  # noqa: E402
from interlingua.data.corpus import read_lines  # noqa: E402

SUPERVISED = (("de", "en"), ("en", "de"), ("en", "fr"), ("fr", "en"))
ZERO_SHOT = (("de", "fr"), ("fr", "de"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoints", nargs="+")
    ap.add_argument("--split", default="val")
    ap.add_argument("--ngrams", default="0,3,4", help="values of no_repeat_ngram, comma-separated (0: off)")
    ap.add_argument("--data", default=str(ROOT / "data" / "multi30k"), help="Multi30k as `interlingua data` writes it")
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "ngram_blocking.jsonl"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    text = {lang: read_lines(Path(args.data) / f"{args.split}.{lang}.gz") for lang in ("de", "en", "fr")}
    for ckpt in args.checkpoints:
        model = load(ckpt)
        for n in (int(x) for x in args.ngrams.split(",")):
            bleu: dict[str, float] = {}
            for src, tgt in SUPERVISED + ZERO_SHOT:
                hyps = model.translate(text[src], src, tgt, beam=args.beam, no_repeat_ngram=n)
                bleu[f"{src}-{tgt}"] = round(sacrebleu.corpus_bleu(hyps, [text[tgt]]).score, 2)
            for src, tgt in ZERO_SHOT:
                hyps = model.translate(text[src], src, tgt, beam=args.beam, pivot="en", no_repeat_ngram=n)
                bleu[f"{src}-{tgt} pivot"] = round(sacrebleu.corpus_bleu(hyps, [text[tgt]]).score, 2)
            supervised = sum(bleu[f"{s}-{t}"] for s, t in SUPERVISED) / len(SUPERVISED)
            gap = sum(bleu[f"{s}-{t}"] - bleu[f"{s}-{t} pivot"] for s, t in ZERO_SHOT) / len(ZERO_SHOT)
            append_result(args.out, {"bench": "ngram_blocking", "model": ckpt, "split": args.split,
                                     "no_repeat_ngram": n, "beam": args.beam, "bleu": "cased sacreBLEU 13a",
                                     "supervised_mean": round(supervised, 2), "zero_shot_minus_pivot": round(gap, 2),
                                     **bleu, "threads": args.threads})


if __name__ == "__main__":
    main()
