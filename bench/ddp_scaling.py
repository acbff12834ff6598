"""Distributed training throughput: the same run on one process and on several (torchrun, gloo or nccl).

Run: python bench/ddp_scaling.py [--recipe recipes/multi30k/cpu/m2m_mono.yaml] [--steps 300]
     [--layouts 1x2,2x1] [--device cpu] [--out bench/results/ddp_scaling.jsonl]

A layout PxT is P processes with T threads each (P = 1: a plain `interlingua train`; P > 1:
`torchrun --standalone --nproc-per-node P`). Every layout trains the recipe for --steps steps
with the same seed, batch and step batches (train.batch_size is the step's batch, split among
the processes), one layout after another, from the same prepared corpus. Reported per layout:
wall clock of the training loop (metrics.jsonl's elapsed_s at the last step, so process start,
data loading and the final validation are left out), steps/s, src+tgt tokens/s, the training
loss of the last log window (the layouts should agree, up to float summation order and dropout
masks) and the ratio of each layout's tokens/s to the first's.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from _results import append_result  # noqa: E402


def run_layout(args: argparse.Namespace, procs: int, threads: int, work: Path) -> dict:
    sets = ["--set", f"work_dir={work}", "--set", f"train.max_steps={args.steps}",
            "--set", "train.valid_every=100000000",
            "--set", f"train.log_every={args.log_every}", "--set", f"train.threads={threads}",
            "--set", "preprocess.max_valid_sentences=100", "--set", f"train.device={args.device}",
            *[x for kv in args.set for x in ("--set", kv)]]
    train = ["-m", "interlingua.cli", "train", args.recipe, *sets]
    cmd = ([sys.executable, *train] if procs == 1 else
           [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(procs),
            "--log-dir", str(work / "torchrun-logs"), *train])
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"layout {procs}x{threads} failed:\n{done.stderr[-3000:]}")
    records = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()]
    train_recs = [r for r in records if r["type"] == "train"]
    last = train_recs[-1]
    seconds = last["elapsed_s"]
    # tokens/s over the whole loop: each window's tokens = tokens_per_s x its seconds; windows tile the run
    window_s = [b["elapsed_s"] - a["elapsed_s"] for a, b in zip([{"elapsed_s": 0.0}, *train_recs], train_recs)]
    tokens = sum(r["tokens_per_s"] * s for r, s in zip(train_recs, window_s))
    return {"processes": procs, "threads_each": threads, "steps": last["step"], "loop_seconds": round(seconds, 2),
            "steps_per_s": round(last["step"] / seconds, 3), "tokens_per_s": round(tokens / seconds, 1),
            "last_window_loss": round(last["loss"], 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipe", default="recipes/multi30k/cpu/m2m_mono.yaml")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--layouts", default="1x2,2x1", help="PxT: P processes of T threads each, comma-separated")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="more config overrides")
    ap.add_argument("--work", default=str(ROOT / "runs" / "bench_ddp_scaling"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "ddp_scaling.jsonl"))
    args = ap.parse_args()
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    layouts = [tuple(int(x) for x in layout.split("x")) for layout in args.layouts.split(",")]
    first = None
    for procs, threads in layouts:
        res = run_layout(args, procs, threads, work / f"{procs}x{threads}")
        first = first or res
        append_result(args.out, {"kind": "ddp_scaling", "recipe": args.recipe, "device": args.device, **res,
                                 "tokens_per_s_vs_first": round(res["tokens_per_s"] / first["tokens_per_s"], 3)})


if __name__ == "__main__":
    main()
