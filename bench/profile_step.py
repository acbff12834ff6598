"""Where a paper-size training step spends its time, and what this CPU's matrix products can do.

Run: python bench/profile_step.py [--bridge attention|none] [--steps 3] [--warmup 3] [--threads 2]
     [--recipe recipes/paper_bilingual_en_de.yaml] [--precision fp32|bf16]
     [--gemm-n 2048] [--bf16-n 512] [--no-step] [--out bench/results/profile_step.jsonl]

Two measurements, one JSON line each:
- "gemm": the fp32 and bf16 rates (GFLOP/s, best of --gemm-reps) of an n x n x n matrix product
  (`torch.mm`), --gemm-n for fp32 and --bf16-n for bf16 (emulated, and so very slow, on CPUs
  without AVX512-BF16 / AMX: keep it small there); this is the roof a step's products run against.
- "step" (unless --no-step): torch.profiler over --steps training steps of
  --recipe (recipes/paper_bilingual_en_de.yaml: en->de, batch 64; its corpus replaced by Multi30k, its
  precision by --precision where given) after --warmup unprofiled ones, the same
  loss / backward / clip / Adam sequence as the trainer's loop: the mean step time, the operators
  with the most self CPU time, and for the operators the profiler counts FLOPs of (matrix
  products, some element-wise operators; not the fused LSTM kernels) their FLOPs and rate.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from _results import append_result  # noqa: E402


def gemm_rate(n: int, dtype: torch.dtype, reps: int) -> float:
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(a, b)  # warm-up
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e9


def training_step(run) -> None:
    """One step as the training loop takes it (interlingua/training/trainer.py), without the bookkeeping."""
    from interlingua.precision import autocast
    tc = run.cfg.train
    batch = run.batches[run.direction_scheduler.next()].next()
    with autocast(run.precision):
        out = run.network.loss(batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out, batch.src_lang,
                                 batch.tgt_lang, tc.penalty_weight, tc.label_smoothing, tc.softmax_sample)
    run.optimizer.zero_grad(set_to_none=True)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(run.network.parameters(), tc.clip_norm)
    run.optimizer.step()


def profile_steps(args: argparse.Namespace) -> dict:
    from torch.profiler import ProfilerActivity, profile

    from interlingua.config import load_config
    from interlingua.data.download import get_multi30k
    from interlingua.training.build import build_run
    work = Path(args.work)
    corpus = get_multi30k(work / "multi30k", args.data)
    recipe = Path(args.recipe)
    precision = [f"train.precision={args.precision}"] if args.precision else []
    cfg = load_config(recipe, [
        f"corpus={corpus}", f"work_dir={work / f'{recipe.stem}_{args.bridge}'}", f"model.bridge.type={args.bridge}",
        f"train.softmax_sample={args.softmax_sample}", f"train.threads={args.threads}",
        "preprocess.max_valid_sentences=8", *precision])
    (cfg.work_dir / "last.pt").unlink(missing_ok=True)
    run = build_run(cfg)
    run.network.train()
    for _ in range(args.warmup):
        training_step(run)
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        for _ in range(args.steps):
            training_step(run)
    step_s = (time.perf_counter() - t0) / args.steps
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events) or 1.0
    top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[: args.top]
    gemm = [e for e in events if e.flops]
    gemm_s = sum(e.self_cpu_time_total for e in gemm) / 1e6
    gemm_flops = sum(e.flops for e in gemm)
    return {"kind": "step", "recipe": recipe.stem, "bridge": args.bridge,
            "softmax_sample": args.softmax_sample,
            "threads": args.threads, "precision": run.precision, "steps_profiled": args.steps,
            "step_s_mean_under_profiler": round(step_s, 3),
            "top_self_cpu": [{"op": e.key, "self_s_per_step": round(e.self_cpu_time_total / 1e6 / args.steps, 4),
                              "share": round(e.self_cpu_time_total / total, 3), "calls_per_step": e.count // args.steps}
                             for e in top],
            "counted_flop_ops": {e.key: {"gflop_per_step": round(e.flops / 1e9 / args.steps, 2),
                                         "gflop_per_s": round(e.flops / 1e3 / max(e.self_cpu_time_total, 1e-3), 1)}
                                 for e in gemm},
            "counted_flop_ops_gflop_per_s": round(gemm_flops / 1e9 / max(gemm_s, 1e-9), 1),
            "counted_flop_ops_share_of_self_cpu": round(sum(e.self_cpu_time_total for e in gemm) / total, 3)}


def main() -> None:
    from interlingua import tune_allocator
    tune_allocator()  # as the command line does (INTERLINGUA_ALLOCATOR=default: malloc left as it is)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bridge", default="attention", choices=["attention", "none"])
    ap.add_argument("--softmax-sample", type=int, default=0)
    ap.add_argument("--recipe", default=str(ROOT / "recipes" / "paper_bilingual_en_de.yaml"))
    ap.add_argument("--precision", choices=["fp32", "bf16"], default=None, help="in place of the recipe's")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--gemm-n", type=int, default=2048)
    ap.add_argument("--bf16-n", type=int, default=512)
    ap.add_argument("--gemm-reps", type=int, default=3)
    ap.add_argument("--no-step", action="store_true", help="only the matrix-product rates")
    ap.add_argument("--work", default=str(ROOT / "runs" / "bench_profile"))
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    fp32 = gemm_rate(args.gemm_n, torch.float32, args.gemm_reps)
    bf16 = gemm_rate(args.bf16_n, torch.bfloat16, args.gemm_reps)
    append_result(args.out, {"kind": "gemm", "threads": args.threads, "fp32_n": args.gemm_n,
                             "fp32_gflop_per_s": round(fp32, 1), "bf16_n": args.bf16_n,
                             "bf16_gflop_per_s": round(bf16, 2)})
    if not args.no_step:
        append_result(args.out, profile_steps(args))


if __name__ == "__main__":
    main()
