"""SICK-E (train/trial/test) and XNLI-en (k-fold on dev-en); accuracy %."""
from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Executor

from interlingua.evaluation.sentence.classification import majority_accuracy
from interlingua.evaluation.sentence.features import PAIR_FEATURES
from interlingua.evaluation.sentence.nli import sick_entailment, xnli_english
from interlingua.evaluation.sentence.report import Table
from interlingua.evaluation.sentence.suites.context import Context
from interlingua.evaluation.sentence.suites.results import SuiteResult
from interlingua.evaluation.sentence.suites.skeleton import Suite, Task
from interlingua.evaluation.sentence.suites.tables import cells, with_paper
from interlingua.evaluation.sentence.tasks import MissingDataError, load_sick, load_xnli


class Nli(Suite):
    """Entailment from pair features of frozen vectors, beside the majority class."""

    name = "nli"

    def tasks(self, ctx: Context, result: SuiteResult, pool: Executor) -> Iterator[Task]:
        try:
            sick = {k: ctx.cap(v, i) for i, (k, v) in enumerate(load_sick(ctx.data_root, "entailment").items())}
        except MissingDataError as err:
            result.skip("SICK-E", err)
        else:
            yield Task("SICK-E", lambda enc: sick_entailment(enc, sick, features=ctx.features, seed=ctx.seed),
                       reference={"majority": majority_accuracy(sick["train"].gold, sick["test"].gold)})
        try:
            xnli = ctx.cap(load_xnli(ctx.data_root, "en"), 7)
        except MissingDataError as err:
            result.skip("XNLI-en", err)
        else:
            b = ctx.budget
            yield Task("XNLI-en", lambda enc: xnli_english(enc, xnli, folds=b.xnli_folds,
                                                           inner_folds=b.xnli_inner_folds,
                                                           features=ctx.features, seed=ctx.seed),
                       reference={"majority": 100.0 * max(xnli.gold.count(c) for c in set(xnli.gold)) / len(xnli)})

    def report(self, tasks: list[Task], ctx: Context, result: SuiteResult) -> None:
        table = Table(f"NLI (accuracy %, pair features {PAIR_FEATURES[ctx.features]})", ctx.names + ["majority"],
                      reference_columns=["majority"])
        for task in tasks:
            run = result.tasks[task.name]
            assert run.reference is not None  # every NLI task has its majority class
            table.add(task.name, cells(run, ctx.names, lambda r: r["acc"]) + [run.reference["majority"]])
        result.tables.append(with_paper(table))
        result.notes.append(f"SICK-E: C by accuracy on SICK trial. XNLI-en: only the dev set is public here, so "
                            f"{ctx.budget.xnli_folds}-fold CV over it (not comparable to XNLI test numbers).")
