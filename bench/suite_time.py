"""Wall clock and peak memory of the whole sentence-vector suite (`interlingua evaluate all`).

Run: python bench/suite_time.py --model runs/multi30k/cpu/m2m_mono_xlong/best.pt
     [--data-root ../shared/data] [--report-dir docs/results/sentence/m2m_mono_xlong]
     [--out bench/results/suite_time.jsonl] [-- extra `interlingua evaluate all` options]

Runs the suite in a child process and records its wall clock (start to exit: model loading
and the reference points included), the peak resident memory of the largest process (the main
one or a fit worker), and the suite time the report itself states (`total_elapsed_s` of
all.json, which leaves loading out) with the time per suite.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _results import append_result  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--data-root", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--report-dir", default=None, help="the suite's --out (default: <model folder>/eval)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "suite_time.jsonl"))
    ap.add_argument("extra", nargs="*", help="more `interlingua evaluate all` options, after --")
    args = ap.parse_args()
    report = Path(args.report_dir) if args.report_dir else Path(args.model).parent / "eval"
    cmd = [str(Path(sys.executable).parent / "interlingua"), "evaluate", "all", "--model", args.model,
           "--data-root", args.data_root, "--out", str(report), *args.extra]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    wall = time.perf_counter() - t0
    peak_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    stated = json.loads((report / "all.json").read_text())
    append_result(args.out, {"model": args.model, "report": str(report), "wall_s": round(wall, 1),
                             "suite_total_elapsed_s": stated.get("total_elapsed_s"),
                             "outside_suites_s": round(wall - stated.get("total_elapsed_s", 0.0), 1),
                             "peak_rss_gib_largest_process": round(peak_gib, 2),
                             "suite_elapsed_s": stated.get("elapsed_s"), "evaluate_command": " ".join(cmd)})


if __name__ == "__main__":
    main()
