"""Two commits side by side: the same recipe, seed and step budget trained by each at the same
time (one thread each), then the test BLEU matrix translated by each at the same time.

Run: python bench/compare_commits.py --base REV [--head HEAD] [--recipe recipes/cpu_m2m_mono.yaml]
     [--steps 1500] [--out bench/results/compare_commits.jsonl]

Each commit runs from its own `git worktree` (under --work) with this checkout's virtualenv, so
only the project's code differs. Both sides are timed the same way: training tokens/s is the
median of the logged windows after the first, translation speed is the wall clock of the whole
`interlingua evaluate bleu` command (loading included) divided by the sentences translated.
One JSON line per commit and one with the head/base ratios are appended to --out; that line also says
whether the two runs logged bit-identical training losses at every logged step (`losses_identical`).

Two processes side by side share the two cores unevenly, so `--speed-rounds R` adds R rounds
of training-speed runs one at a time, alternating base and head (220 steps each, validation
off, the prepared data of the side-by-side runs reused); `--speed-only` runs just those.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import append_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def checkout(rev: str, work: Path) -> Path:
    sha = git("rev-parse", "--short", rev)
    tree = work / f"src_{sha}"
    if not tree.exists():
        git("worktree", "add", "--detach", str(tree), sha)
    return tree


def run_side_by_side(commands: dict[str, list[str]], trees: dict[str, Path], logs: Path) -> dict[str, float]:
    """Start every command at once (one thread each); wall-clock seconds per side."""
    procs, started, walls = {}, {}, {}
    for side, cmd in commands.items():
        env = {**os.environ, "PYTHONPATH": str(trees[side]), "OMP_NUM_THREADS": "1"}
        log = open(logs / f"{side}_{cmd[3]}.log", "w")
        started[side] = time.perf_counter()
        procs[side] = (subprocess.Popen(cmd, cwd=trees[side], env=env, stdout=log, stderr=subprocess.STDOUT), log)
    while procs:  # each side's wall clock ends when that side ends, not when the one waited on first does
        for side, (proc, log) in list(procs.items()):
            if proc.poll() is None:
                continue
            walls[side] = time.perf_counter() - started[side]
            log.close()
            del procs[side]
            if proc.returncode != 0:
                raise SystemExit(f"{side}: {' '.join(commands[side])} failed, see {log.name}")
        time.sleep(0.2)
    return walls


def train_rate(metrics: Path) -> float:
    rates = [json.loads(line)["tokens_per_s"] for line in metrics.read_text().splitlines()
             if json.loads(line).get("type") == "train"]
    return statistics.median(rates[1:] or rates)


def train_losses(metrics: Path) -> list[tuple[int, float | None]]:
    """(step, training loss) of every logged window: what two commits must agree on bit for bit."""
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    return [(r["step"], r.get("loss")) for r in records if r.get("type") == "train"]


def loss_agreement(base: Path, head: Path) -> dict[str, object]:
    """Whether the two runs logged the same losses at the same steps, and the first step where not."""
    a, b = train_losses(base), train_losses(head)
    differing = next((x[0] for x, y in zip(a, b) if x != y), None)
    return {"losses_identical": a == b, "loss_windows": len(a), "first_differing_step": differing}


def test_bleu(eval_dir: Path, lines_per_direction: int) -> tuple[float, int]:
    """Mean BLEU over the supervised directions of the matrix, and the sentences translated."""
    [path] = sorted(eval_dir.glob("bleu_*.json"))
    res = json.loads(path.read_text())
    zero = set(res.get("zero_shot", []))
    cells = [(s, t, v) for s, row in res["bleu"].items() for t, v in row.items() if v is not None and s != t]
    supervised = [v for s, t, v in cells if f"{s}-{t}" not in zero]
    return statistics.mean(supervised), len(cells) * lines_per_direction


SPEED_RUN = """
import json, shutil, statistics, sys
from pathlib import Path
from interlingua.config import load_config
try:
    from interlingua.training.build import build_run
except ImportError:
    try:  # commits before the building moved out of training/run.py
        from interlingua.training.run import build_run
    except ImportError:  # commits before the run was built apart from its loop
        build_run = None
from interlingua.training.trainer import Trainer
recipe, corpus, prepared, out = sys.argv[1:5]
out = Path(out)
shutil.rmtree(out, ignore_errors=True)
out.mkdir(parents=True)
shutil.copytree(Path(prepared) / "data", out / "data")
cfg = load_config(recipe, [f"corpus={corpus}", f"work_dir={out}", "train.max_steps=220", "train.max_minutes=null",
                           "train.threads=1", "train.valid_every=100000", "train.log_every=20"])
if build_run is None:
    trainer = Trainer(cfg)
    trainer.devsets = {}
else:
    run = build_run(cfg)
    run.devsets = {}
    trainer = Trainer(run)
trainer.train()
rates = [json.loads(l)["tokens_per_s"] for l in open(out / "metrics.jsonl") if '"train"' in l][1:]
print(json.dumps(statistics.median(rates)))
"""


def alternating_speed(trees: dict[str, Path], shas: dict[str, str], runs: dict[str, Path], recipe: str, corpus: Path,
                      work: Path, rounds: int, out: str | None) -> None:
    """Training tokens/s of each side alone on the machine, base and head alternating."""
    rates: dict[str, list[float]] = {"base": [], "head": []}
    for r in range(rounds):
        for side in ("base", "head"):
            env = {**os.environ, "PYTHONPATH": str(trees[side]), "OMP_NUM_THREADS": "1"}
            res = subprocess.run(
                [sys.executable, "-c", SPEED_RUN, str(trees[side] / recipe), str(corpus), str(runs[side]),
                 str(work / f"speed_{side}")],
                cwd=trees[side], env=env, capture_output=True, text=True,
            )
            if res.returncode != 0:
                raise SystemExit(f"{side} speed run failed:\n{res.stderr[-2000:]}")
            rates[side].append(float(res.stdout.strip().splitlines()[-1]))
            append_result(out, {"bench": "compare_commits", "mode": "alternating", "side": side, "commit": shas[side],
                                "round": r + 1, "steps": 220, "threads": 1,
                                "train_tokens_per_s": round(rates[side][-1], 1)})
    append_result(out, {"bench": "compare_commits", "mode": "alternating", "side": "ratio head/base", "rounds": rounds,
                        "base": shas["base"], "head": shas["head"],
                        "train_tokens_per_s": round(
                            statistics.median(rates["head"]) / statistics.median(rates["base"]), 3)})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True)
    ap.add_argument("--head", default="HEAD")
    ap.add_argument("--recipe", default="recipes/cpu_m2m_mono.yaml")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    ap.add_argument("--work", default=str(ROOT / "runs" / "compare_commits"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--speed-rounds", type=int, default=0, help="alternating one-at-a-time speed runs after")
    ap.add_argument("--speed-only", action="store_true", help="only the alternating speed runs (needs an earlier run)")
    args = ap.parse_args()
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    trees = {"base": checkout(args.base, work), "head": checkout(args.head, work)}
    shas = {side: git("-C", str(tree), "rev-parse", "--short", "HEAD") for side, tree in trees.items()}
    py = [sys.executable, "-m", "interlingua.cli"]
    corpus = work / "multi30k" / "corpus.yaml"
    if not corpus.exists():
        subprocess.run(py + ["data", "multi30k", "--from", args.data, "--dest", str(corpus.parent)], cwd=trees["head"],
                       env={**os.environ, "PYTHONPATH": str(trees["head"])}, check=True)
    runs = {side: work / f"run_{shas[side]}" for side in trees}
    if args.speed_only:
        alternating_speed(trees, shas, runs, args.recipe, corpus, work, max(args.speed_rounds, 1), args.out)
        return
    train = {side: py + ["train", str(trees[side] / args.recipe), "--set", f"corpus={corpus}",
                         "--set", f"work_dir={runs[side]}", "--set", f"train.max_steps={args.steps}",
                         "--set", "train.max_minutes=null", "--set", "train.threads=1",
                         "--set", f"train.valid_every={max(args.steps // 3, 1)}"] for side in trees}
    for side in trees:
        for f in ("last.pt", "best.pt", "metrics.jsonl"):
            (runs[side] / f).unlink(missing_ok=True)
    train_walls = run_side_by_side(train, trees, work)
    evaluate = {side: py + ["evaluate", "bleu", "--model", str(runs[side] / "best.pt"), "--split", "test_2016_flickr",
                            "--out", str(runs[side] / "eval")] for side in trees}
    eval_walls = run_side_by_side(evaluate, trees, work)
    with gzip.open(corpus.parent / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
        lines = sum(1 for _ in f)
    records = {}
    for side in trees:
        bleu, sentences = test_bleu(runs[side] / "eval", lines)
        records[side] = {"bench": "compare_commits", "side": side, "commit": shas[side], "recipe": args.recipe,
                         "steps": args.steps, "threads": 1,
                         "train_tokens_per_s": round(train_rate(runs[side] / "metrics.jsonl"), 1),
                         "train_wall_s": round(train_walls[side], 1), "test_bleu_mean_supervised": round(bleu, 2),
                         "translate_sentences_per_s": round(sentences / eval_walls[side], 2),
                         "translate_wall_s": round(eval_walls[side], 1)}
        append_result(args.out, records[side])
    b, h = records["base"], records["head"]
    append_result(args.out, {"bench": "compare_commits", "side": "ratio head/base",
                             "base": shas["base"], "head": shas["head"],
                             "train_tokens_per_s": round(h["train_tokens_per_s"] / b["train_tokens_per_s"], 3),
                             "translate_sentences_per_s": round(
                                 h["translate_sentences_per_s"] / b["translate_sentences_per_s"], 3),
                             "test_bleu_difference": round(
                                 h["test_bleu_mean_supervised"] - b["test_bleu_mean_supervised"], 2),
                             **loss_agreement(runs["base"] / "metrics.jsonl", runs["head"] / "metrics.jsonl")})
    if args.speed_rounds:
        alternating_speed(trees, shas, runs, args.recipe, corpus, work, args.speed_rounds, args.out)


if __name__ == "__main__":
    main()
