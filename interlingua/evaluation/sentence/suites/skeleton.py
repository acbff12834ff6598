"""The one loop every suite runs: each task against every embedder (the trained model and its
reference points side by side), with skips, notes and timings recorded the same way for all.

A suite supplies only what differs: `tasks()` loads its data sets lazily (a missing one is
recorded as skipped, the suite goes on) and says how one embedder is scored on each, and
`report()` turns the scores into table rows and closing notes. The order in which notes and
results are recorded is the order the reports show, so tasks are loaded and run one by one.
"""
from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any, ClassVar

from tqdm import tqdm

from interlingua.evaluation.sentence.protocol import CachedEmbedder
from interlingua.evaluation.sentence.suites.context import Context
from interlingua.evaluation.sentence.suites.results import Score, SuiteResult, Timing
from interlingua.workers import process_pool

log = logging.getLogger(__name__)


@dataclass
class Task:
    """One loaded data set of a suite and how an embedder is scored on it.

    `score` returns the scores, or a Future of them when the fitting runs in a worker process
    (the encoding stays here, where the model and its caches live); such a score states its
    own fitting seconds as `fit_s`. `needs` are the languages an embedder must have to be
    scored; `data` is whatever the suite's tables need from the loaded set."""

    name: str
    score: Callable[[CachedEmbedder], Score | Future]
    needs: tuple[str, ...] = ("en",)
    reference: dict[str, object] | None = None
    data: Any = None


class Suite(ABC):
    """A suite's tasks and report; `run` is the shared skeleton and is not overridden."""

    name: ClassVar[str]
    uses_workers: ClassVar[bool] = False  # True: tasks get a pool of `ctx.jobs` worker processes
    worker_modules: ClassVar[tuple[str, ...]] = ()  # what the pool's jobs run from, imported once for all workers

    @abstractmethod
    def tasks(self, ctx: Context, result: SuiteResult, pool: Executor) -> Iterator[Task]:
        """Load and yield the tasks one at a time, recording missing data in `result.skipped`."""

    @abstractmethod
    def report(self, tasks: list[Task], ctx: Context, result: SuiteResult) -> None:
        """Add the tables (from `result.tasks`) and the closing notes to `result`."""

    def run(self, ctx: Context) -> SuiteResult:
        """Every task on every able embedder, then the report."""
        result = SuiteResult(self.name, ctx.names, ctx.settings())
        done: list[Task] = []
        with process_pool(ctx.jobs if self.uses_workers else 1, self.worker_modules) as pool:
            pending: list[_Pending] = []
            for task in self.tasks(ctx, result, pool):
                done.append(task)
                pending += _score(task, ctx, result)
            for p in tqdm(pending, desc=f"{self.name}: fit", disable=not pending):
                score = p.future.result()
                result.task(p.task).record(p.embedder, score, Timing(round(p.encode_s + score["fit_s"], 2),
                                                                     round(p.encode_s, 2)))
        self.report(done, ctx, result)
        return result


@dataclass
class _Pending:
    """A score fitting in a worker process, and the seconds its encoding took here."""

    task: str
    embedder: str
    encode_s: float
    future: Future


def _able(task: Task, ctx: Context, result: SuiteResult) -> dict[str, CachedEmbedder]:
    """The encoders that have every language the task needs; the others get a None score and a note."""
    run = result.task(task.name)
    able: dict[str, CachedEmbedder] = {}
    for name, enc in ctx.encoders.items():
        lacking = [lang for lang in task.needs if not enc.has(lang)]
        if lacking:
            run.scores[name] = None
            result.notes.append(f"{task.name}: '{name}' skipped, no encoder for {', '.join(lacking)}")
        else:
            able[name] = enc
    return able


def _score(task: Task, ctx: Context, result: SuiteResult) -> list[_Pending]:
    """Score `task` for every able embedder: ready scores are recorded with their seconds, pending ones returned."""
    pending: list[_Pending] = []
    able = _able(task, ctx, result)
    result.task(task.name).reference = task.reference
    for name, enc in able.items():
        start, encoding = time.perf_counter(), enc.encode_seconds
        log.info("%s: %s", task.name, name)
        score = task.score(enc)
        if isinstance(score, Future):
            pending.append(_Pending(task.name, name, enc.encode_seconds - encoding, score))
        else:
            result.task(task.name).record(name, score, Timing(round(time.perf_counter() - start, 2),
                                                              round(enc.encode_seconds - encoding, 2)))
    return pending
