"""Training throughput at the papers' bilingual sizes (en->de, batch 64), ours and OpenNMT-py's, timed alike.

Run: python bench/train_speed.py --steps 300 [--warmup 50] [--bridge none] [--input-feed] [--precision fp32]
     [--softmax-sample 1024] [--peer] [--out bench/results/train_speed.jsonl]

Both sides are timed the same way (bench/_timing.py): wall-clock stamps on log lines every 25
steps, rates between consecutive lines after `--warmup` steps (median of the intervals, and the
whole window), in steps/s, sentences/s and src+tgt tokens/s (source tokens + target tokens with
EOS, as OpenNMT-py counts them), 2 threads each. With --peer, OpenNMT-py's `bench` stage
(`../shared/peers/opennmt.sh`, same steps) runs before and after ours, one after the other, so
ours is bracketed by two peer runs; its step lines are copied to
bench/results/opennmt_train_speed_<date>_<time>_{before,after}.log and each run gets a line in
--out, then the ratio of ours to the mean of the two peer runs is printed and appended.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _peer  # noqa: E402
from _results import append_result  # noqa: E402
from _timing import StampedTrainer, onmt_marks, our_marks, window_rates  # noqa: E402

from interlingua.config import load_config  # noqa: E402
from interlingua.data.download import get_multi30k  # noqa: E402
from interlingua.training.run import build_run  # noqa: E402

THREADS = 2  # the peer's script runs on 2 threads; ours matches it
LOG_EVERY = 25  # the peer's bench config reports every 25 steps


def run_peer(args: argparse.Namespace, tag: str) -> dict:
    env = {**os.environ, "PEER_DIR": args.peer_dir, "BENCH_STEPS": str(args.steps), "DATA": args.data}
    subprocess.run(["bash", str(_peer.PEER_SCRIPT), "bench"], env=env, check=True, stdout=subprocess.DEVNULL)
    log = Path(args.peer_dir) / "results" / "bench_stdout.log"
    stamp = time.strftime("%Y-%m-%d_%H%M")
    raw = _peer.save_step_lines(log, ROOT / "bench" / "results" / f"opennmt_train_speed_{stamp}_{tag}.log")
    rec = {"system": "opennmt-py", "config": "papers' baseline (input feeding)", "bracket": tag, "steps": args.steps,
           "warmup": args.warmup, "threads": THREADS, **window_rates(onmt_marks(log), args.warmup),
           "raw_log": str(raw.relative_to(ROOT))}
    append_result(args.out, rec)
    return rec


def run_ours(args: argparse.Namespace) -> dict:
    corpus = get_multi30k(Path(args.work) / "multi30k", args.data)
    tag = (f"{args.bridge}{'_if' if args.input_feed else ''}_{args.precision}"
           f"{f'_sample{args.softmax_sample}' if args.softmax_sample else ''}")
    cfg = load_config(ROOT / "recipes" / "paper_bilingual_en_de.yaml", [
        f"corpus={corpus}", f"work_dir={Path(args.work) / tag}", f"model.bridge.type={args.bridge}",
        f"model.decoder.input_feed={str(args.input_feed).lower()}", f"train.precision={args.precision}",
        f"train.softmax_sample={args.softmax_sample}", f"train.max_steps={args.steps}",
        f"train.valid_every={args.steps + 1}", f"train.log_every={LOG_EVERY}",
        "preprocess.max_valid_sentences=8", f"train.threads={THREADS}"])
    for f in ("last.pt", "best.pt", "metrics.jsonl"):  # a fresh run; the prepared data stays cached
        (cfg.work_dir / f).unlink(missing_ok=True)
    trainer = StampedTrainer(build_run(cfg))
    t0 = time.time()
    trainer.train()
    wall = time.time() - t0
    rates = window_rates(our_marks(cfg.work_dir / "metrics.jsonl", cfg.train.batch_size), args.warmup)
    from interlingua import precision as precision_rule
    probe = precision_rule.bf16_speedup() if precision_rule.cpu_has_native_bf16() else None
    rec = {"system": "interlingua", "config": tag, "precision": trainer.run.precision,
           "auto_precision": precision_rule.resolve_precision("auto"), "bf16_probe_speedup": probe,
           "steps": args.steps,
           "warmup": args.warmup, "threads": THREADS, **rates,
           "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
           "wall_s": round(wall, 1)}
    append_result(args.out, rec)
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--bridge", default="attention", choices=["attention", "none"])
    ap.add_argument("--input-feed", action="store_true")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--softmax-sample", type=int, default=0, help="train.softmax_sample (0: full softmax)")
    ap.add_argument("--peer", action="store_true", help="bracket ours with two runs of OpenNMT-py's bench stage")
    ap.add_argument("--peer-dir", default=str(_peer.DEFAULT_PEER_DIR))
    ap.add_argument("--work", default=str(ROOT / "runs" / "bench_speed"))
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    ap.add_argument("--out", default=None, help="append the JSON lines here")
    args = ap.parse_args()
    if args.steps < args.warmup + 2 * LOG_EVERY:
        ap.error(f"--steps must leave at least two log intervals after --warmup ({args.warmup + 2 * LOG_EVERY})")

    peers = [run_peer(args, "before")] if args.peer else []
    ours = run_ours(args)
    if args.peer:
        peers.append(run_peer(args, "after"))
        ratio = {}
        for key in ("steps_per_s_median", "steps_per_s_window", "src_plus_tgt_tokens_per_s_median"):
            mean = sum(p[key] for p in peers) / len(peers)
            ratio[f"{key}_vs_peer_mean"] = round(ours[key] / mean, 3)
            ratio[f"{key}_vs_peer_each"] = [round(ours[key] / p[key], 3) for p in peers]
        append_result(args.out, {"system": "interlingua / opennmt-py", "config": ours["config"], **ratio})


if __name__ == "__main__":
    main()
