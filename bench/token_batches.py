"""Sentence batches against token batches (`train.batch_tokens`) at an equal number of training tokens.

Run: python bench/token_batches.py [--recipe recipes/multi30k/cpu/zero_shot/baseline.yaml] [--tokens 2000000]
     [--batch-size 64] [--batch-tokens 4096] [--threads 1] [--out bench/results/token_batches.jsonl]

Both runs train the recipe's model from the same seed on the same data; the sentence-batch run
(one direction a step, `--batch-size` pairs) and the token-batch run (a batch of every direction a
step, `--batch-tokens` tokens in all) each take as many steps as it needs to reach `--tokens` source
+ target tokens, counted from the batch plans before training. Each run ends with one validation
(dev loss and greedy dev BLEU of the trained directions), and reports its steps, tokens/s and the
share of padding in its batches (padded positions over all positions, source and target). The two
runs alternate `--rounds` times, so that a change in the machine's load falls on both alike.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _results import append_result  # noqa: E402

from interlingua.config import ExperimentConfig, load_config  # noqa: E402
from interlingua.data.prepare import PreparedData, prepare  # noqa: E402
from interlingua.training.build import build_run  # noqa: E402
from interlingua.training.run import Run  # noqa: E402
from interlingua.training.step import step_parts  # noqa: E402
from interlingua.training.trainer import Trainer  # noqa: E402


def steps_for(run: Run, tokens: int) -> tuple[int, float]:
    """Steps until the run's batches hold `tokens` tokens, and the padding share of those batches
    (the plans are rewound afterwards, so training draws the same batches)."""
    start = {d: b.state_dict() for d, b in run.batches.items()}, run.direction_scheduler.state_dict()
    steps = seen = padded = 0
    while seen < tokens:
        for d, idx in step_parts(run):
            b = run.batches[d]
            seen += b.tokens(idx)
            extra = (b.src_prefix is not None)
            padded += len(idx) * (int(b.src.lengths[idx].max()) + extra + int(b.tgt.lengths[idx].max()) + 1)
        steps += 1
    for d, b in run.batches.items():
        b.load_state_dict(start[0][d])
    run.direction_scheduler.load_state_dict(start[1])
    return steps, 1 - seen / padded


def one_run(cfg: ExperimentConfig, data: PreparedData, tokens: int, label: str) -> dict:
    probe = build_run(cfg, data=data)
    steps, padding = steps_for(probe, tokens)
    probe.close()
    final = cfg.model_copy(update={"train": cfg.train.model_copy(update={
        "max_steps": steps, "valid_every": steps, "log_every": max(1, steps // 10)})})
    run = build_run(final, data=data)
    t0 = time.perf_counter()
    result = Trainer(run).train()
    wall = time.perf_counter() - t0
    valid = result.history[-1]
    return {"batches": label, "steps": steps, "tokens": tokens, "padding_share": round(padding, 4),
            "tokens_per_s": round(result.tokens_per_second, 1), "wall_s": round(wall, 1),
            "dev_loss": valid.mean_loss, "dev_bleu": valid.mean_bleu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", default=str(ROOT / "recipes/multi30k/cpu/zero_shot/baseline.yaml"))
    ap.add_argument("--tokens", type=int, default=2_000_000)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--work", default=None, help="work folder (default: a temporary one)")
    ap.add_argument("--out", default=str(ROOT / "bench/results/token_batches.jsonl"))
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="token_batches_"))
    common = [f"train.threads={args.threads}", "train.max_minutes=null", "train.patience=null",
              "train.average_best=0", "train.precision=fp32"]
    sentences = load_config(args.recipe, [*common, f"work_dir={work / 'sentences'}", "train.batch_tokens=null",
                                          f"train.batch_size={args.batch_size}"])
    token_cfg = load_config(args.recipe, [*common, f"work_dir={work / 'tokens'}",
                                          f"train.batch_tokens={args.batch_tokens}"])
    data = prepare(sentences)
    for r in range(args.rounds):
        for cfg, label in ((sentences, f"{args.batch_size} sentences, one direction"),
                           (token_cfg, f"{args.batch_tokens} tokens, every direction")):
            for f in ("last.pt", "best.pt", "metrics.jsonl"):
                (Path(cfg.work_dir) / f).unlink(missing_ok=True)
            append_result(args.out, {"bench": "token_batches", "recipe": Path(args.recipe).stem, "round": r,
                                     "threads": args.threads, **one_run(cfg, data, args.tokens, label)})


if __name__ == "__main__":
    main()
