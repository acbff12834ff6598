"""Translation throughput and quality of a checkpoint on Multi30k test_2016_flickr.

Run: python bench/translate_speed.py --model runs/.../best.pt --src en --tgt de [--reps 3]
Prints (and appends to --out) sentences/s for greedy and beam 5 (best of --reps, model
loading excluded) and lowercased BLEU / chrF of each output.
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from _results import append_result  # noqa: E402
from interlingua.data.corpus import read_lines  # noqa: E402
from interlingua.inference.translator import Translator  # noqa: E402
from interlingua.training.validation import corpus_scores  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--src", default="en")
    ap.add_argument("--tgt", default="de")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--beams", default="1,5")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(2)
    src = read_lines(Path(args.data) / f"test_2016_flickr.{args.src}.gz")
    ref = read_lines(Path(args.data) / f"test_2016_flickr.{args.tgt}.gz")
    tr = Translator(args.model)
    for beam in [int(b) for b in args.beams.split(",")]:
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            hyps = tr.translate(src, args.src, args.tgt, beam_size=beam, batch_size=64)
            times.append(time.perf_counter() - t0)
        bleu, chrf = corpus_scores(hyps, ref)
        res = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{platform.node()} {platform.machine()}",
               "model": args.model, "direction": f"{args.src}-{args.tgt}", "beam": beam,
               "sent_per_s_best": round(len(src) / min(times), 1), "seconds": [round(t, 2) for t in times],
               "bleu_lc": round(bleu, 2), "chrf_lc": round(chrf, 2), "command": " ".join(sys.argv)}
        append_result(args.out, res)


if __name__ == "__main__":
    main()
