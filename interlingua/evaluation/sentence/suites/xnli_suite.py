"""XNLI transfer: train on one language (or all), test on en/de/fr/es; accuracy %."""
from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Executor

import numpy as np

from interlingua.evaluation.sentence.crosslingual import xnli_transfer
from interlingua.evaluation.sentence.report import Table
from interlingua.evaluation.sentence.suites.context import Context
from interlingua.evaluation.sentence.suites.results import SuiteResult
from interlingua.evaluation.sentence.suites.skeleton import Suite, Task
from interlingua.evaluation.sentence.suites.tables import add_matrix_rows, note_missing_languages
from interlingua.evaluation.sentence.tasks import XNLI_LANGS, MissingDataError, Pairs, load_xnli


class XNLITransfer(Suite):
    """One task over every XNLI language found; an embedder is scored on the languages it has."""

    name = "xnli"

    def tasks(self, ctx: Context, result: SuiteResult, pool: Executor) -> Iterator[Task]:
        data: dict[str, Pairs] = {}
        for lang in XNLI_LANGS:
            try:
                data[lang] = load_xnli(ctx.data_root, lang)
            except MissingDataError as err:
                result.skip(f"XNLI {lang}", err)
        if not data:
            return
        if ctx.budget.max_examples is not None:  # the same examples in every language (they are translations)
            n = len(next(iter(data.values())))
            keep = np.sort(np.random.default_rng(ctx.seed).choice(n, min(n, ctx.budget.max_examples), replace=False))
            data = {lang: Pairs([p.a[i] for i in keep], [p.b[i] for i in keep], [p.gold[i] for i in keep])
                    for lang, p in data.items()}
        b = ctx.budget
        yield Task("XNLI", lambda enc: xnli_transfer(enc, data, folds=b.xnli_folds, inner_folds=b.xnli_inner_folds,
                                                     features=ctx.features, seed=ctx.seed), needs=())

    def report(self, tasks: list[Task], ctx: Context, result: SuiteResult) -> None:
        if not tasks:  # no XNLI data: nothing but the skips to report
            return
        run = result.tasks["XNLI"]
        note_missing_languages(result, run, ctx.names, "XNLI")
        table = Table(f"XNLI transfer (accuracy %, {ctx.budget.xnli_folds}-fold over dev; chance 33.3)", ctx.names,
                      label="train → test")
        add_matrix_rows(table, run, ctx.names, "matrix")
        result.tables.append(table)
        result.notes.append("XNLI: only the dev sets are public here; k-fold over example indices, so an example is "
                            "never in training (any language) and test at once. Not comparable to XNLI test numbers.")
