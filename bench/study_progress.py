"""Where runs of a study stand, from their metrics.jsonl: validations so far and dev BLEU against dev loss.

Run: python bench/study_progress.py --run baseline=runs/multi30k/cpu/zero_shot_converged/baseline
     --run residual=runs/multi30k/cpu/zero_shot_converged/residual
     [--png docs/results/zero_shot/converged_dev_curves.png]

Prints a markdown table per run (step, training minutes, mean dev loss and greedy dev BLEU of the
trained directions, mean dev BLEU of the zero-shot directions, validations since the lowest dev
loss; for every run after the first, the first run's dev BLEU at the same dev loss, read off its
curve: `interlingua.evaluation.dev_curves`) and draws every run's validations as dev BLEU against
dev loss on one plot, the same plot `interlingua experiment` writes for finished runs, so runs still
training can be compared on it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from interlingua.evaluation.dev_curves import bleu_on_curve, dev_curve  # noqa: E402
from interlingua.evaluation.plots import plot_dev_bleu_against_loss  # noqa: E402
from interlingua.records import read_validations  # noqa: E402
from interlingua.training.patience import validations_without_improvement  # noqa: E402


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="append", required=True, metavar="NAME=WORK_DIR")
    ap.add_argument("--png", default=None, help="where to draw dev BLEU against dev loss")
    args = ap.parse_args()
    runs = {name: read_validations(Path(folder) / "metrics.jsonl")
            for name, folder in (x.split("=", 1) for x in args.run)}
    curves = {name: [(loss, bleu) for _, loss, bleu in dev_curve(valid)] for name, valid in runs.items()}
    reference = next(iter(runs))
    for name, valid in runs.items():
        on_curve = name != reference
        print(f"\n### {name}\n\n| step | train min | dev loss | dev BLEU | zero-shot dev BLEU | since lowest loss |"
              + (f" {reference}'s dev BLEU at this loss |" if on_curve else "")
              + "\n|---|---|---|---|---|---|" + ("---|" if on_curve else ""))
        for i, r in enumerate(valid):
            row = (f"| {r.step} | {_fmt((r.elapsed_s or 0) / 60, 1)} | {_fmt(r.mean_loss, 3)} | "
                   f"{_fmt(r.mean_bleu)} | {_fmt(r.zero_shot_bleu)} | "
                   f"{validations_without_improvement(valid[:i + 1])} |")
            if on_curve:
                loss = r.mean_loss
                row += f" {_fmt(None if loss is None else bleu_on_curve(curves[reference], loss))} |"
            print(row)
    if args.png:
        print(f"\n{plot_dev_bleu_against_loss(curves, Path(args.png))}")

if __name__ == "__main__":
    main()
