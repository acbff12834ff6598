"""Probing tasks (official SentEval files when present, locally built sets always) + per-head probing.

Encoding stays in this process (the model and its caches live here); each probe is fitted in
a worker as soon as its vectors exist, so the fits of one task overlap the encoding of the next.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Executor, Future

from tqdm import tqdm

from interlingua.evaluation.sentence.classification import majority_accuracy
from interlingua.evaluation.sentence.heads import plot_per_head_accuracy
from interlingua.evaluation.sentence.probing import fit_probe, probe_features
from interlingua.evaluation.sentence.probing_sets import (
    OFFICIAL_PROBING,
    ProbingTask,
    local_probing_tasks,
    official_probing_tasks,
)
from interlingua.evaluation.sentence.protocol import CachedEmbedder
from interlingua.evaluation.sentence.report import Table
from interlingua.evaluation.sentence.suites.context import Context
from interlingua.evaluation.sentence.suites.results import SuiteResult
from interlingua.evaluation.sentence.suites.skeleton import Suite, Task
from interlingua.evaluation.sentence.suites.tables import cells, with_paper
from interlingua.evaluation.sentence.tasks import MissingDataError


def _probing_sets(ctx: Context, result: SuiteResult, pool: Executor) -> list[ProbingTask]:
    """The official sets found and the local ones built (written beside the report, named '<task> (local)')."""
    tasks: list[ProbingTask] = []
    folder = ctx.probing_dir or ctx.data_root / "senteval_probing"
    official, missing = official_probing_tasks(folder, limits=ctx.budget.official_probe_limits, seed=ctx.seed)
    tasks += official
    if missing:
        result.skip("official probing",
                    f"{len(missing)} of {len(OFFICIAL_PROBING)} SentEval probing files not found in {folder} "
                    "(get them with `interlingua data senteval-probing --dest DIR`, then `--probing-dir DIR`)")
    b = ctx.budget
    try:
        local, notes, not_run = local_probing_tasks(ctx.data_root, b.probe_sizes, seed=ctx.seed,
                                                    parse_limit=b.parse_limit, wc_words=b.wc_words, executor=pool,
                                                    parts=ctx.jobs)
    except MissingDataError as err:
        result.skip("local probing", err)
        return tasks
    result.notes += [f"probing text pool: {n}" for n in notes]
    for name, reason in not_run.items():
        result.skip(f"{name} (local)", reason)
    sets_dir = ctx.out_dir / "probing_sets"
    for task in local:
        task.write(sets_dir / f"{task.name}.txt")
        task.name = f"{task.name} (local)"
        tasks.append(task)
    result.notes.append(f"local probing sets written to {sets_dir} (SentEval format)")
    return tasks


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


class Probing(Suite):
    """An MLP probe on the mean vector, and on each bridge head alone for the embedders that have heads."""

    name = "probing"
    uses_workers = True
    worker_modules = ("interlingua.evaluation.sentence.probing", "interlingua.evaluation.sentence.probing_sets")

    def tasks(self, ctx: Context, result: SuiteResult, pool: Executor) -> Iterator[Task]:
        start = time.perf_counter()
        sets = _probing_sets(ctx, result, pool)  # parsing the probing text runs on the pool too
        result.setup_s = {"reading and building probing sets": round(time.perf_counter() - start, 2)}
        for task in sets:
            result.notes += [f"{task.name}: {note}" for note in task.notes]
        for task in tqdm(sets, desc="probing: encode"):
            yield Task(task.name, lambda enc, task=task:  # type: ignore[misc]  # mypy: default-arg lambda
                       self._submit(enc, task, ctx, pool), needs=(task.lang,),
                       reference={"chance": majority_accuracy(task.train.labels, task.test.labels),
                                  "sizes": task.sizes(), "source": task.source})

    @staticmethod
    def _submit(enc: CachedEmbedder, task: ProbingTask, ctx: Context, pool: Executor) -> Future:
        """Encode here, fit on the pool."""
        per_head = ctx.per_head_embedders is None or enc.name in ctx.per_head_embedders
        feats = probe_features(enc, task, per_head=per_head, per_head_train=ctx.budget.per_head_train, seed=ctx.seed)
        return pool.submit(fit_probe, feats, cfg=ctx.probe, seed=ctx.seed)

    def report(self, tasks: list[Task], ctx: Context, result: SuiteResult) -> None:
        names = ctx.names
        if ctx.jobs > 1:
            result.notes.append(f"probes were fitted in {ctx.jobs} worker processes beside the encoding, so the "
                                "per-task seconds (encoding + fitting) add up to more than the suite's wall clock")
        table = Table(f"Probing (accuracy %, MLP {ctx.probe.hidden} sigmoid units, dropout {ctx.probe.dropout})",
                      names + ["chance"], reference_columns=["chance"])
        per_head: dict[str, dict[str, list[float]]] = {}
        for task in tasks:
            run = result.tasks[task.name]
            assert run.reference is not None  # every probing task has its chance level
            table.add(task.name, cells(run, names, lambda r: r["acc"]) + [run.reference["chance"]])
            for name in names:
                heads = (run.scores.get(name) or {}).get("per_head", {})
                if "acc" in heads:
                    per_head.setdefault(name, {})[task.name] = heads["acc"]
                elif "skipped" in heads:
                    result.skip(f"per-head probing ({name})", heads["skipped"])
        result.tables.append(with_paper(table))
        for name, accs in per_head.items():
            self._per_head_report(name, accs, ctx, result)
        result.notes.append(f"per-head probes: training split capped at {ctx.budget.per_head_train} sentences, at most "
                            "10 dev checks, L2 fixed to the value chosen for the mean vector")

    @staticmethod
    def _per_head_report(name: str, accs: dict[str, list[float]], ctx: Context, result: SuiteResult) -> None:
        """A table (rows: heads, columns: tasks) and a plot of each head's accuracy for one embedder."""
        task_names = list(accs)
        k = len(next(iter(accs.values())))
        table = Table(f"Per-head probing, {name}: each bridge head alone (accuracy %)", task_names,
                      label="head", digits=1)
        for h in range(k):
            table.add(str(h + 1), [accs[t][h] for t in task_names])
        result.tables.append(table)
        png = plot_per_head_accuracy(accs, ctx.out_dir / f"probing_heads_{_slug(name)}.png",
                                     title=f"per-head probing: {name}")
        result.notes.append(f"per-head accuracy plot for {name}: {png}")
