"""The interlingua study (docs/results/interlingua.md): each model family without and with `train.agreement`.

For every trained run of recipes/multi30k/cpu/interlingua/ given on the command line this scores the
run's selected checkpoint (best.pt, the best dev BLEU; 15-minute Transformer runs validate 4 times,
too few for their 5-checkpoint average) on test_2016_flickr with
`interlingua evaluate crosslingual` (retrieval, margins, language probe, supervised / zero-shot / pivot
BLEU, off-target) and the SentEval-style `downstream` suite, both cached in the run's eval/ folder, reads
its training log (steps, training seconds, the dev BLEU it was selected on), prints one markdown
table (the one docs/results/interlingua.md quotes), and writes the rows as JSON and the dev-BLEU
curves over training time, one panel per family.

    python bench/interlingua_study.py demo_none demo_contrastive_w16 ... --out docs/results/interlingua

Train the runs first (`interlingua train recipes/multi30k/cpu/interlingua/NAME.yaml`, two at a time
on 2 cores). A row's family is its name up to the last underscore-separated variant
(demo_none / demo_contrastive_w16 -> demo);
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

RUNS = Path("runs/multi30k/cpu/interlingua")
RECIPES = Path("recipes/multi30k/cpu/interlingua")
SPLIT = "test_2016_flickr"
FAMILIES = ("demo", "pivot_en", "zs_baseline", "zs_residual")


def family(name: str) -> str:
    return next((f for f in FAMILIES if name.startswith(f + "_")), name.rsplit("_", 1)[0])


def checkpoint(run: Path) -> Path:
    """The checkpoint selected on dev: best.pt (last.pt for a run that never validated)."""
    for name in ("best.pt", "last.pt"):
        if (run / name).exists():
            return run / name
    raise SystemExit(f"{run} holds no checkpoint: train it first")


def crosslingual(run: Path, data_root: Path) -> dict[str, Any]:
    """The run's cross-lingual report on the test split (computed once, then read from eval/)."""
    out = run / "eval"
    cached = out / f"crosslingual_report_{SPLIT}.json"
    if not cached.exists():
        from interlingua.evaluation.crosslingual_report import evaluate_crosslingual, write_crosslingual
        report = evaluate_crosslingual(checkpoint(run), split=SPLIT, device="cpu", progress=False)
        write_crosslingual(report, out)
    return json.loads(cached.read_text())


def downstream(run: Path, data_root: Path) -> dict[str, float]:
    """Test accuracy of each SentEval-style downstream task (computed once, then read from eval/)."""
    out = run / "eval"
    cached = out / "downstream.json"
    if not cached.exists():
        from interlingua.evaluation.vectors import evaluate_sentence_vectors
        evaluate_sentence_vectors("downstream", checkpoint(run), data_root, out, references=False, jobs=1)
    results = json.loads(cached.read_text())["results"]
    return {task: r["model"]["acc"] for task, r in results.items() if "model" in r}


def training(run: Path) -> dict[str, Any]:
    """Steps, training seconds and the dev record the checkpoint was selected with, from metrics.jsonl."""
    from interlingua.records import read_validations
    valid = read_validations(run / "metrics.jsonl")
    best = max(valid, key=lambda v: -np.inf if v.mean_bleu is None else v.mean_bleu)
    return {"steps": valid[-1].step, "train_seconds": valid[-1].elapsed_s, "dev_bleu": best.mean_bleu,
            "dev_zero_shot_bleu": best.zero_shot_bleu, "curve": [(v.elapsed_s, v.mean_bleu) for v in valid]}


def agreement(name: str) -> str:
    """The agreement settings of a run, from its config.json (what it was trained with)."""
    cfg = json.loads((RUNS / name / "config.json").read_text())
    a = cfg["train"].get("agreement", {})
    seed = f", seed {cfg['train']['seed']}" if cfg["train"]["seed"] != 1234 else ""
    if not a or a.get("weight", 0) == 0:
        return "none" + seed
    extra = "" if a.get("loss") != "contrastive" else f", T {a['temperature']:g}" + (
        ", own-language negatives" if a.get("negatives") == "both" else "")
    layer = "" if a.get("layer") is None else f", layer {a['layer']}"
    return f"{a['loss']} w {a['weight']:g}{extra}{layer}{seed}"


def row(name: str, data_root: Path) -> dict[str, Any]:
    run = RUNS / name
    report = crosslingual(run, data_root)
    tasks = downstream(run, data_root)
    s = report["summary"]
    return {"run": name, "family": family(name), "agreement": agreement(name), **training(run),
            "checkpoint": checkpoint(run).name,
            "supervised_bleu": s["bleu_supervised_mean"], "zero_shot_bleu": s["bleu_zero_shot_mean"],
            "pivot_bleu": s["bleu_pivot_mean"], "off_target_zero_shot": s["off_target_zero_shot_mean"],
            "retrieval_mean": s["retrieval_mean"], "retrieval_min": s["retrieval_min"],
            "retrieval_centered_mean": s["retrieval_centered_mean"],
            "margin": s["margin_mean"], "probe": s["probe_accuracy"], "probe_chance": s["probe_chance"],
            "downstream": float(np.mean(list(tasks.values()))) if tasks else None, "downstream_tasks": tasks,
            "retrieval": {p: v["retrieval"] for p, v in report["pairs"].items()},
            "bleu": {p: v["bleu"] for p, v in report["pairs"].items()},
            "pivot": {p: v["pivot_bleu"] for p, v in report["pairs"].items() if v["pivot_bleu"] is not None}}


def _f(x: Any, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def markdown(rows: list[dict[str, Any]]) -> str:
    head = ("| run | agreement | steps | train min | dev BLEU (selection) | supervised BLEU | zero-shot BLEU | "
            "pivot BLEU | off-target zero-shot % | retrieval % mean / min | centred | probe % (chance) | margin | "
            "downstream avg |\n|" + "---|" * 14)
    lines = [head]
    for r in rows:
        lines.append(f"| {r['run']} | {r['agreement']} | {r['steps']} | {r['train_seconds'] / 60:.1f} | "
                     f"{_f(r['dev_bleu'])} | "
                     f"{_f(r['supervised_bleu'])} | {_f(r['zero_shot_bleu'])} | {_f(r['pivot_bleu'])} | "
                     f"{_f(r['off_target_zero_shot'])} | {_f(r['retrieval_mean'])} / {_f(r['retrieval_min'])} | "
                     f"{_f(r['retrieval_centered_mean'])} | {_f(r['probe'])} ({_f(r['probe_chance'])}) | "
                     f"{_f(r['margin'], 3)} | {_f(r['downstream'])} |")
    out = ["\n".join(lines), "", "Retrieval % per pair (top-1, plain cosine, 1,000 test captions):", ""]
    for fam in dict.fromkeys(r["family"] for r in rows):
        members = [r for r in rows if r["family"] == fam]
        pairs = sorted(members[0]["retrieval"])
        out.append("| run | " + " | ".join(pairs) + " |\n|" + "---|" * (len(pairs) + 1))
        out.extend(f"| {r['run']} | " + " | ".join(_f(r["retrieval"].get(p)) for p in pairs) + " |" for r in members)
        out.append("")
    return "\n".join(out)


def plot_curves(rows: list[dict[str, Any]], path: Path) -> None:
    from interlingua.figures import plt, save_figure
    families = list(dict.fromkeys(r["family"] for r in rows))
    fig, axes = plt.subplots(1, len(families), figsize=(5 * len(families), 4), squeeze=False)
    for ax, fam in zip(axes[0], families):
        for r in (r for r in rows if r["family"] == fam):
            t, b = zip(*r["curve"])
            ax.plot(np.array(t) / 60, b, marker=".", label=f"{r['agreement']}")
        ax.set_title(f"{fam}: dev mean BLEU (trained directions)")
        ax.set_xlabel("training minutes")
        ax.legend(fontsize=7)
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run names under runs/multi30k/cpu/interlingua")
    parser.add_argument("--data-root", default="../shared/data")
    parser.add_argument("--out", default="docs/results/interlingua", help="stem of the .json and _curves.png files")
    args = parser.parse_args()
    rows = [row(name, Path(args.data_root)) for name in args.runs]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    plot_curves(rows, out.with_name(out.name + "_curves.png"))
    print(markdown(rows))


if __name__ == "__main__":
    main()
