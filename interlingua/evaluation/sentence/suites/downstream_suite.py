"""SentEval classification: MR, CR, SUBJ, MPQA (10-fold CV), TREC, SST2; accuracy %."""
from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Executor
from dataclasses import replace

from tqdm import tqdm

from interlingua.evaluation.sentence.classification import evaluate_classification, task_majority
from interlingua.evaluation.sentence.report import Table
from interlingua.evaluation.sentence.suites.context import Context
from interlingua.evaluation.sentence.suites.results import SuiteResult
from interlingua.evaluation.sentence.suites.skeleton import Suite, Task
from interlingua.evaluation.sentence.suites.tables import add_average, cells, with_paper
from interlingua.evaluation.sentence.tasks import (
    CLASSIFICATION_TASKS,
    ClassificationTask,
    MissingDataError,
    load_classification,
)


def _cap_classification(task: ClassificationTask, ctx: Context) -> ClassificationTask:
    return replace(task, train=ctx.cap(task.train, 1), dev=None if task.dev is None else ctx.cap(task.dev, 2),
                   test=None if task.test is None else ctx.cap(task.test, 3))


class Downstream(Suite):
    """Logistic regression on frozen vectors, beside the majority class."""

    name = "downstream"

    def tasks(self, ctx: Context, result: SuiteResult, pool: Executor) -> Iterator[Task]:
        b = ctx.budget
        for task_name in tqdm(CLASSIFICATION_TASKS, desc="downstream"):
            try:
                data = _cap_classification(load_classification(ctx.data_root, task_name, sst_train_limit=b.sst_train,
                                                               seed=ctx.seed), ctx)
            except MissingDataError as err:
                result.skip(task_name, err)
                continue
            if data.note:
                result.notes.append(data.note)
            yield Task(task_name,
                       lambda enc, data=data: evaluate_classification(  # type: ignore[misc]  # mypy: default-arg lambda
                           data, enc, folds=b.cv_folds, inner_folds=b.inner_folds, seed=ctx.seed),
                       reference={"majority": task_majority(data, folds=b.cv_folds, seed=ctx.seed)})

    def report(self, tasks: list[Task], ctx: Context, result: SuiteResult) -> None:
        table = Table("SentEval classification (accuracy %)", ctx.names + ["majority"], reference_columns=["majority"])
        for task in tasks:
            run = result.tasks[task.name]
            assert run.reference is not None  # every classification task has its majority class
            table.add(task.name, cells(run, ctx.names, lambda r: r["acc"]) + [run.reference["majority"]])
        add_average(table)
        result.tables.append(with_paper(table))
        b = ctx.budget
        result.notes.append(f"MR/CR/SUBJ/MPQA: {b.cv_folds}-fold CV with C tuned by inner {b.inner_folds}-fold; "
                            f"TREC: C by {b.cv_folds}-fold CV on train; SST2: C by dev accuracy. "
                            "Logistic regression on standardised frozen vectors, C in 2^-2..2^3.")
