"""`interlingua train`, with a wall-clock stamp on every metrics.jsonl record (for the benchmarks).

Run: python bench/train_logged.py CONFIG [--set key=value ...] [--resume]
The training is the same as `interlingua train CONFIG ...` (same trainer, same checkpoints);
only each record of <work_dir>/metrics.jsonl gains `wall` (seconds since the epoch), so our
steps can be timed from log lines exactly as OpenNMT-py's (bench/_timing.py). SIGTERM stops
the run after the current step, validates and saves last.pt, as with `interlingua train`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _timing import StampedTrainer  # noqa: E402

from interlingua.config import load_config  # noqa: E402
from interlingua.training.build import build_run  # noqa: E402


def main() -> None:
    from interlingua import tune_allocator
    tune_allocator()  # as the command line does (INTERLINGUA_ALLOCATOR=default: malloc left as it is)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()
    cfg = load_config(args.config, args.set)
    run = build_run(cfg, resume=args.resume)
    print(f"training precision: {run.precision}", flush=True)  # `auto` resolved, for the benches' records
    result = StampedTrainer(run).train()
    print(f"trained {result.steps} steps; checkpoints: {result.best_checkpoint}, {result.last_checkpoint}")


if __name__ == "__main__":
    main()
