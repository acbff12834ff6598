"""Several `interlingua evaluate cldc` results side by side: mean accuracy over the domains per
direction, one row per model and vector variant, as markdown (the summary in docs/results/cldc.md).

Run: python bench/cldc_summary.py --result "LSTM bridge=runs/.../eval/cldc/cldc.json" --result ... [--out FILE]

Variants are named by side so that rows line up across language pairs: `train` is the training
language's own vector of a document, `test` the test language's, `a:b` / `a+b` both sides.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def side_rows(scores: dict, unit: str, src: str, tgt: str) -> dict[str, str]:
    """Generic row name -> the result's row name for one direction."""
    a, b = sorted((src, tgt))
    return {f"{unit} train side": f"{unit}_{src}", f"{unit} test side": f"{unit}_{tgt}",
            f"{unit} a:b": f"{unit}_{a}:{b}", f"{unit} a+b": f"{unit}_{a}+{b}"}


def summary(results: dict[str, dict]) -> str:
    directions = []
    for r in results.values():
        for a, b in r["pairs"]:
            for d in ((a, b), (b, a)):
                if d not in directions:
                    directions.append(d)
    cols = [f"{s}->{t}" for s, t in directions]
    lines = ["| model | vector | " + " | ".join(cols) + " | mean |", "|---|---" + "|---" * (len(cols) + 1) + "|"]
    for name, r in results.items():
        rows: dict[str, list[float | None]] = {}
        for k, (src, tgt) in enumerate(directions):
            mapping = {**side_rows(r["scores"], "DV", src, tgt), **side_rows(r["scores"], "SV", src, tgt),
                       **{row: row for row in ("translate-test (TF-IDF)", "in-language (DV, own side)",
                                               "in-language (SV, own side)", "in-language (TF-IDF)")}}
            for generic, row in mapping.items():
                vals = [s["accuracy"] for c, s in r["scores"].get(row, {}).items() if c.endswith(f" {src}->{tgt}")]
                rows.setdefault(generic, [None] * len(directions))[k] = float(np.mean(vals)) if vals else None
        for generic, vals in rows.items():
            if all(v is None for v in vals):
                continue
            shown = [f"{v:.1f}" if v is not None else "" for v in vals]
            mean = np.mean([v for v in vals if v is not None])
            lines.append(f"| {name} | {generic} | " + " | ".join(shown) + f" | {mean:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--result", action="append", required=True, metavar="NAME=CLDC_JSON")
    ap.add_argument("--out", default=None, help="write the markdown here too")
    args = ap.parse_args()
    results = {name: json.loads(Path(p).read_text(encoding="utf-8"))
               for name, p in (x.split("=", 1) for x in args.result)}
    text = summary(results)
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
