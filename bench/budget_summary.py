"""How far each run of the quality bench got in the same wall-clock budget, measured alike for all.

Run (by bench/quality_budget.sh): python bench/budget_summary.py --start EPOCH --budget-s 2400
     --peer-log $PEER_DIR/results/budget_stdout.log --ours bridge=runs/.../attention/metrics.jsonl
     --ours none=runs/.../none/metrics.jsonl [--warmup-s 300] [--out bench/results/quality_budget.jsonl]

All runs were started at --start under the same `timeout`. For each: the last step it logged
within the budget (log lines every 25 steps on both sides), and its steps/s from --warmup-s
after the start to the end of the budget (steps interpolated between log lines at both ends),
from the wall-clock stamps of its log lines (bench/_timing.py). The peer's step lines are
copied to bench/results/opennmt_budget_<date>_<time>.log; one line per run goes to --out,
with the ratio of ours to the peer.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _peer import save_step_lines  # noqa: E402
from _results import append_result  # noqa: E402
from _timing import budget_rates, onmt_marks, our_marks  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--start", type=float, required=True, help="when the runs were started (seconds since the epoch)")
    ap.add_argument("--budget-s", type=float, required=True)
    ap.add_argument("--peer-log", required=True)
    ap.add_argument("--ours", action="append", required=True, metavar="NAME=METRICS_JSONL")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--warmup-s", type=float, default=300)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "quality_budget.jsonl"))
    args = ap.parse_args()

    log = Path(args.peer_log)
    raw = save_step_lines(log, ROOT / "bench" / "results" / f"opennmt_budget_{time.strftime('%Y-%m-%d_%H%M')}.log")
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(args.start))
    common = {"kind": "budget", "budget_s": args.budget_s, "started": started}
    peer = budget_rates(onmt_marks(log), args.start, args.budget_s, args.warmup_s)
    append_result(args.out, {**common, "system": "opennmt-py", **peer, "raw_log": str(raw.relative_to(ROOT))})
    for name, metrics in (x.split("=", 1) for x in args.ours):
        ours = budget_rates(our_marks(metrics, args.batch_size), args.start, args.budget_s, args.warmup_s)
        rate, peer_rate = ours["steps_per_s_after_warmup"], peer["steps_per_s_after_warmup"]
        append_result(args.out, {**common, "system": name, **ours, "metrics": metrics,
                                 "steps_per_s_vs_peer": round(rate / peer_rate, 3) if rate and peer_rate else None})


if __name__ == "__main__":
    main()
