"""Worker processes for independent CPU-bound jobs, so they use every core.

Used where jobs gain little from a second torch thread but run well side by side: the
sentence suite's probe fits and parses (the main process encodes while workers fit) and
`interlingua experiment`'s recipes (one training of one thread per worker).
"""
from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any


def usable_cores() -> int:
    """Cores this process may run on (the affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class InlineExecutor(Executor):
    """Runs each submitted call at once, in this process: `jobs=1` without a pool to start."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as err:  # noqa: BLE001 - handed to the caller through the future
            future.set_exception(err)
        return future


@contextmanager
def process_pool(jobs: int) -> Iterator[Executor]:
    """An executor with `jobs` worker processes (inline for 1, so one job costs no process).

    Workers are spawned, not forked: a fork after torch has started its thread pool can hang."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    if jobs == 1:
        yield InlineExecutor()
        return
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool
