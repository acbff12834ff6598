"""The suites: which tasks run, on which data, under what time budget, and what the report shows.

`run_suite(name, embedders, data_root, out_dir)` evaluates every embedder on the suite's
tasks, writes `out_dir/<suite>.md` and `.json` and returns the result. A missing data set
is skipped with a note; an embedder lacking a language is skipped for the tasks needing it.
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, Future
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
from tqdm import tqdm

from interlingua.evaluation.sentence.classification import evaluate_classification, majority_accuracy, task_majority
from interlingua.evaluation.sentence.crosslingual import xnli_transfer
from interlingua.evaluation.sentence.features import PAIR_FEATURES
from interlingua.evaluation.sentence.heads import plot_per_head_accuracy
from interlingua.evaluation.sentence.nli import sick_entailment, xnli_english
from interlingua.evaluation.sentence.paper_numbers import LOCAL_NOTE, LOCAL_SUFFIX, paper_rows
from interlingua.evaluation.sentence.probing import ProbeConfig, fit_probe, probe_features
from interlingua.evaluation.sentence.probing_sets import (OFFICIAL_PROBING, ProbingTask, SplitSizes,
                                                          local_probing_tasks, official_probing_tasks)
from interlingua.evaluation.sentence.protocol import EmbedderLike, Encoder, EvaluationError
from interlingua.evaluation.sentence.report import Table, jsonable, render_markdown, write_report
from interlingua.evaluation.sentence.retrieval import multiway_retrieval
from interlingua.evaluation.sentence.similarity import sts_cosine, trainable_relatedness
from interlingua.evaluation.sentence.tasks import (CLASSIFICATION_TASKS, MULTI30K_LANGS, STS_YEARS, XNLI_LANGS,
                                                   ClassificationTask, MissingDataError, Pairs,
                                                   load_classification, load_multi30k, load_sick, load_sts, load_stsb,
                                                   load_xnli, subsample)
from interlingua.workers import process_pool

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Budget:
    """Sizes and fold counts; the defaults keep `all` on a real model inside 30 minutes on 2 cores."""

    cv_folds: int = 10
    inner_folds: int = 3
    xnli_folds: int = 5
    xnli_inner_folds: int = 3
    sst_train: int | None = 20000
    probe_sizes: SplitSizes = SplitSizes(6000, 1000, 1000)
    official_probe_limits: SplitSizes | None = SplitSizes(10000, 1000, 1000)
    wc_words: int = 1000
    per_head_train: int | None = 2000
    parse_limit: int | None = 40000
    max_examples: int | None = None  # cap on every split of every data set (seeded subsets)

    @classmethod
    def make(cls, quick: bool = False, max_examples: int | None = None) -> Budget:
        """The full budget, or a seconds-long smoke budget with `quick`."""
        if not quick:
            return cls(max_examples=max_examples)
        small = SplitSizes(400, 120, 120)
        return cls(cv_folds=3, inner_folds=2, xnli_folds=3, xnli_inner_folds=2, sst_train=500, probe_sizes=small,
                   official_probe_limits=small, wc_words=40, per_head_train=300, parse_limit=1500, max_examples=max_examples or 400)


@dataclass
class Context:
    """Everything a suite needs; encoders keep their caches across the suites of `all`."""

    encoders: dict[str, Encoder]
    data_root: Path
    out_dir: Path
    budget: Budget
    seed: int = 0
    features: str = "full"
    probing_dir: Path | None = None
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    per_head_embedders: list[str] | None = None  # None: every embedder that has heads
    jobs: int = 1  # worker processes for the probe fits

    def cap(self, items, salt: int = 0):
        return subsample(items, self.budget.max_examples, self.seed + salt)


def _new_result(suite: str, ctx: Context) -> dict:
    return {"suite": suite, "embedders": list(ctx.encoders), "settings": {"seed": ctx.seed, "fit_workers": ctx.jobs, **_budget_settings(ctx)},
            "results": {}, "reference": {}, "tables": [], "notes": [], "skipped": {}, "elapsed_s": {}, "encode_s": {}}


def _budget_settings(ctx: Context) -> dict:
    b = asdict(ctx.budget)
    for key in ("probe_sizes", "official_probe_limits"):
        if b[key] is not None:
            b[key] = "/".join(str(v) for v in b[key].values())
    return b


def _able(ctx: Context, result: dict, task: str, needs: tuple[str, ...]) -> dict[str, Encoder]:
    """The encoders that have every language in `needs`; the others get a None result and a note."""
    for key in ("results", "elapsed_s", "encode_s"):
        result[key].setdefault(task, {})
    able: dict[str, Encoder] = {}
    for name, enc in ctx.encoders.items():
        lacking = [lang for lang in needs if not enc.has(lang)]
        if lacking:
            result["results"][task][name] = None
            result["notes"].append(f"{task}: '{name}' skipped, no encoder for {', '.join(lacking)}")
        else:
            able[name] = enc
    return able


def _run_each(result: dict, task: str, ctx: Context, needs: tuple[str, ...], fn: Callable[[Encoder], dict]) -> None:
    """Run `fn` for every embedder that has the languages in `needs`; record results and seconds."""
    for name, enc in _able(ctx, result, task, needs).items():
        start, encoding = time.perf_counter(), enc.encode_seconds
        log.info("%s: %s", task, name)
        result["results"][task][name] = fn(enc)
        result["elapsed_s"][task][name] = round(time.perf_counter() - start, 2)
        result["encode_s"][task][name] = round(enc.encode_seconds - encoding, 2)


def _cells(result: dict, task: str, names: list[str], getter: Callable[[dict], float | None]) -> list:
    return [None if result["results"].get(task, {}).get(n) is None else getter(result["results"][task][n]) for n in names]


def _add_average(table: Table) -> None:
    """AVG row over the rows where every column has a value (so averages compare like with like)."""
    full = [cells for _, cells in table.rows if all(isinstance(c, (int, float)) for c in cells)]
    if len(full) > 1:
        table.add("AVG", [float(np.mean([row[i] for row in full])) for i in range(len(table.columns))])


def _with_paper(table: Table) -> Table:
    """Attach the papers' published Multi30k numbers for the table's tasks (shown under it, kept in the JSON)."""
    labels = [label for label, _ in table.rows]
    table.paper = paper_rows(labels)
    if table.paper and any(label.endswith(LOCAL_SUFFIX) for label in labels):
        table.paper_note = LOCAL_NOTE
    return table


# ----------------------------------------------------------------------------- downstream

def _cap_classification(task: ClassificationTask, ctx: Context) -> ClassificationTask:
    return replace(task, train=ctx.cap(task.train, 1), dev=None if task.dev is None else ctx.cap(task.dev, 2),
                   test=None if task.test is None else ctx.cap(task.test, 3))


def run_downstream(ctx: Context) -> dict:
    """SentEval classification: MR, CR, SUBJ, MPQA (10-fold CV), TREC, SST2; accuracy %."""
    result = _new_result("downstream", ctx)
    names = list(ctx.encoders)
    table = Table("SentEval classification (accuracy %)", names + ["majority"], reference_columns=["majority"])
    for task_name in tqdm(CLASSIFICATION_TASKS, desc="downstream"):
        try:
            task = _cap_classification(load_classification(ctx.data_root, task_name, sst_train_limit=ctx.budget.sst_train,
                                                           seed=ctx.seed), ctx)
        except MissingDataError as err:
            result["skipped"][task_name] = str(err)
            continue
        if task.note:
            result["notes"].append(task.note)
        _run_each(result, task_name, ctx, ("en",), lambda enc: evaluate_classification(
            task, enc, folds=ctx.budget.cv_folds, inner_folds=ctx.budget.inner_folds, seed=ctx.seed))
        result["reference"][task_name] = {"majority": task_majority(task, folds=ctx.budget.cv_folds, seed=ctx.seed)}
        table.add(task_name, _cells(result, task_name, names, lambda r: r["acc"]) + [result["reference"][task_name]["majority"]])
    _add_average(table)
    result["tables"].append(_with_paper(table))
    result["notes"].append(f"MR/CR/SUBJ/MPQA: {ctx.budget.cv_folds}-fold CV with C tuned by inner {ctx.budget.inner_folds}-fold; "
                           f"TREC: C by {ctx.budget.cv_folds}-fold CV on train; SST2: C by dev accuracy. "
                           "Logistic regression on standardised frozen vectors, C in 2^-2..2^3.")
    return result


# ----------------------------------------------------------------------------- similarity

def run_similarity(ctx: Context) -> dict:
    """STS12-16 (cosine, unsupervised) and STS-B / SICK-R (trained relatedness model)."""
    result = _new_result("similarity", ctx)
    names = list(ctx.encoders)
    pearson = Table("Unsupervised STS: cosine vs gold, Pearson (mean over subsets)", names, digits=3)
    spearman = Table("Unsupervised STS: cosine vs gold, Spearman (mean over subsets)", names, digits=3)
    subsets = Table("Unsupervised STS per subset (Pearson)", names, label="set", digits=3)
    for year in tqdm(STS_YEARS, desc="STS"):
        try:
            data = {k: ctx.cap(v, i) for i, (k, v) in enumerate(load_sts(ctx.data_root, year).items())}
        except MissingDataError as err:
            result["skipped"][year] = str(err)
            continue
        _run_each(result, year, ctx, ("en",), lambda enc: sts_cosine(enc, data))
        pearson.add(year, _cells(result, year, names, lambda r: r["all"]["pearson"]["mean"]))
        spearman.add(year, _cells(result, year, names, lambda r: r["all"]["spearman"]["mean"]))
        for sub in data:
            subsets.add(f"{year} {sub}", _cells(result, year, names, lambda r, s=sub: r["subsets"][s]["pearson"]))
    _add_average(pearson)
    _add_average(spearman)
    trained = Table(f"Trainable relatedness: Pearson on test (pair features {PAIR_FEATURES[ctx.features]})", names, digits=3)
    for task, loader, score_range in (("STS-B", lambda: load_stsb(ctx.data_root), (0, 5)),
                                      ("SICK-R", lambda: load_sick(ctx.data_root, "relatedness"), (1, 5))):
        try:
            splits = {k: ctx.cap(v, i) for i, (k, v) in enumerate(loader().items())}
        except MissingDataError as err:
            result["skipped"][task] = str(err)
            continue
        _run_each(result, task, ctx, ("en",), lambda enc: trainable_relatedness(
            enc, splits, score_range=score_range, features=ctx.features, seed=ctx.seed))
        trained.add(task, _cells(result, task, names, lambda r: r["pearson"]))
    result["tables"] += [_with_paper(pearson), spearman, _with_paper(trained), subsets]
    result["notes"].append("STS12-16: SentEval's aggregate is the mean over a year's subsets ('mean'); the JSON also has the "
                           "size-weighted mean ('wmean'). STS-B/SICK-R: SentEval's relatedness model (softmax over score "
                           "points, expected score), early stopping on dev Pearson.")
    return result


# ----------------------------------------------------------------------------- NLI

def run_nli(ctx: Context) -> dict:
    """SICK-E (train/trial/test) and XNLI-en (k-fold on dev-en); accuracy %."""
    result = _new_result("nli", ctx)
    names = list(ctx.encoders)
    table = Table(f"NLI (accuracy %, pair features {PAIR_FEATURES[ctx.features]})", names + ["majority"],
                  reference_columns=["majority"])
    try:
        sick = {k: ctx.cap(v, i) for i, (k, v) in enumerate(load_sick(ctx.data_root, "entailment").items())}
        _run_each(result, "SICK-E", ctx, ("en",), lambda enc: sick_entailment(enc, sick, features=ctx.features, seed=ctx.seed))
        result["reference"]["SICK-E"] = {"majority": majority_accuracy(sick["train"].gold, sick["test"].gold)}
        table.add("SICK-E", _cells(result, "SICK-E", names, lambda r: r["acc"]) + [result["reference"]["SICK-E"]["majority"]])
    except MissingDataError as err:
        result["skipped"]["SICK-E"] = str(err)
    try:
        xnli = ctx.cap(load_xnli(ctx.data_root, "en"), 7)
        _run_each(result, "XNLI-en", ctx, ("en",), lambda enc: xnli_english(
            enc, xnli, folds=ctx.budget.xnli_folds, inner_folds=ctx.budget.xnli_inner_folds, features=ctx.features,
            seed=ctx.seed))
        result["reference"]["XNLI-en"] = {"majority": 100.0 * max(xnli.gold.count(c) for c in set(xnli.gold)) / len(xnli)}
        table.add("XNLI-en", _cells(result, "XNLI-en", names, lambda r: r["acc"]) + [result["reference"]["XNLI-en"]["majority"]])
    except MissingDataError as err:
        result["skipped"]["XNLI-en"] = str(err)
    result["tables"].append(_with_paper(table))
    result["notes"].append(f"SICK-E: C by accuracy on SICK trial. XNLI-en: only the dev set is public here, so "
                           f"{ctx.budget.xnli_folds}-fold CV over it (not comparable to XNLI test numbers).")
    return result


# ----------------------------------------------------------------------------- probing

def _probing_tasks(ctx: Context, result: dict, pool: Executor) -> list[ProbingTask]:
    tasks: list[ProbingTask] = []
    folder = ctx.probing_dir or ctx.data_root / "senteval_probing"
    official, missing = official_probing_tasks(folder, limits=ctx.budget.official_probe_limits, seed=ctx.seed)
    tasks += official
    if missing:
        result["skipped"]["official probing"] = (
            f"{len(missing)} of {len(OFFICIAL_PROBING)} SentEval probing files not found in {folder} "
            "(get them with `interlingua data senteval-probing --dest DIR`, then `--probing-dir DIR`)")
    b = ctx.budget
    try:
        local, notes, not_run = local_probing_tasks(ctx.data_root, b.probe_sizes, seed=ctx.seed, parse_limit=b.parse_limit,
                                                    wc_words=b.wc_words, executor=pool, parts=ctx.jobs)
    except MissingDataError as err:
        result["skipped"]["local probing"] = str(err)
        return tasks
    result["notes"] += [f"probing text pool: {n}" for n in notes]
    for name, reason in not_run.items():
        result["skipped"][f"{name} (local)"] = reason
    sets_dir = ctx.out_dir / "probing_sets"
    for task in local:
        task.write(sets_dir / f"{task.name}.txt")
        task.name = f"{task.name} (local)"
        tasks.append(task)
    result["notes"].append(f"local probing sets written to {sets_dir} (SentEval format)")
    return tasks


def _probe_all(tasks: list[ProbingTask], ctx: Context, result: dict, pool: Executor) -> None:
    """Encode every task here and fit its probes on `pool` (worker processes), filling `result`.

    Encoding stays in this process (the model and its caches live here); each fit starts as
    soon as its vectors exist, so fits of one task overlap the encoding of the next."""
    pending: list[tuple[str, str, float, Future]] = []
    for task in tqdm(tasks, desc="probing: encode"):
        for name, enc in _able(ctx, result, task.name, (task.lang,)).items():
            encoding = enc.encode_seconds
            feats = probe_features(enc, task, per_head=ctx.per_head_embedders is None or name in ctx.per_head_embedders,
                                   per_head_train=ctx.budget.per_head_train, seed=ctx.seed)
            pending.append((task.name, name, enc.encode_seconds - encoding,
                            pool.submit(fit_probe, feats, cfg=ctx.probe, seed=ctx.seed)))
    for task_name, name, encode_s, future in tqdm(pending, desc="probing: fit"):
        res = future.result()
        result["results"][task_name][name] = res
        result["elapsed_s"][task_name][name] = round(encode_s + res["fit_s"], 2)
        result["encode_s"][task_name][name] = round(encode_s, 2)


def run_probing(ctx: Context) -> dict:
    """Probing tasks (official SentEval files when present, locally built sets always) + per-head probing."""
    result = _new_result("probing", ctx)
    names = list(ctx.encoders)
    table = Table(f"Probing (accuracy %, MLP {ctx.probe.hidden} sigmoid units, dropout {ctx.probe.dropout})",
                  names + ["chance"], reference_columns=["chance"])
    per_head: dict[str, dict[str, list[float]]] = {}
    start = time.perf_counter()
    with process_pool(ctx.jobs) as pool:  # parses the probing text, then fits the probes
        tasks = _probing_tasks(ctx, result, pool)
        result["setup_s"] = {"reading and building probing sets": round(time.perf_counter() - start, 2)}
        for task in tasks:
            result["notes"] += [f"{task.name}: {note}" for note in task.notes]
        _probe_all(tasks, ctx, result, pool)
    if ctx.jobs > 1:
        result["notes"].append(f"probes were fitted in {ctx.jobs} worker processes beside the encoding, so the "
                               "per-task seconds (encoding + fitting) add up to more than the suite's wall clock")
    for task in tasks:
        chance = majority_accuracy(task.train.labels, task.test.labels)
        result["reference"][task.name] = {"chance": chance, "sizes": task.sizes(), "source": task.source}
        table.add(task.name, _cells(result, task.name, names, lambda r: r["acc"]) + [chance])
        for name in names:
            heads = (result["results"][task.name].get(name) or {}).get("per_head", {})
            if "acc" in heads:
                per_head.setdefault(name, {})[task.name] = heads["acc"]
            elif "skipped" in heads:
                result["skipped"][f"per-head probing ({name})"] = heads["skipped"]
    result["tables"].append(_with_paper(table))
    for name, accs in per_head.items():
        tasks = list(accs)
        k = len(next(iter(accs.values())))
        head_table = Table(f"Per-head probing, {name}: each bridge head alone (accuracy %)", tasks, label="head", digits=1)
        for h in range(k):
            head_table.add(str(h + 1), [accs[t][h] for t in tasks])
        result["tables"].append(head_table)
        png = plot_per_head_accuracy(accs, ctx.out_dir / f"probing_heads_{_slug(name)}.png", title=f"per-head probing: {name}")
        result["notes"].append(f"per-head accuracy plot for {name}: {png}")
    result["notes"].append(f"per-head probes: training split capped at {ctx.budget.per_head_train} sentences, at most "
                           "10 dev checks, L2 fixed to the value chosen for the mean vector")
    return result


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


# ----------------------------------------------------------------------------- cross-lingual

def run_crosslingual(ctx: Context) -> dict:
    """XNLI transfer: train on one language (or all), test on en/de/fr/es; accuracy %."""
    result = _new_result("crosslingual", ctx)
    names = list(ctx.encoders)
    data: dict[str, Pairs] = {}
    for lang in XNLI_LANGS:
        try:
            data[lang] = load_xnli(ctx.data_root, lang)
        except MissingDataError as err:
            result["skipped"][f"XNLI {lang}"] = str(err)
    if ctx.budget.max_examples is not None and data:
        n = len(next(iter(data.values())))
        keep = np.sort(np.random.default_rng(ctx.seed).choice(n, min(n, ctx.budget.max_examples), replace=False))
        data = {lang: Pairs([p.a[i] for i in keep], [p.b[i] for i in keep], [p.gold[i] for i in keep])
                for lang, p in data.items()}
    if not data:
        return result
    _run_each(result, "XNLI", ctx, (), lambda enc: xnli_transfer(
        enc, data, folds=ctx.budget.xnli_folds, inner_folds=ctx.budget.xnli_inner_folds, features=ctx.features,
        seed=ctx.seed))
    table = Table(f"XNLI transfer (accuracy %, {ctx.budget.xnli_folds}-fold over dev; chance 33.3)", names,
                  label="train → test")
    rows: dict[str, list] = {}
    for j, name in enumerate(names):
        res = result["results"]["XNLI"].get(name) or {}
        if res.get("missing_languages"):
            result["notes"].append(f"XNLI: '{name}' has no encoder for {', '.join(res['missing_languages'])}")
        for train, row in res.get("matrix", {}).items():
            for test, acc in row.items():
                rows.setdefault(f"{train} → {test}", [None] * len(names))[j] = acc
    for label, cells in rows.items():
        table.add(label, cells)
    result["tables"].append(table)
    result["notes"].append("XNLI: only the dev sets are public here; k-fold over example indices, so an example is never "
                           "in training (any language) and test at once. Not comparable to XNLI test numbers.")
    return result


# ----------------------------------------------------------------------------- retrieval

def run_retrieval(ctx: Context) -> dict:
    """Multi30k test_2016_flickr multi-way retrieval: cosine, ratio margin (k=4), both on centred vectors too (accuracy %)."""
    result = _new_result("retrieval", ctx)
    names = list(ctx.encoders)
    texts: dict[str, list[str]] = {}
    for lang in MULTI30K_LANGS:
        try:
            texts[lang] = load_multi30k(ctx.data_root, "test_2016_flickr", lang)
        except MissingDataError as err:
            result["skipped"][f"Multi30k {lang}"] = str(err)
    if len(texts) < 2:
        return result
    if ctx.budget.max_examples is not None:
        n = len(next(iter(texts.values())))
        keep = np.sort(np.random.default_rng(ctx.seed).choice(n, min(n, ctx.budget.max_examples), replace=False))
        texts = {lang: [t[i] for i in keep] for lang, t in texts.items()}
    _run_each(result, "Multi30k", ctx, (), lambda enc: multiway_retrieval(enc, texts, k=4))
    n = len(next(iter(texts.values())))
    for method, title in (("cosine", "cosine nearest neighbour"), ("margin", "ratio margin, k=4"),
                          ("centered", "cosine after subtracting each language's mean vector"),
                          ("centered_margin", "ratio margin, k=4, after subtracting each language's mean vector")):
        table = Table(f"Multi30k test_2016_flickr translation retrieval among {n:,} candidates ({title}, accuracy %)",
                      names, label="source → target")
        rows: dict[str, list] = {}
        for j, name in enumerate(names):
            res = result["results"]["Multi30k"].get(name) or {}
            for s, row in res.get(method, {}).items():
                for t, acc in row.items():
                    rows.setdefault(f"{s} → {t}", [None] * len(names))[j] = acc
        for label, cells in rows.items():
            table.add(label, cells)
        _add_average(table)
        result["tables"].append(table)
    for name in names:
        res = result["results"]["Multi30k"].get(name) or {}
        if res.get("missing_languages"):
            result["notes"].append(f"retrieval: '{name}' has no encoder for {', '.join(res['missing_languages'])}")
    return result


# ----------------------------------------------------------------------------- entry point

SUITE_ORDER = ("downstream", "similarity", "nli", "probing", "crosslingual", "retrieval")


def run_all(ctx: Context) -> dict:
    """Every suite in turn (each also writes its own report); the encoders' caches are shared."""
    out = {"suite": "all", "embedders": list(ctx.encoders), "suites": {}}
    for name in SUITE_ORDER:
        out["suites"][name] = _run_and_write(name, ctx)
    out["elapsed_s"] = {name: {"suite": r["total_elapsed_s"]} for name, r in out["suites"].items()}
    return out


SUITES: dict[str, Callable[[Context], dict]] = {
    "downstream": run_downstream, "similarity": run_similarity, "nli": run_nli, "probing": run_probing,
    "crosslingual": run_crosslingual, "retrieval": run_retrieval, "all": run_all,
}


def _run_and_write(name: str, ctx: Context) -> dict:
    start = time.perf_counter()
    result = SUITES[name](ctx)
    result["total_elapsed_s"] = round(time.perf_counter() - start, 2)
    if name == "all":
        _write_all(result, ctx.out_dir)
    else:
        write_report(result, ctx.out_dir)
    return result


def _write_all(result: dict, out_dir: Path) -> None:
    """all.json holds every suite's result; all.md joins their reports."""
    (out_dir / "all.json").write_text(json.dumps(jsonable(result), indent=1, ensure_ascii=False))
    parts = [render_markdown(r) for r in result["suites"].values()]
    (out_dir / "all.md").write_text(f"# Sentence-vector evaluation: all suites ({result['total_elapsed_s']:.0f} s)\n\n"
                                    + "\n\n".join(parts), encoding="utf-8")


def run_suite(name: str, embedders: Mapping[str, EmbedderLike], data_root: Path, out_dir: Path, *, quick: bool = False,
              seed: int = 0, max_examples: int | None = None, probing_dir: Path | None = None,
              pair_features: str = "full", batch_size: int = 64, encode_threads: int | None = 1,
              per_head_embedders: list[str] | None = None, jobs: int = 1) -> dict:
    """Evaluate `embedders` (name -> embedder) on suite `name`; writes out_dir/<name>.md and .json.

    `data_root` holds senteval_downstream/, xnli/, multi30k/ (and webis_cls10/ for probing
    text); `quick` and `max_examples` subsample for smoke runs; `probing_dir` holds official
    SentEval probing files (default: data_root/senteval_probing). `encode_threads` torch
    threads while an embedder encodes (None: leave as set); fits run on one thread.
    `per_head_embedders` limits per-head probing to those names (None: all with heads).
    `jobs` worker processes fit the probes (results do not depend on it)."""
    if name not in SUITES:
        raise EvaluationError(f"unknown suite '{name}' (choose from {', '.join(SUITES)})")
    if not embedders:
        raise EvaluationError("no embedders to evaluate: pass at least one name -> embedder")
    if pair_features not in PAIR_FEATURES:
        raise EvaluationError(f"unknown pair_features '{pair_features}' (use one of {', '.join(PAIR_FEATURES)})")
    if jobs < 1:
        raise EvaluationError(f"jobs must be at least 1, got {jobs}")
    if max_examples is not None and max_examples < 10:
        raise EvaluationError(f"max_examples must be at least 10, got {max_examples}")
    data_root = Path(data_root)
    if not data_root.is_dir():
        raise EvaluationError(f"data root {data_root} is not a folder (expected senteval_downstream/, xnli/, multi30k/ in it)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx = Context(encoders={n: Encoder(n, e, batch_size, encode_threads) for n, e in embedders.items()}, data_root=data_root,
                  out_dir=out_dir, budget=Budget.make(quick, max_examples), seed=seed, features=pair_features,
                  probing_dir=Path(probing_dir) if probing_dir else None,
                  per_head_embedders=None if per_head_embedders is None else list(per_head_embedders), jobs=jobs)
    return _run_and_write(name, ctx)

