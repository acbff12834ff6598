"""The zero-resource study (docs/results/zero-resource.md): runs with and without synthetic pairs
(`train.synthetic`), each zero-shot direction direct against the same model's pivot through English.

Reads the JSON that `interlingua experiment ... --pivot en --out REPORT.md` writes beside its report
(REPORT.json), adds each run's translation retrieval among the test captions (sentence vectors only,
`evaluate crosslingual` without translation), and appends one line per run to
bench/results/zero_resource.jsonl (date, CPU model, command): steps, minutes, supervised mean and every
zero-shot direction direct / through the pivot, cased and lowercased, off-target, retrieval.

    interlingua experiment recipes/multi30k/cpu/zero_resource/demo_cased_control.yaml \\
        recipes/multi30k/cpu/zero_resource/demo_cased_pivot.yaml --jobs 2 --threads 1 --pivot en --out /tmp/r.md
    python bench/zero_resource_study.py /tmp/r.json --note "round 1, side by side"
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from _results import append_result

RESULTS = Path(__file__).parent / "results" / "zero_resource.jsonl"
SPLIT = "test_2016_flickr"


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 2) if values else None


def row(run: dict[str, Any], runs_root: Path, retrieval: bool) -> dict[str, Any]:
    """One run's line: the matrix's supervised means and each zero-shot direction against its pivot."""
    matrix, pivot = run["matrix"], run.get("pivot_matrix") or {}
    zero_shot = {tuple(x.split("-")) for x in matrix["zero_shot"]}
    out: dict[str, Any] = {"recipe": run["recipe"], "checkpoint": run["checkpoint"], **{
        k: run["compute"].get(k) for k in ("steps", "train_minutes", "tokens_per_s", "threads")}}
    for table in ("bleu", "bleu_cased"):
        supervised = [v for s, r in matrix[table].items() for t, v in r.items() if (s, t) not in zero_shot]
        out[f"supervised_{table}"] = _mean(supervised)
        for s, t in sorted(zero_shot):
            direct, through = matrix[table][s][t], (pivot.get(table) or {}).get(s, {}).get(t)
            out[f"{s}-{t}_{table}"] = {"direct": direct, "pivot": through,
                                       "difference": None if through is None else round(direct - through, 2)}
    tested = (run.get("zero_shot_vs_pivot") or {}).get("directions", {})
    out["p_value_vs_pivot"] = {d: r.get("p_value") for d, r in sorted(tested.items())}  # the trained-for BLEU's
    out["off_target_zero_shot"] = {f"{s}-{t}": matrix["off_target"][s][t] for s, t in sorted(zero_shot)}
    config = json.loads((runs_root / run["recipe"] / "config.json").read_text())
    out["cased"] = not config["preprocess"]["lowercase"]
    if retrieval:
        from interlingua.evaluation.crosslingual_report import evaluate_crosslingual
        checkpoint = runs_root / run["recipe"] / run["checkpoint"]
        report = evaluate_crosslingual(checkpoint, split=SPLIT, bleu=False, device="cpu", progress=False)
        out["retrieval"] = {k: round(r["retrieval"], 1) for k, r in report.pairs.items() if r["retrieval"] is not None}
    return out


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of docs/results/zero-resource.md: one row per run, in the BLEU that matches how the
    run was trained (cased, or lowercased for a lowercased model), plus lowercased for all."""
    out = ["| run | text | steps | supervised | de->fr direct / pivot | fr->de direct / pivot "
           "| zero-shot - pivot, mean | supervised, lc | zero-shot - pivot, lc | off-target zero-shot % "
           "| retrieval % min |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cased = r.get("cased", "lowercase" not in r["recipe"])
        table = "bleu_cased" if cased else "bleu"
        cells = [f"{r['recipe']}", "cased" if cased else "lowercased", f"{r['steps']}",
                 f"{r[f'supervised_{table}']:.2f}"]
        for d in ("de-fr", "fr-de"):
            x = r[f"{d}_{table}"]
            cells.append(f"{x['direct']:.2f} / {x['pivot']:.2f}")
        diffs = {t: [r[f"{d}_{t}"]["difference"] for d in ("de-fr", "fr-de")] for t in (table, "bleu")}
        cells += [f"{sum(diffs[table]) / 2:+.2f}", f"{r['supervised_bleu']:.2f}", f"{sum(diffs['bleu']) / 2:+.2f}"]
        cells.append(", ".join(f"{v:.1f}" for v in r["off_target_zero_shot"].values()))
        cells.append(f"{min(r['retrieval'].values()):.1f}" if r.get("retrieval") else "-")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", help="REPORT.json files of `interlingua experiment --pivot en`")
    parser.add_argument("--runs", default="runs/multi30k/cpu/zero_resource", help="the runs' parent folder")
    parser.add_argument("--note", default="", help="how the runs were made (side by side, seed, load)")
    parser.add_argument("--no-retrieval", action="store_true")
    parser.add_argument("--results", default=str(RESULTS))
    parser.add_argument("--table", action="store_true",
                        help="print the markdown table of the last line of each recipe in --results (REPORTS: the "
                             "recipe names, in order) instead of scoring")
    args = parser.parse_args()
    if args.table:
        lines = [json.loads(x) for x in Path(args.results).read_text().splitlines() if x.strip()]
        last = {r["recipe"]: r for r in lines if r.get("study") == "zero_resource"}
        print(table([last[name] for name in args.reports]))
        return
    for report in args.reports:
        for run in json.loads(Path(report).read_text()):
            append_result(args.results, {"study": "zero_resource", "note": args.note,
                                         **row(run, Path(args.runs), not args.no_retrieval)})


if __name__ == "__main__":
    main()
