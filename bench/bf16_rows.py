"""What a training product's changing row count costs in bf16 on the CPU, and what padding the rows saves.

Run: python bench/bf16_rows.py [--calls 3000] [--threads 2] [--out bench/results/bf16_rows.jsonl]

One linear layer (128 -> 512) runs --calls forward and backward passes at a random row count of 1,500-3,500
(the tokens of a training batch), in four ways, each in a fresh process: `fp32` (MKL), `bf16` under autocast
(oneDNN, a kernel built per new shape), `bf16-padded` (`interlingua.modules.linear.Linear`: the rows rounded
up to a multiple of its ROW_MULTIPLE) and `bf16-fixed` (2,500 rows every call: no new shapes at all). One JSON
line each: seconds for the first 100, 1,000 and all calls, and the process's peak memory.
"""
from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _results import append_result  # noqa: E402

MODES = ("fp32", "bf16", "bf16-padded", "bf16-fixed")


def run_mode(mode: str, calls: int, threads: int) -> dict:
    import torch

    from interlingua.modules.linear import Linear
    torch.set_num_threads(threads)
    layer = Linear(128, 512) if mode == "bf16-padded" else torch.nn.Linear(128, 512)
    rng = random.Random(0)
    marks, start = {}, time.perf_counter()
    for i in range(calls):
        rows = 2500 if mode == "bf16-fixed" else rng.randint(1500, 3500)
        x = torch.randn(rows, 128, requires_grad=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode != "fp32"):
            y = layer(x)
        y.float().sum().backward()
        if i + 1 in (100, 1000, calls):
            marks[str(i + 1)] = round(time.perf_counter() - start, 2)
    return {"mode": mode, "calls": calls, "threads": threads, "seconds_after_calls": marks,
            "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "bf16_rows.jsonl"))
    ap.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # one mode, in this process
    args = ap.parse_args()
    if args.mode:
        print(json.dumps(run_mode(args.mode, args.calls, args.threads)))
        return
    for mode in MODES:
        done = subprocess.run([sys.executable, __file__, "--mode", mode, "--calls", str(args.calls),
                               "--threads", str(args.threads)], capture_output=True, text=True, check=True)
        append_result(args.out, json.loads(done.stdout))


if __name__ == "__main__":
    main()
