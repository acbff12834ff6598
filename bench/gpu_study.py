"""Paper 004's Table 5 core on one GPU (`scripts/gpu-study.sh`): Baseline and Residual to convergence.

The rows are recipes/multi30k/cpu/zero_shot_converged/{baseline,residual}.yaml as written (the CPU
recipe's model size: d_model 128, ff 512, 4 heads, 5 encoder and 2 decoder layers; the authors' setup:
target-language embedding concatenated to the decoder inputs, attention dropout 0.2, word dropout
0.1, Adam betas (0.9, 0.98), patience 6 on the mean dev loss, the average of the 5 lowest-dev-loss
checkpoints), with the token batches sized for a GPU (`GPU_SETTINGS`: 24,576 source + target tokens
a step as the authors' ~25k, so about 210 steps an epoch of the six directions; validation every
100 steps, about half an epoch as in the CPU recipe; the warm-up shortened to match) and no step cap
short of convergence.

Both rows train at once, as two `interlingua train` processes on the one GPU. A command has
`--minutes` (9): training stops `--score-minutes` (2.5) before its end with SIGTERM, which saves
`last.pt` at the step it reached; the runs' folders stay under `--work` (runs/gpu-study), so the next
command resumes them exactly where they stopped, and a row that has converged is not trained again.
Every command then scores what there is (unless `--no-score`: a command that only trains) with
`interlingua experiment`'s runner (`run_recipe`): a converged row its averaged checkpoint, a row still
training its best-dev-BLEU checkpoint so far (`--checkpoint last`: every row's last.pt); on
test_2016_flickr, supervised, zero-shot and zero-shot through English (pivot), cased and lowercased
BLEU, off-target rates; with each row's state (converged by patience, stopped by the step cap, or
still training).

Into `--out` (else $OUT, else runs/gpu-study/out), never a checkpoint: study.md (the tables, and every
row's validations by step), study.json (the runs, their dev curves and states, the settings),
study_dev_curves.png, metrics_<row>.jsonl (every training and validation record), study.log (both
trainings' output). `--tiny` (with `--device cpu`) runs the same code on a tiny model and corpus in seconds.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RECIPES = REPO / "recipes" / "multi30k" / "cpu" / "zero_shot_converged"
ROWS = ("baseline", "residual")

GPU_SETTINGS = ["train.batch_tokens=24576", "train.warmup_steps=400", "train.valid_every=100",
                "train.max_steps=40000", "train.precision=bf16"]
"""What differs from the CPU recipes besides the device, corpus and folder (see the module's text)."""

TINY_SETTINGS = ["preprocess.vocab_size=300", "preprocess.max_train_sentences=200", "preprocess.max_valid_sentences=4",
                 "preprocess.max_len=20",
                 "model.embed_dim=32", "model.encoder.layers=3", "model.encoder.heads=2", "model.encoder.ff_dim=64",
                 "model.decoder.layers=1", "model.decoder.heads=2", "model.decoder.ff_dim=64",
                 "train.batch_tokens=900", "train.warmup_steps=5", "train.lr=0.005", "train.valid_every=4",
                 "train.max_steps=24", "train.patience=2", "train.average_best=2", "train.log_every=4",
                 "train.precision=fp32", "train.curves=false"]  # curves.png: 0.3-0.8 s a run, not looked at
TINY_TEST_SENTENCES = 6


def row_overrides(args: argparse.Namespace, row: str) -> list[str]:
    settings = TINY_SETTINGS if args.tiny else GPU_SETTINGS
    return [f"corpus={args.corpus}", f"work_dir={args.work / row}", f"train.device={args.device}", *settings,
            *args.set]


def state_of(work: Path, cfg: Any) -> dict[str, Any]:
    """Where a row's run stands: steps, validations, lowest dev loss, and why it stopped (or that it has not)."""
    from interlingua.model_files.checkpoint import Checkpoint, TrainingState
    from interlingua.training.patience import patience_spent
    from interlingua.training.trainer import budget_spent
    last = work / "last.pt"
    if not last.is_file():
        return {"steps": 0, "validations": 0, "stopped_by": "not started", "converged": False}
    st = Checkpoint.read(last).training or TrainingState()
    losses = [v.mean_loss for v in st.history if v.mean_loss is not None]
    tc = cfg.train
    if patience_spent(st.history, tc.patience):
        why = "patience"
    elif budget_spent(tc, tc.max_steps, st.step, st.elapsed):
        why = "step cap"
    else:
        why = "time limit of the command (the next command resumes it)"
    return {"steps": st.step, "validations": len(st.history), "train_minutes": round(st.elapsed / 60, 2),
            "lowest_dev_loss": min(losses) if losses else None, "stopped_by": why, "converged": why == "patience"}


def _train_command(args: argparse.Namespace, row: str, resume: bool) -> list[str]:
    cmd = [sys.executable, "-m", "interlingua.cli", "train", str(RECIPES / f"{row}.yaml")]
    for override in row_overrides(args, row):
        cmd += ["--set", override]
    return cmd + (["--resume"] if resume else [])


def train_rows(args: argparse.Namespace, deadline: float) -> dict[str, dict[str, Any]]:
    """Start every unfinished row's training at once; SIGTERM those still training at `deadline`."""
    from interlingua.config import load_config
    from interlingua.experiment import finished
    procs: dict[str, tuple[subprocess.Popen, Any]] = {}
    report: dict[str, dict[str, Any]] = {}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for row in args.rows:
        cfg = load_config(RECIPES / f"{row}.yaml", row_overrides(args, row))
        work = Path(cfg.work_dir)
        if finished(work, cfg.train):
            report[row] = {"trained": False, "note": "already finished"}
            continue
        work.mkdir(parents=True, exist_ok=True)
        cmd = _train_command(args, row, resume=(work / "last.pt").is_file())
        log = open(work / "train.log", "a", encoding="utf-8")  # closed once the process has ended
        log.write(f"\n$ {shlex.join(cmd)}  # {datetime.datetime.now().isoformat(timespec='seconds')}\n")
        log.flush()
        procs[row] = (subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT), log)
        report[row] = {"trained": True, "command": shlex.join(cmd), "started": time.time()}
    while any(p.poll() is None for p, _ in procs.values()) and time.time() < deadline:
        time.sleep(0.2)
    for row, (proc, _) in procs.items():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # the trainer saves last.pt at the step it reached, then exits
            report[row]["sigterm"] = True
    for row, (proc, log) in procs.items():
        try:
            code = proc.wait(timeout=args.stop_timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
            report[row]["killed"] = True  # last.pt stays that of its last validation
        log.close()
        report[row].update(exit_code=code, seconds=round(time.time() - report[row].pop("started"), 1))
        if code not in (0, 128 + signal.SIGTERM, -signal.SIGTERM):
            report[row]["error"] = f"interlingua train exited {code}: see study.log"
    return report


def score_row(recipe: str, overrides: list[str], max_test: int | None, checkpoint: str) -> dict[str, Any]:
    """One row scored by `interlingua experiment`'s runner (in a worker process: one per row)."""
    from interlingua.experiment import run_recipe
    return run_recipe(Path(recipe), overrides, beam=1, max_test=max_test, pivot="en", checkpoint=checkpoint)


def score_rows(args: argparse.Namespace, states: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each row with a checkpoint scored (a converged or capped row: what the runner selects; one still
    training: its best-dev-BLEU checkpoint, the run made finished for the runner by its current step)."""
    from concurrent.futures import as_completed

    from interlingua.workers import process_pool
    jobs = {}
    for row in args.rows:
        state = states[row]
        if not state["steps"] or not (args.work / row / "best.pt").is_file():
            continue
        overrides = row_overrides(args, row)
        checkpoint = args.checkpoint
        if state["stopped_by"].startswith("time limit"):
            overrides = [*overrides, f"train.max_steps={state['steps']}"]
            checkpoint = "best" if checkpoint == "selected" else checkpoint
        jobs[row] = (str(RECIPES / f"{row}.yaml"), overrides, TINY_TEST_SENTENCES if args.tiny else None, checkpoint)
    scored: dict[str, dict[str, Any]] = {}
    # one process per row, as they trained
    with process_pool(max(len(jobs), 1), preload=("interlingua.experiment",)) as pool:
        futures = {pool.submit(score_row, *job): row for row, job in jobs.items()}
        for fut in as_completed(futures):
            row = futures[fut]
            try:
                scored[row] = fut.result()
            except Exception as err:  # noqa: BLE001 - recorded; the other row is still reported
                scored[row] = {"error": f"{type(err).__name__}: {err}"}
    return scored


def markdown(summary: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    from interlingua.experiment import dev_curve_markdown, results_markdown, zero_shot_study_markdown
    env = summary["environment"]
    lines = [f"# Paper 004, Table 5 core on {env.get('gpu') or env['device']}, {env['date']}", "",
             f"torch {env['torch']}, CUDA {env['cuda']}; command `{env['command']}`, {summary['seconds']} s. "
             f"Rows: recipes/multi30k/cpu/zero_shot_converged/{{{','.join(summary['rows'])}}}.yaml with "
             f"{' '.join(summary['settings'])}.", "",
             "| row | state | steps | validations | train min | lowest dev loss | scored checkpoint | note |",
             "|---|---|---|---|---|---|---|---|"]
    for row in summary["rows"]:
        st, tr = summary["states"][row], summary["training"].get(row, {})
        note = tr.get("error") or ("SIGTERM at the time limit" if tr.get("sigterm") else tr.get("note", ""))
        scored = summary["scored"].get(row, {})
        loss = st.get("lowest_dev_loss")
        lines.append(f"| {row} | {st['stopped_by']} | {st['steps']} | {st['validations']} | "
                     f"{st.get('train_minutes', '-')} | {'-' if loss is None else f'{loss:.4f}'} | "
                     f"{scored.get('checkpoint', scored.get('error', '-'))} | {note} |")
    lines.append("")
    if runs:
        lines += zero_shot_study_markdown(runs) + dev_curve_markdown(runs)
        lines.append(results_markdown(runs, title="Per direction"))
    return "\n".join(lines)


def _mean_cell(values: list[float]) -> str:
    return f"{sum(values) / len(values):.2f}" if values else "-"


def validations_markdown(work: Path, rows: list[str]) -> list[str]:
    """Every row's validations by step from its metrics (`work`/<row>/metrics.jsonl): dev loss, mean dev BLEU
    of the trained and of the zero-shot directions (greedy), and the speed and made pairs' share of time of
    the last train record before it: what a run with `train.synthetic` is read by, whose scored checkpoint
    may predate them."""
    from interlingua.records import read_records, validations
    lines = ["## Dev validations", "",
             "| row | step | dev loss | dev BLEU, trained | dev BLEU, zero-shot | tokens/s | made pairs' time share |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        records = read_records(work / row / "metrics.jsonl")
        train = [r for r in records if r.get("type") == "train"]
        for v in validations(records):
            trained = [d.bleu for d in v.directions.values() if not d.zero_shot]
            zero = [d.bleu for d in v.directions.values() if d.zero_shot]
            before = [r for r in train if r.get("step", 0) <= v.step]
            speed = before[-1].get("tokens_per_s") if before else None
            share = before[-1].get("synthetic_time_share") if before else None
            lines.append(f"| {row} | {v.step} | {'-' if v.mean_loss is None else f'{v.mean_loss:.3f}'} | "
                         f"{_mean_cell(trained)} | {_mean_cell(zero)} | {'-' if speed is None else f'{speed:,.0f}'} | "
                         f"{'-' if share is None else f'{share:.2f}'} |")
    return [*lines, ""]


def environment(device: str) -> dict[str, Any]:
    import torch
    env: dict[str, Any] = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "host": platform.node(),
                           "python": platform.python_version(), "torch": torch.__version__,
                           "cuda": torch.version.cuda, "device": device,
                           "command": shlex.join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]])}
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
    return env


def run_study(args: argparse.Namespace) -> dict[str, Any]:
    from interlingua.config import load_config
    from interlingua.evaluation.plots import plot_dev_bleu_against_loss
    t0 = float(os.environ.get("GPU_T0") or time.time())
    kept = 0.5 if args.no_score else args.score_minutes  # for writing only, or for scoring too
    train_minutes = args.train_minutes if args.train_minutes is not None else args.minutes - kept
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"environment": environment(args.device), "rows": list(args.rows),
                               "settings": (TINY_SETTINGS if args.tiny else GPU_SETTINGS) + list(args.set),
                               "work": str(args.work)}
    summary["training"] = train_rows(args, t0 + train_minutes * 60)
    configs = {row: load_config(RECIPES / f"{row}.yaml", row_overrides(args, row)) for row in args.rows}
    summary["states"] = {row: state_of(args.work / row, configs[row]) for row in args.rows}
    scored = {} if args.no_score else score_rows(args, summary["states"])
    summary["scored"] = {row: {"checkpoint": r["checkpoint"]} if "error" not in r else r for row, r in scored.items()}
    runs = []
    for row in args.rows:
        if row in scored and "error" not in scored[row]:
            runs.append({**scored[row], "state": summary["states"][row]})
    summary["seconds"] = round(time.time() - t0, 1)
    (args.out / "study.json").write_text(json.dumps({**summary, "runs": runs}, indent=1, default=str),
                                         encoding="utf-8")
    trained = [r for r in args.rows if (args.work / r / "metrics.jsonl").is_file()]
    validated = validations_markdown(args.work, trained)
    (args.out / "study.md").write_text(markdown(summary, runs) + "\n\n" + "\n".join(validated), encoding="utf-8")
    curves = {r["recipe"]: [(loss, bleu) for _, loss, bleu in r.get("dev_curve", [])] for r in runs}
    if any(curves.values()):
        plot_dev_bleu_against_loss(curves, args.out / "study_dev_curves.png")
    with open(args.out / "study.log", "w", encoding="utf-8") as out:
        for row in args.rows:
            log = args.work / row / "train.log"
            text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
            out.writelines(f"[{row}] {line}\n" for line in text.splitlines()[-2000:])
    for row in trained:
        shutil.copyfile(args.work / row / "metrics.jsonl", args.out / f"metrics_{row}.jsonl")
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    ap.add_argument("--out", type=Path, default=None, help="output folder (default: $OUT, else runs/gpu-study/out)")
    ap.add_argument("--tiny", action="store_true", help="tiny model and corpus: the same code in seconds")
    ap.add_argument("--corpus", type=Path, default=REPO / ".gpu-data" / "multi30k" / "corpus.yaml",
                    help="Multi30k corpus YAML (default .gpu-data/multi30k/corpus.yaml, from scripts/gpu-prepare.sh)")
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "gpu-study",
                    help="the rows' run folders, kept for the next command (default runs/gpu-study)")
    ap.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    ap.add_argument("--minutes", type=float, default=9.0, help="the command's whole time (default 9)")
    ap.add_argument("--score-minutes", type=float, default=2.5,
                    help="kept for scoring and writing at the end (default 2.5)")
    ap.add_argument("--no-score", action="store_true",
                    help="train only, all but half a minute of --minutes; a later command scores (the rows' "
                         "states and validations are written all the same)")
    ap.add_argument("--train-minutes", type=float, default=None,
                    help="training time of this command (default: --minutes less --score-minutes, or less half "
                         "a minute with --no-score)")
    ap.add_argument("--stop-timeout-s", type=float, default=60.0, help="wait after SIGTERM before killing")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a further override for both rows, e.g. train.precision=fp32")
    ap.add_argument("--checkpoint", choices=("selected", "last"), default="selected",
                    help="what is scored: the run's selected checkpoint (default; best dev BLEU while it trains), "
                         "or last.pt, e.g. after made pairs for the zero-shot directions, which the supervised "
                         "dev BLEU that selects does not see")
    args = ap.parse_args(argv)
    args.out = (args.out or Path(os.environ.get("OUT") or REPO / "runs" / "gpu-study" / "out")).resolve()
    args.corpus, args.work = args.corpus.resolve(), args.work.resolve()
    if not args.corpus.is_file():
        print(f"gpu-study: no corpus at {args.corpus}: run scripts/gpu-prepare.sh first (or give --corpus)",
              file=sys.stderr)
        return 2
    summary = run_study(args)
    for row in args.rows:
        st = summary["states"][row]
        print(f"gpu-study: {row}: {st['steps']} steps, {st['stopped_by']}"
              + (f", lowest dev loss {st['lowest_dev_loss']:.4f}" if st.get("lowest_dev_loss") else ""))
    failed = [r for r in args.rows if summary["training"].get(r, {}).get("error") or "error" in
              summary["scored"].get(r, {})]
    print(f"gpu-study: {summary['seconds']} s; results in {args.out}" + (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
