"""Dev BLEU by step and training speed of runs that trained side by side (from their metrics.jsonl).

Run: python bench/run_summary.py --run none_0=runs/bench_softmax_sample/none_0 --run ... [--out FILE]
Each run must have been trained with bench/train_logged.py (wall-clock stamps on its records).
Speed is taken only while all the runs were training (from the latest first log line to the
earliest last one), so every run is measured under the same load: the median over its log
intervals inside that window of steps/s and src+tgt tokens/s. One line per run to --out.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _results import append_result  # noqa: E402
from _timing import our_marks  # noqa: E402

from interlingua.records import read_validations  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="append", required=True, metavar="NAME=WORK_DIR")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    runs = {name: Path(folder) for name, folder in (x.split("=", 1) for x in args.run)}
    marks = {name: our_marks(folder / "metrics.jsonl", args.batch_size) for name, folder in runs.items()}
    lo = max(m[0].wall for m in marks.values())
    hi = min(m[-1].wall for m in marks.values())
    for name, folder in runs.items():
        dev = {v.step: None if v.mean_bleu is None else round(v.mean_bleu, 2)
               for v in read_validations(folder / "metrics.jsonl")}
        iv = [(b.step - a.step, b.wall - a.wall, b.tokens) for a, b in zip(marks[name], marks[name][1:])
              if a.wall >= lo and b.wall <= hi and b.wall > a.wall]
        append_result(args.out, {
            "kind": "run", "run": name, "work_dir": str(folder), "dev_bleu_by_step": dev,
            "common_window_s": round(hi - lo, 1), "intervals_in_window": len(iv),
            "steps_per_s_median": round(statistics.median(x[0] / x[1] for x in iv), 4) if iv else None,
            "src_plus_tgt_tokens_per_s_median": round(statistics.median(x[2] / x[1] for x in iv)) if iv else None})


if __name__ == "__main__":
    main()
