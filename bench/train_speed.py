"""Training throughput at the papers' bilingual sizes (en->de, batch 64), ours and OpenNMT-py's, timed alike.

Run: python bench/train_speed.py --steps 300 [--warmup 50] [--bridge none] [--input-feed] [--precision fp32]
     [--softmax-sample 1024] [--peer] [--out bench/results/train_speed.jsonl]
     [--recipe recipes/multi30k/cpu/zero_resource/zs_baseline_none.yaml] [--threads 1]
     [--compile on|both [--rounds 3] [--cold-compile]]

Both sides are timed the same way (bench/_timing.py): wall-clock stamps on log lines every 25
steps, rates between consecutive lines after `--warmup` steps (median of the intervals, and the
whole window), in steps/s, sentences/s and src+tgt tokens/s (source tokens + target tokens with
EOS, as OpenNMT-py counts them), 2 threads each. With --peer, OpenNMT-py's `bench` stage
(`../shared/peers/opennmt.sh`, same steps) runs before and after ours, one after the other, so
ours is bracketed by two peer runs; its step lines are copied to
bench/results/opennmt_train_speed_<date>_<time>_{before,after}.log and each run gets a line in
--out, then the ratio of ours to the mean of the two peer runs is printed and appended.

`--recipe` times another recipe's model (its corpus replaced by Multi30k, `--bridge` / `--input-feed`
applied only where given). `--compile on` trains with `train.compile: true` (the compile, done before
the first step, is timed apart and excluded from the rates); `--compile both` runs eager and compiled
`--rounds` times each, interleaved (eager first in odd rounds, compiled first in even ones), one line
per run, then a line with the medians and their ratio. `--cold-compile` points inductor at an empty
cache first, so the first compile is a cold one (later ones in the process reuse its kernels).
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _peer  # noqa: E402
from _results import append_result  # noqa: E402
from _timing import StampedTrainer, onmt_marks, our_marks, window_rates  # noqa: E402

from interlingua.config import load_config  # noqa: E402
from interlingua.data.download import get_multi30k  # noqa: E402
from interlingua.training.build import build_run  # noqa: E402
from interlingua.training.compiled import warm_up  # noqa: E402

THREADS = 2  # the peer's script runs on 2 threads; ours matches it
LOG_EVERY = 25  # the peer's bench config reports every 25 steps
DEFAULT_RECIPE = ROOT / "recipes" / "paper_bilingual_en_de.yaml"


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


def run_ours(args: argparse.Namespace, compile: bool = False, round_: int | None = None) -> dict:
    corpus = get_multi30k(Path(args.work) / "multi30k", args.data)
    recipe = Path(args.recipe)
    bridge = args.bridge or ("attention" if recipe == DEFAULT_RECIPE else None)
    name = "" if recipe == DEFAULT_RECIPE else f"{recipe.stem}_"
    tag = (f"{name}{bridge or ''}{'_if' if args.input_feed else ''}_{args.precision}"
           f"{f'_sample{args.softmax_sample}' if args.softmax_sample else ''}")
    model = ([f"model.bridge.type={bridge}"] if bridge else []) + (
        ["model.decoder.input_feed=true"] if args.input_feed else [])
    threads = args.threads
    cfg = load_config(recipe, [
        f"corpus={corpus}", f"work_dir={Path(args.work) / tag}", *model, f"train.precision={args.precision}",
        f"train.softmax_sample={args.softmax_sample}", f"train.max_steps={args.steps}",
        f"train.valid_every={args.steps + 1}", f"train.log_every={LOG_EVERY}", "train.max_minutes=null",
        "train.clock=wall", f"train.compile={str(compile).lower()}",
        "preprocess.max_valid_sentences=8", f"train.threads={threads}"])
    for f in ("last.pt", "best.pt", "metrics.jsonl"):  # a fresh run; the prepared data stays cached
        (cfg.work_dir / f).unlink(missing_ok=True)
    trainer = StampedTrainer(build_run(cfg))
    t0 = time.time()
    run = trainer.run  # the compile, timed apart (train() then finds the graphs made)
    warm_up(run.compiled, run.batches.values(), run.runtime, run.loss_terms(), run.optimizer)
    compile_s = time.time() - t0
    trainer.train()
    wall = time.time() - t0
    rates = window_rates(our_marks(cfg.work_dir / "metrics.jsonl", cfg.train.batch_size), args.warmup)
    from interlingua import precision as precision_rule
    probe = precision_rule.bf16_speedup() if precision_rule.cpu_has_native_bf16() else None
    compiled = trainer.run.compiled
    rec = {"system": "interlingua", "config": tag, "precision": trainer.run.precision,
           "auto_precision": precision_rule.resolve_precision("auto"), "bf16_probe_speedup": probe,
           "steps": args.steps,
           "warmup": args.warmup, "threads": threads, **rates,
           "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
           "wall_s": round(wall, 1)}
    if recipe != DEFAULT_RECIPE:
        where = recipe.resolve()
        rec["recipe"] = str(where.relative_to(ROOT) if where.is_relative_to(ROOT) else where)
    if args.compile != "off":
        rec.update({"compile": compile, "round": round_, "compile_s": round(compile_s, 1) if compile else None,
                    "graphs": compiled.graphs if compiled is not None else None,
                    "compile_failed": compiled.failure if compiled is not None else None})
    append_result(args.out, rec)
    return rec


def compare_compiled(args: argparse.Namespace) -> None:
    """Eager and compiled runs, interleaved, `--rounds` of each; then the medians and their ratio."""
    runs: dict[bool, list[dict]] = {False: [], True: []}
    for r in range(1, args.rounds + 1):
        for compiled in ((False, True) if r % 2 else (True, False)):
            runs[compiled].append(run_ours(args, compile=compiled, round_=r))
    eager, compiled = runs[False], runs[True]
    sides = (("eager", eager), ("compiled", compiled))
    med = {key: {side: statistics.median(x[key] for x in rs) for side, rs in sides}
           for key in ("steps_per_s_median", "steps_per_s_window")}
    ratio = {key: round(med[key]["compiled"] / med[key]["eager"], 3) for key in med}
    append_result(args.out, {
        "system": "interlingua compiled / eager", "config": compiled[0]["config"], "rounds": args.rounds,
        "steps": args.steps, "warmup": args.warmup, "threads": args.threads,
        "steps_per_s_median": {side: round(v, 4) for side, v in med["steps_per_s_median"].items()},
        "compiled_vs_eager": ratio["steps_per_s_median"], "compiled_vs_eager_window": ratio["steps_per_s_window"],
        "compile_s": [x["compile_s"] for x in compiled], "graphs": [x["graphs"] for x in compiled],
        "compile_failed": [x["compile_failed"] for x in compiled],
        "load_average_1min": round(os.getloadavg()[0], 2)})


def main() -> None:
    from interlingua import tune_allocator
    tune_allocator()  # as the command line does (INTERLINGUA_ALLOCATOR=default: malloc left as it is)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--bridge", default=None, choices=["attention", "none"],
                    help="the bridge (default: the recipe's; attention for the papers' bilingual model)")
    ap.add_argument("--recipe", default=str(DEFAULT_RECIPE), help="the recipe whose model is timed")
    ap.add_argument("--threads", type=int, default=THREADS)
    ap.add_argument("--compile", default="off", choices=["off", "on", "both"],
                    help="train.compile: off, on, or both (eager and compiled runs interleaved, --rounds each)")
    ap.add_argument("--rounds", type=int, default=1, help="with --compile both: runs of each")
    ap.add_argument("--cold-compile", action="store_true", help="start with an empty inductor cache")
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

    if args.cold_compile:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-cold-")
    if args.compile == "both":
        if args.peer:
            ap.error("--compile both compares our two modes: leave --peer out")
        compare_compiled(args)
        return
    peers = [run_peer(args, "before")] if args.peer else []
    ours = run_ours(args, compile=args.compile == "on")
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
