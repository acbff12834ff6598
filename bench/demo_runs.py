"""The demo command itself, run several times with settings alternated: what it prints, as raw lines.

Run: python bench/demo_runs.py --work /tmp/demo_runs --starts 0.25,0.5 [--rates 0.5,1] --rounds 2 [--minutes 8]
     [--precision auto] [--out bench/results/demo_runs.jsonl]

Each round runs `interlingua demo` once per value of --starts (`interlingua.demo.SYNTHETIC_START`: from which share
of its minutes the de<->fr pairs made through English join training) and of --rates (`SYNTHETIC_PAIRS["rate"]`: the
share of English batches that make a pair), in that order, each in its own process and folder
(`WORK/<start>_r<round>/`, `WORK/<start>_rate<rate>_r<round>/` for a rate other than the demo's), nothing else to
run beside them: the demo trains for wall-clock minutes, so a second job would take its steps. A run whose folder
already holds `result.json` is not run again (a stopped study continues where it was; its line is written only with
--record-existing). One line per run: its steps, the cased BLEU of every direction, zero-shot against through
English, retrieval by cosine and by the ratio margin, and when the run started and ended. Read dev BLEU of the runs'
`model/best.pt` with `bench/ngram_blocking.py --split val --ngrams 4` before reading these test figures.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _results import append_result  # noqa: E402


def run_one(folder: Path, start: float, rate: float, minutes: float, precision: str) -> dict:
    """The demo in a process of its own (a fresh torch, as the command has), its returned record kept beside it."""
    import interlingua.demo as demo
    demo.SYNTHETIC_START = start
    demo.SYNTHETIC_PAIRS = {**demo.SYNTHETIC_PAIRS, "rate": rate}
    began = time.strftime("%Y-%m-%d %H:%M:%S")
    out = demo.run_demo(folder, minutes=minutes, precision=precision)
    record = {"began": began, "ended": time.strftime("%Y-%m-%d %H:%M:%S"), **out}
    (folder / "result.json").write_text(json.dumps(record, indent=1, default=str))
    return record


def summary(tag: str, start: float, rate: float, record: dict) -> dict:
    bleu = record["bleu"]
    supervised = [bleu[s][t] for s, t in (("de", "en"), ("en", "de"), ("en", "fr"), ("fr", "en"))]
    zero_shot = record["zero_shot_vs_pivot"]  # direct, through the pivot and their difference, per direction
    return {"bench": "demo_runs", "run": tag, "synthetic_start": start, "synthetic_rate": rate,
            "began": record.get("began"),
            "ended": record.get("ended"), "steps": record["steps"], "bleu_cased": bleu,
            "supervised_mean": round(sum(supervised) / len(supervised), 2),
            "zero_shot_vs_pivot": zero_shot, "retrieval_cosine": record["retrieval"],
            "retrieval_margin": record["retrieval_margin"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default=None, help="the runs' folders go under it (required)")
    ap.add_argument("--starts", default="0.5", help="values of SYNTHETIC_START, alternated within each round")
    ap.add_argument("--rates", default=None,
                    help="values of the made pairs' rate, alternated within each round (default: the demo's)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--minutes", type=float, default=8.0)
    ap.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "demo_runs.jsonl"))
    ap.add_argument("--record-existing", action="store_true",
                    help="also write the lines of runs finished before this call (their result.json)")
    ap.add_argument("--one", nargs=3, metavar=("FOLDER", "START", "RATE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:  # the script calling itself, once per run (`--work` is not needed there)
        run_one(Path(args.one[0]), float(args.one[1]), float(args.one[2]), args.minutes, args.precision)
        return
    if args.work is None:
        ap.error("the following arguments are required: --work")
    from interlingua.demo import SYNTHETIC_PAIRS
    default_rate = float(SYNTHETIC_PAIRS["rate"])
    starts = [float(s) for s in args.starts.split(",")]
    rates = [float(x) for x in args.rates.split(",")] if args.rates else [default_rate]
    for r in range(1, args.rounds + 1):
        for start, rate in ((s, x) for s in starts for x in rates):
            tag = f"{start:g}_r{r}" if rate == default_rate else f"{start:g}_rate{rate:g}_r{r}"
            folder = Path(args.work) / tag
            result = folder / "result.json"
            if result.exists() and not args.record_existing:
                print(f"== {tag}: finished before ({result}), not run again")
                continue
            if not result.exists():
                folder.mkdir(parents=True, exist_ok=True)
                print(f"== {tag}: the demo with pairs from {start:g} of its minutes at rate {rate:g}, log "
                      f"{folder / 'demo.log'}", flush=True)
                with open(folder / "demo.log", "w") as log:
                    subprocess.run([sys.executable, __file__, "--one", str(folder), str(start), str(rate),
                                    "--minutes", str(args.minutes), "--precision", args.precision],
                                   stdout=log, stderr=subprocess.STDOUT, check=True)
            append_result(args.out, summary(tag, start, rate, json.loads(result.read_text())))


if __name__ == "__main__":
    main()
