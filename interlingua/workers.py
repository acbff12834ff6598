"""Worker processes for independent CPU-bound jobs, so they use every core.

Used where jobs gain little from a second torch thread but run well side by side: the
sentence suite's probe fits and parses (the main process encodes while workers fit) and
`interlingua experiment`'s recipes (one training of one thread per worker).
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
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


ORPHAN_GRACE_S = 300.0
"""How long a worker whose parent died may still run after its SIGTERM (a training saves `last.pt` in it)."""


def end_with_parent(parent: int) -> None:
    """A worker's first call: a watch that ends this worker once `parent` (the pid that started it) is gone.

    Without it a killed parent (SIGKILL, the OOM killer) leaves its pool's workers waiting for ever on a task
    queue that the other workers keep open. The watch sends the worker SIGTERM, so a training stops as on
    Ctrl-C (its step finished, `last.pt` saved) and an idle worker ends, then after `ORPHAN_GRACE_S` ends the
    worker outright, whatever it is doing: no one is left to take its result."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(ORPHAN_GRACE_S)
        os._exit(1)

    threading.Thread(target=watch, name="interlingua-parent-watch", daemon=True).start()


@contextmanager
def process_pool(jobs: int) -> Iterator[Executor]:
    """An executor with `jobs` worker processes (inline for 1, so one job costs no process), which end when
    this process dies (`end_with_parent`).

    Workers are spawned, not forked: a fork after torch has started its thread pool can hang."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    if jobs == 1:
        yield InlineExecutor()
        return
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                             initializer=end_with_parent, initargs=(os.getpid(),)) as pool:
        yield pool
