"""`interlingua experiment`: train recipes, select on dev, score test, write a paper-style table.

Each recipe is trained (or resumed, or skipped when already finished), its selected checkpoint
(`averaged.pt` of a run with `train.average_best`, else `best.pt`) translated in every direction
of test_2016_flickr, and the results gathered into one markdown report: source rows x target
columns, our BLEU with the paper's beside it, zero-shot cells marked, and the compute each run
took. Runs with zero-shot directions also get a zero-shot study table (paper 004): supervised and
zero-shot means, cased and lowercased, off-target rates, and with `pivot` the same zero-shot
directions translated through the pivot language. Runs fine-tuned from a checkpoint that
`interlingua extend` gave a new language get an adding-a-language table (paper 004, Table 7):
the new language's supervised and zero-shot directions, and the old directions beside the runs
without it.
"""
from __future__ import annotations

import json
import re
import time
from concurrent.futures import as_completed
from pathlib import Path
from typing import Any, cast

import torch

from interlingua.atomic_files import check_writable, write_text_atomic
from interlingua.config import TrainConfig, load_config
from interlingua.data.corpus import load_corpus
from interlingua.errors import DataError
from interlingua.evaluation.bleu_matrix import MatrixResult, bleu_matrix, write_matrix
from interlingua.evaluation.dev_curves import dev_curve, offset_from_curve
from interlingua.evaluation.paper_bleu import paper_bleu
from interlingua.evaluation.pivot_comparison import compare_with_pivot
from interlingua.evaluation.plots import plot_dev_bleu_against_loss
from interlingua.inference.api import load
from interlingua.model_files.checkpoint import Checkpoint, TrainingState
from interlingua.precision import cpu_model
from interlingua.training.metrics import MetricsLog
from interlingua.training.patience import patience_spent
from interlingua.training.trainer import budget_spent, train
from interlingua.workers import process_pool


def paper_setting(recipe_name: str) -> str | None:
    """Map a recipe name to its Table 1 block (None when the paper has no such block).

    A `_long` or `_xlong` recipe is the same model with a larger budget, so it maps to the same block."""
    name = re.sub(r"_x?long$", "", re.sub(r"^(cpu|paper)_", "", recipe_name))
    if re.fullmatch(r"bilingual_nobridge_[a-z]+_[a-z]+", name):
        return "bilingual_nobridge"
    if re.fullmatch(r"bilingual_[a-z]+_[a-z]+", name):
        return "bilingual"
    return name if name in ("pivot_en", "pivot_en_mono", "m2m", "m2m_mono") else None


def finished(work: Path, tc: TrainConfig) -> bool:
    """Whether the run in `work` has ended: its step or time budget spent, or its dev loss stopped
    improving (`train.patience`). A run not yet started or stopped part-way (a session's end, Ctrl-C)
    is not: the runner resumes it."""
    last = work / "last.pt"
    if not last.exists():
        return False
    st = Checkpoint.read(last).training or TrainingState()
    # with `epochs` the run worked out its own last step; else the config's (a continued run may raise it)
    max_steps = tc.max_steps if tc.epochs is None or st.max_steps is None else st.max_steps
    return budget_spent(tc, max_steps, st.step, st.elapsed) or patience_spent(st.history, tc.patience)


TEST_SPLIT = "test_2016_flickr"
"""The split every run is scored on (the papers' Multi30k test set)."""

CHECKPOINTS = ("selected", "last", "best", "averaged")
"""What `interlingua experiment --checkpoint` scores: the selected one (`selected_checkpoint`), or a named file."""


def scored_checkpoint(work: Path, which: str = "selected") -> Path:
    """The checkpoint of a finished run that `which` names (one of `CHECKPOINTS`)."""
    if which == "selected":
        return selected_checkpoint(work)
    path = work / f"{which}.pt"
    if not path.is_file():
        why = " (the run has no train.average_best)" if which == "averaged" else ""
        raise DataError(f"{path} does not exist{why}: choose another --checkpoint")
    return path


def selected_checkpoint(work: Path) -> Path:
    """The checkpoint a finished run is scored with: the average of its lowest-dev-loss
    checkpoints where the run made one (`train.average_best`), else its best by dev BLEU."""
    averaged = work / "averaged.pt"
    return averaged if averaged.exists() else work / "best.pt"


def extension_of(init: str | None) -> dict[str, Any] | None:
    """What the checkpoint a run was fine-tuned from (`train --init`) added with `interlingua extend`:
    {"languages": [...], "from": the checkpoint extended}; None for any other run."""
    if not init or not Path(init).is_file():
        return None
    extended = Checkpoint.read(init).extended
    if not extended:
        return None
    return {"languages": [e.lang for e in extended], "from": extended[0].source}


def mean_tokens_per_second(work: Path) -> float | None:
    """Mean training throughput (source + target tokens per second) over the run's log windows."""
    rates = [r["tokens_per_s"] for r in MetricsLog(work).records() if r.get("type") == "train"]
    return round(sum(rates) / len(rates), 1) if rates else None


def run_recipe(recipe: Path, overrides: list[str], beam: int, max_test: int | None,
               pivot: str | None = None, checkpoint: str = "selected", no_repeat_ngram: int = 0) -> dict[str, Any]:
    """Train (or resume, or skip) one recipe and score its checkpoint (`checkpoint`, one of
    `CHECKPOINTS`) on test_2016_flickr; with `pivot`, also its zero-shot directions translated through
    the pivot language; `no_repeat_ngram` as in `Model.translate`.

    The scored run is cached in <work_dir>/eval/experiment.json (for another checkpoint, beam or blocking,
    experiment_<checkpoint>_beam<N>[_norepeat<N>].json), keyed by the checkpoint's modification time and the
    search settings, so gathering finished runs into a table is cheap."""
    cfg = load_config(recipe, overrides)
    work = Path(cfg.work_dir)
    if not finished(work, cfg.train):
        train(cfg, resume=(work / "last.pt").exists())
    best = scored_checkpoint(work, checkpoint)
    key = {"best_mtime": best.stat().st_mtime, "beam": beam, "max_test": max_test, "recipe": recipe.stem,
           "checkpoint": best.name, "pivot": pivot, "scores": 2,
           **({"no_repeat_ngram": no_repeat_ngram} if no_repeat_ngram else {})}  # keys of earlier runs stay valid
    blocking = f"_norepeat{no_repeat_ngram}" if no_repeat_ngram else ""
    variant = "" if checkpoint == "selected" and beam == 1 and not blocking else f"_{checkpoint}_beam{beam}{blocking}"
    cache = work / "eval" / f"experiment{variant}.json"
    if cache.is_file():
        cached = json.loads(cache.read_text())
        if cached.get("key") == key:
            if "directions" not in cached["run"]["compute"]:  # scored before runs recorded it: add, don't rescore
                cached["run"]["compute"]["directions"] = len(Checkpoint.read(work / "last.pt").directions)
                write_text_atomic(cache, json.dumps(cached, indent=1))
            return cached["run"]
    last = Checkpoint.read(work / "last.pt")  # its config is the one the last training session ran with
    state = last.training or TrainingState()
    t0 = time.perf_counter()
    model = load(best, cfg.train.device)
    matrix = bleu_matrix(model, cfg.corpus, TEST_SPLIT, beam_size=beam, max_sentences=max_test, progress=False,
                         no_repeat_ngram=no_repeat_ngram)
    named = ("" if checkpoint == "selected" else f"_{best.stem}") + blocking
    write_matrix(matrix, work / "eval", f"bleu_{TEST_SPLIT}_beam{beam}{named}", title=recipe.stem)
    pivoted = None
    if pivot and matrix.zero_shot and pivot in model.languages.sources and pivot in model.languages.targets:
        pivoted = bleu_matrix(model, cfg.corpus, TEST_SPLIT, beam_size=beam, max_sentences=max_test,
                              progress=False, pivot=pivot, pairs=matrix.zero_shot, no_repeat_ngram=no_repeat_ngram)
        write_matrix(pivoted, work / "eval", f"bleu_{TEST_SPLIT}_beam{beam}{named}_pivot-{pivot}",
                     title=f"{recipe.stem}, pivot {pivot}")
    run = {
        "recipe": recipe.stem, "name": cfg.name, "setting": paper_setting(cfg.name),
        "checkpoint": best.name,
        "added": extension_of(state.init),
        "matrix": matrix.to_json(),
        "dev_curve": dev_curve(state.history),
        "pivot_matrix": pivoted.to_json() if pivoted else None,
        "zero_shot_vs_pivot": compare_with_pivot(matrix, pivoted, not cfg.preprocess.lowercase).to_json()
        if pivoted else None,
        "compute": {"tokens_per_s": mean_tokens_per_second(work), "train_minutes": round(state.elapsed / 60, 1),
                    "steps": state.step, "directions": len(last.directions),
                    "best_dev_bleu": state.best_bleu, "validations": len(state.history),
                    "eval_seconds": round(time.perf_counter() - t0, 1),
                    "threads": last.experiment_config().train.threads or torch.get_num_threads(),
                    "device": model.device.type, "machine": _machine(model.device)},
    }
    write_text_atomic(cache, json.dumps({"key": key, "run": run}, indent=1))
    return run


def _cell(ours: float | None, paper: float | None, zero_shot: bool) -> str:
    if ours is None:
        return "-"
    text = f"{ours:.1f}" + (f" ({paper:.1f})" if paper is not None else "")
    return f"*{text}*" if zero_shot else text


def _machine(device: torch.device) -> str:
    """Where the run was scored: the GPU's name on CUDA, else the CPU model (trained on the same machine)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_model()


def _compute_place(compute: dict[str, Any]) -> str:
    machine = compute["machine"]
    if compute.get("device") == "cuda":  # runs scored before this key was written were all on a CPU
        return f"on {machine}"
    return f"{compute['threads']} CPU threads ({machine})"


def results_markdown(runs: list[dict[str, Any]], title: str = "Multi30k results") -> str:
    out = [f"# {title}", "",
           "test_2016_flickr, lowercased sacreBLEU (13a). Each cell: ours (paper, journal Table 1). "
           "*Italic* = zero-shot (never trained). Rows: source, columns: target.", ""]
    for run in runs:
        m = MatrixResult.from_json(run["matrix"])
        c = run["compute"]
        out += [f"## {run['recipe']}", "",
                f"Compute: {c['train_minutes']} min of training, {c['steps']} steps, "
                f"{_compute_place(c)}; best mean dev BLEU "
                f"{c['best_dev_bleu'] if c['best_dev_bleu'] is None else round(c['best_dev_bleu'], 2)}; "
                f"beam {m.beam_size}.", ""]
        zs = set(m.zero_shot)
        out += ["| src \\ tgt | " + " | ".join(m.languages) + " |", "|---" * (len(m.languages) + 1) + "|"]
        for s in m.languages:
            cells = [_cell(m.bleu.get(s, {}).get(t), paper_bleu(run["setting"] or "", s, t), (s, t) in zs)
                     if s != t else "-"
                     for t in m.languages]
            out.append(f"| **{s}** | " + " | ".join(cells) + " |")
        if zs:
            mean_zs = sum(m.bleu[s][t] for s, t in zs) / len(zs)
            out += ["", f"Mean zero-shot BLEU: {mean_zs:.2f}"]
        out.append("")
    return "\n".join(out)


def steps_per_direction(run: dict[str, Any]) -> float | None:
    """Training steps per direction (a run's budget, comparable across direction counts); None if unknown."""
    c = run["compute"]
    return c["steps"] / c["directions"] if c.get("directions") else None


def summary_markdown(runs: list[dict[str, Any]]) -> list[str]:
    """The comparisons the papers draw: multilingual vs bilingual on supervised pairs, zero-shot means.

    The multilingual-vs-bilingual table compares runs with the same training steps per direction
    (a larger-budget run such as `m2m_mono_long` sits out)."""
    def cell(run: dict[str, Any], s: str, t: str) -> float | None:
        return run["matrix"]["bleu"].get(s, {}).get(t)

    def scored_pairs(run: dict[str, Any]) -> list[tuple[str, str]]:
        return [(s, t) for s, row in run["matrix"]["bleu"].items() for t, v in row.items() if v is not None and s != t]

    bilingual = {scored_pairs(r)[0]: r for r in runs if r["setting"] == "bilingual" and scored_pairs(r)}
    budgets = {steps_per_direction(r) for r in bilingual.values()}
    multi = [r for r in runs if r["setting"] in ("pivot_en", "pivot_en_mono", "m2m", "m2m_mono")
             and steps_per_direction(r) in budgets]
    lines: list[str] = []
    if bilingual and multi:
        lines += ["## Multilingual vs bilingual (same steps per direction)", "",
                  "| pair | bilingual | " + " | ".join(r["recipe"] for r in multi) + " |",
                  "|---" * (len(multi) + 2) + "|"]
        for (s, t), run in sorted(bilingual.items()):
            base = cell(run, s, t)
            assert base is not None  # (s, t) is a scored pair of this run
            cells = []
            for r in multi:
                v = cell(r, s, t)
                cells.append("-" if v is None else f"{v:.1f} ({v - base:+.1f})")
            lines.append(f"| {s}->{t} | {base:.1f} | " + " | ".join(cells) + " |")
        lines.append("")
    # every zero-shot direction of a run's matrix is scored
    zs = [(r["recipe"], sum(cast(float, cell(r, *p.split("-"))) for p in r["matrix"]["zero_shot"])
           / len(r["matrix"]["zero_shot"]))
          for r in runs if r["matrix"]["zero_shot"]]
    if zs:
        lines += ["## Mean zero-shot BLEU", "", "| run | mean zero-shot BLEU |", "|---|---|"]
        lines += [f"| {name} | {v:.2f} |" for name, v in zs] + [""]
    return lines


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def zero_shot_study_markdown(runs: list[dict[str, Any]]) -> list[str]:
    """Paper 004's comparison: per run, mean BLEU over the trained and over the zero-shot directions
    (cased / lowercased), the zero-shot directions through the pivot, and off-target rates."""
    study = [r for r in runs if r["matrix"]["zero_shot"]]
    if not study:
        return []
    lines = ["## Zero-shot study", "",
             "Means over directions of test_2016_flickr; BLEU as cased / lowercased sacreBLEU. Off-target: % of "
             "outputs that langid.py (restricted to the model's languages) does not find in the requested language "
             "(our addition; its ceiling on the references is below). Pivot: the run's own zero-shot directions "
             "translated through the pivot language.", "",
             "| run | checkpoint | steps | train min | tokens/s | supervised BLEU | zero-shot BLEU "
             "| zero-shot via pivot | off-target zero-shot % | off-target supervised % |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    ceilings: dict[str, float] = {}
    pair_rows: list[str] = []
    for run in study:
        m = MatrixResult.from_json(run["matrix"])
        p = MatrixResult.from_json(run["pivot_matrix"]) if run.get("pivot_matrix") else None
        c = run["compute"]
        sup = f"{_fmt(m.mean('bleu_cased', False))} / {_fmt(m.mean('bleu', False))}"
        zs = f"{_fmt(m.mean('bleu_cased', True))} / {_fmt(m.mean('bleu', True))}"
        # its pairs are the zero-shot ones
        piv = f"{_fmt(p.mean('bleu_cased', True))} / {_fmt(p.mean('bleu', True))}" if p else "-"
        lines.append(f"| {run['recipe']} | {run.get('checkpoint', 'best.pt')} | {c['steps']} | {c['train_minutes']} | "
                     f"{_fmt(c.get('tokens_per_s'), 0)} | {sup} | {zs} | {piv} | {_fmt(m.mean('off_target', True))} | "
                     f"{_fmt(m.mean('off_target', False))} |")
        ceilings.update(m.lid_ceiling)
        cells = []
        tested = (run.get("zero_shot_vs_pivot") or {}).get("directions", {})
        for s_, t in m.zero_shot:
            pv = p.bleu_cased.get(s_, {}).get(t) if p else None
            p_value = tested.get(f"{s_}-{t}", {}).get("p_value")
            cells.append(f"{s_}-{t} {_fmt(m.bleu_cased[s_][t])}"
                         + (f" (pivot {_fmt(pv)}" + (f", p {p_value:.2f}" if p_value is not None else "") + ")"
                            if pv is not None else "")
                         + f", off {_fmt(m.off_target.get(s_, {}).get(t), 0)}%")
        pair_rows.append(f"| {run['recipe']} | " + "; ".join(cells) + " |")
    lines += ["", "Per zero-shot direction: cased BLEU (through the pivot; p: the paired bootstrap test of direct "
              "against pivot in the BLEU the model was trained for), off-target rate.", "",
              "| run | directions |", "|---|---|", *pair_rows, ""]
    if ceilings:
        lines += ["langid.py on the reference sentences, % identified correctly (the ceiling of the off-target "
                  "measure): " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(ceilings.items())), ""]
    return lines


def added_language_markdown(runs: list[dict[str, Any]]) -> list[str]:
    """Paper 004's Table 7 for runs fine-tuned after `interlingua extend`: the new languages'
    supervised directions (with the pivot) and zero-shot directions, both ways, and the old
    directions' means beside those of the runs over the old languages only (the model before the
    language was added, and any run continued without it)."""
    added = [r for r in runs if r.get("added")]
    if not added:
        return []
    new = {lang for r in added for lang in r["added"]["languages"]}
    old_sets = {frozenset(r["matrix"]["languages"]) - new for r in added}
    shown = [r for r in runs if r.get("added") or frozenset(r["matrix"]["languages"]) in old_sets]
    lines = ["## Adding a language", "",
             f"New language(s): {', '.join(sorted(new))}. Old: directions between the languages the model had "
             "before; new: directions from or into a new language. Means of cased BLEU on test_2016_flickr; "
             "'from' = the new language is the source, 'into' = it is the target; off-target as above.", "",
             "| run | added to | steps | old supervised | old zero-shot | new supervised, from / into | "
             "new zero-shot, from / into | new zero-shot via pivot | off-target new zero-shot % |",
             "|---|---|---|---|---|---|---|---|---|"]

    def is_old(s: str, t: str) -> bool:
        return s not in new and t not in new

    def from_new(s: str, t: str) -> bool:
        return s in new

    def into_new(s: str, t: str) -> bool:
        return t in new

    for run in shown:
        m = MatrixResult.from_json(run["matrix"])
        p = MatrixResult.from_json(run["pivot_matrix"]) if run.get("pivot_matrix") else None
        origin = run["added"]["from"] if run.get("added") else "-"
        if run.get("added"):
            sup = f"{_fmt(m.mean('bleu_cased', False, from_new))} / {_fmt(m.mean('bleu_cased', False, into_new))}"
            zs = f"{_fmt(m.mean('bleu_cased', True, from_new))} / {_fmt(m.mean('bleu_cased', True, into_new))}"
            piv = (f"{_fmt(p.mean('bleu_cased', True, from_new))} / {_fmt(p.mean('bleu_cased', True, into_new))}"
                   if p else "-")
            off = _fmt(m.mean("off_target", True, lambda s, t: not is_old(s, t)))
        else:
            sup = zs = piv = off = "-"
        lines.append(f"| {run['recipe']} | {origin} | {run['compute']['steps']} | "
                     f"{_fmt(m.mean('bleu_cased', False, is_old))} | "
                     f"{_fmt(m.mean('bleu_cased', True, is_old))} | {sup} | {zs} | {piv} | {off} |")
    return lines + [""]


def _dev_curves(runs: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Each run's validations as (dev loss, dev BLEU), by recipe."""
    return {r["recipe"]: [(loss, bleu) for _, loss, bleu in r.get("dev_curve", [])] for r in runs}


def dev_curve_markdown(runs: list[dict[str, Any]]) -> list[str]:
    """Does each run lie on the reference run's dev-BLEU-against-dev-loss curve? At the run's lowest
    dev loss, its dev BLEU beside the reference's at that loss. The reference is the first run whose
    recipe starts with "baseline", else the first run."""
    curves = {name: curve for name, curve in _dev_curves(runs).items() if curve}
    if len(curves) < 2:
        return []
    names = list(curves)
    ref = next((name for name in names if name.startswith("baseline")), names[0])
    lines = ["## Dev BLEU against dev loss", "",
             f"Each run at its lowest mean dev loss (trained directions, greedy dev BLEU) beside {ref}'s dev BLEU "
             f"at the same loss, read off {ref}'s validations that lowered its loss, joined linearly (\"-\": that "
             f"loss lies outside them). A negative difference: the run gets less BLEU out of the same loss. "
             f"Every validation is drawn in the `_dev_curves.png` beside this report.", "",
             f"| run | lowest dev loss | dev BLEU there | {ref} at that loss | difference |", "|---|---|---|---|---|"]
    for name in (name for name in names if name != ref):
        offset = offset_from_curve(curves[ref], curves[name])
        assert offset is not None  # only runs with validations are here
        lines.append(f"| {name} | {offset.loss:.3f} | {_fmt(offset.bleu, 2)} | {_fmt(offset.reference_bleu, 2)} | "
                     f"{_fmt(offset.offset, 2)} |")
    return lines + [""]


def _write(runs: list[dict[str, Any]], out: Path, notes: Path | None = None) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    text = results_markdown(runs) + "\n" + "\n".join(summary_markdown(runs) + zero_shot_study_markdown(runs)
                                                   + dev_curve_markdown(runs) + added_language_markdown(runs))
    if notes is not None and notes.is_file():
        text += "\n" + notes.read_text()
    write_text_atomic(out, text)
    write_text_atomic(out.with_suffix(".json"), json.dumps(runs, indent=1))
    curves = _dev_curves(runs)
    if any(curves.values()):
        plot_dev_bleu_against_loss(curves, out.with_name(f"{out.stem}_dev_curves.png"))


def _run_one_thread(recipe: Path, overrides: list[str], beam: int, max_test: int | None,
                    pivot: str | None, checkpoint: str, no_repeat_ngram: int) -> dict[str, Any]:
    torch.set_num_threads(1)
    return run_recipe(recipe, overrides, beam, max_test, pivot, checkpoint, no_repeat_ngram)


def check_recipes(recipes: list[Path], overrides: list[str], out: Path, pivot: str | None = None) -> None:
    """What would stop the runner after hours of training, or leave out what was asked for, checked before the first
    step: every recipe's config, its corpus and the split it is scored on (`TEST_SPLIT`), the pivot a language of each
    corpus, and a table that can be written."""
    for recipe in recipes:
        corpus = load_corpus(load_config(recipe, overrides).corpus)
        corpus.groups(TEST_SPLIT)
        if pivot is not None and pivot not in corpus.languages:
            raise DataError(f"--pivot {pivot}: not a language of {recipe}'s corpus ({', '.join(corpus.languages)})")
    check_writable(out)


def run_experiments(recipes: list[Path], overrides: list[str], out: Path, beam: int = 1,
                    max_test: int | None = None, jobs: int = 1, notes: Path | None = None,
                    pivot: str | None = None, checkpoint: str = "selected",
                    no_repeat_ngram: int = 0) -> list[dict[str, Any]]:
    """Run recipes (in `jobs` processes of one thread each when jobs > 1); the table is
    rewritten as runs finish and always lists them in the order given, with a plot of every run's
    dev BLEU against its dev loss beside it (<out>_dev_curves.png). `notes` (markdown, e.g. a
    discussion of the numbers) is appended to the report; `pivot` also translates each run's
    zero-shot directions through that language; `checkpoint` is what is scored (`CHECKPOINTS`); `no_repeat_ngram`
    as in `Model.translate`."""
    recipes = [Path(r) for r in recipes]
    check_recipes(recipes, overrides, out, pivot)
    done: dict[int, dict[str, Any]] = {}
    if jobs <= 1:
        for i, recipe in enumerate(recipes):
            done[i] = run_recipe(recipe, overrides, beam, max_test, pivot, checkpoint, no_repeat_ngram)
            _write([done[j] for j in sorted(done)], out, notes)
    else:
        with process_pool(jobs, preload=(__name__,)) as pool:
            futures = {pool.submit(_run_one_thread, r, overrides, beam, max_test, pivot, checkpoint, no_repeat_ngram): i
                       for i, r in enumerate(recipes)}
            for fut in as_completed(futures):
                done[futures[fut]] = fut.result()
                _write([done[j] for j in sorted(done)], out, notes)
    return [done[i] for i in range(len(recipes))]
