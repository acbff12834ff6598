"""STS12-16 (cosine, unsupervised) and STS-B / SICK-R (trained relatedness model)."""
from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Executor

from tqdm import tqdm

from interlingua.evaluation.sentence.features import PAIR_FEATURES
from interlingua.evaluation.sentence.report import Table
from interlingua.evaluation.sentence.similarity import sts_cosine, trainable_relatedness
from interlingua.evaluation.sentence.suites.context import Context
from interlingua.evaluation.sentence.suites.results import SuiteResult
from interlingua.evaluation.sentence.suites.skeleton import Suite, Task
from interlingua.evaluation.sentence.suites.tables import add_average, cells, with_paper
from interlingua.evaluation.sentence.tasks import STS_YEARS, MissingDataError, load_sick, load_sts, load_stsb


class Similarity(Suite):
    """Cosine against gold scores (a year's subsets are the task's `data`), then the trained relatedness tasks."""

    name = "similarity"

    def tasks(self, ctx: Context, result: SuiteResult, pool: Executor) -> Iterator[Task]:
        for year in tqdm(STS_YEARS, desc="STS"):
            try:
                data = {k: ctx.cap(v, i) for i, (k, v) in enumerate(load_sts(ctx.data_root, year).items())}
            except MissingDataError as err:
                result.skip(year, err)
                continue
            yield Task(year,
                       lambda enc, data=data: sts_cosine(enc, data),  # type: ignore[misc]  # mypy: default-arg lambda
                       data=list(data))
        for name, loader, score_range in (("STS-B", lambda: load_stsb(ctx.data_root), (0, 5)),
                                          ("SICK-R", lambda: load_sick(ctx.data_root, "relatedness"), (1, 5))):
            try:
                splits = {k: ctx.cap(v, i) for i, (k, v) in enumerate(loader().items())}
            except MissingDataError as err:
                result.skip(name, err)
                continue
            yield Task(name, lambda enc, splits=splits,  # type: ignore[misc]  # mypy: default-arg lambda
                       score_range=score_range: trainable_relatedness(
                           enc, splits, score_range=score_range, features=ctx.features, seed=ctx.seed))

    def report(self, tasks: list[Task], ctx: Context, result: SuiteResult) -> None:
        names = ctx.names
        pearson = Table("Unsupervised STS: cosine vs gold, Pearson (mean over subsets)", names, digits=3)
        spearman = Table("Unsupervised STS: cosine vs gold, Spearman (mean over subsets)", names, digits=3)
        subsets = Table("Unsupervised STS per subset (Pearson)", names, label="set", digits=3)
        trained = Table(f"Trainable relatedness: Pearson on test (pair features {PAIR_FEATURES[ctx.features]})", names,
                        digits=3)
        for task in tasks:
            run = result.tasks[task.name]
            if task.name not in STS_YEARS:
                trained.add(task.name, cells(run, names, lambda r: r["pearson"]))
                continue
            pearson.add(task.name, cells(run, names, lambda r: r["all"]["pearson"]["mean"]))
            spearman.add(task.name, cells(run, names, lambda r: r["all"]["spearman"]["mean"]))
            for sub in task.data:
                subsets.add(f"{task.name} {sub}",
                            cells(run, names, lambda r, s=sub:  # type: ignore[misc]  # mypy: default-arg lambda
                                  r["subsets"][s]["pearson"]))
        add_average(pearson)
        add_average(spearman)
        result.tables += [with_paper(pearson), spearman, with_paper(trained), subsets]
        result.notes.append("STS12-16: SentEval's aggregate is the mean over a year's subsets ('mean'); "
                            "the JSON also has the size-weighted mean ('wmean'). "
                            "STS-B/SICK-R: SentEval's relatedness model (softmax over "
                            "score points, expected score), early stopping on dev Pearson.")
