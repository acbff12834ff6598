"""Multi30k test_2016_flickr multi-way retrieval: cosine, ratio margin (k=4), \
both on centred vectors too (accuracy %)."""
from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Executor

import numpy as np

from interlingua.evaluation.sentence.report import Table
from interlingua.evaluation.sentence.retrieval import multiway_retrieval
from interlingua.evaluation.sentence.suites.context import Context
from interlingua.evaluation.sentence.suites.results import SuiteResult
from interlingua.evaluation.sentence.suites.skeleton import Suite, Task
from interlingua.evaluation.sentence.suites.tables import add_average, add_matrix_rows, note_missing_languages
from interlingua.evaluation.sentence.tasks import MULTI30K_LANGS, MissingDataError, load_multi30k

METHODS = (("cosine", "cosine nearest neighbour"), ("margin", "ratio margin, k=4"),
           ("centered", "cosine after subtracting each language's mean vector"),
           ("centered_margin", "ratio margin, k=4, after subtracting each language's mean vector"))


class Retrieval(Suite):
    """One task over every Multi30k language found (the task's `data` is the candidate count); a table per method."""

    name = "retrieval"

    def tasks(self, ctx: Context, result: SuiteResult, pool: Executor) -> Iterator[Task]:
        texts: dict[str, list[str]] = {}
        for lang in MULTI30K_LANGS:
            try:
                texts[lang] = load_multi30k(ctx.data_root, "test_2016_flickr", lang)
            except MissingDataError as err:
                result.skip(f"Multi30k {lang}", err)
        if len(texts) < 2:
            return
        if ctx.budget.max_examples is not None:  # the same sentences in every language (they are translations)
            n = len(next(iter(texts.values())))
            keep = np.sort(np.random.default_rng(ctx.seed).choice(n, min(n, ctx.budget.max_examples), replace=False))
            texts = {lang: [t[i] for i in keep] for lang, t in texts.items()}
        yield Task("Multi30k", lambda enc: multiway_retrieval(enc, texts, k=4), needs=(),
                   data=len(next(iter(texts.values()))))

    def report(self, tasks: list[Task], ctx: Context, result: SuiteResult) -> None:
        if not tasks:  # fewer than two languages: nothing but the skips to report
            return
        task = tasks[0]
        run = result.tasks[task.name]
        for method, title in METHODS:
            table = Table(f"Multi30k test_2016_flickr translation retrieval among {task.data:,} candidates ({title}, "
                          "accuracy %)", ctx.names, label="source → target")
            add_matrix_rows(table, run, ctx.names, method)
            add_average(table)
            result.tables.append(table)
        note_missing_languages(result, run, ctx.names, "retrieval")
