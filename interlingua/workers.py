"""Worker processes for independent CPU-bound jobs, so they use every core.

Used where jobs gain little from a second torch thread but run well side by side: the
sentence suite's probe fits and parses (the main process encodes while workers fit) and
`interlingua experiment`'s recipes (one training of one thread per worker).
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
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
"""How long a worker whose pool's owner died may still run after its SIGTERM (a training saves `last.pt` in it)."""


def _started_at(pid: int) -> str | None:
    """When process `pid` started (its start time in /proc), or None once it has ended (a zombie included)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    state, *fields = stat[stat.rindex(")") + 2:].split()
    return None if state in ("Z", "X") else fields[18]  # field 22 of stat: the start time


def end_with_owner(owner: int) -> None:
    """A worker's first call: a watch that ends this worker once `owner` (the pid of the process that made the
    pool) is gone.

    Without it a killed owner (SIGKILL, the OOM killer) leaves its pool's workers waiting for ever on a task
    queue that the other workers keep open. The watch sends the worker SIGTERM, so a training stops as on
    Ctrl-C (its step finished, `last.pt` saved) and an idle worker ends, then after `ORPHAN_GRACE_S` ends the
    worker outright, whatever it is doing: no one is left to take its result. A forked worker's parent is the
    fork server, which outlives the owner while workers hold it open: the owner is watched through /proc
    (its start time, so that a reused pid is not taken for it); a spawned worker's parent is the owner."""
    owner_start = _started_at(owner) if os.getppid() != owner else None

    def owner_alive() -> bool:
        return os.getppid() == owner if owner_start is None else _started_at(owner) == owner_start

    def watch() -> None:
        while owner_alive():
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(ORPHAN_GRACE_S)
        os._exit(1)

    threading.Thread(target=watch, name="interlingua-parent-watch", daemon=True).start()


def _worker_context(preload: Sequence[str]) -> multiprocessing.context.BaseContext:
    """Where workers come from: on Linux a fork server, elsewhere fresh interpreters (spawn).

    The fork server is one clean process, started at the first pool of this process with `preload` (and
    torch) imported, that never runs torch: each worker is a fork of it, so a pool of N workers pays the
    imports (about 5 s with torch, most of a short job) once per process instead of N times, and the fork
    is safe (forking this process instead, after torch has started its thread pool, can hang). Later pools
    reuse the server, with what it preloaded; their workers import anything else themselves. torch._dynamo
    is preloaded too: every job here builds a torch optimizer, whose first one imports it (2-3 s a worker);
    importing it starts no thread."""
    if sys.platform != "linux":
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch", "torch._dynamo", *preload])
    return context


@contextmanager
def process_pool(jobs: int, preload: Sequence[str] = ()) -> Iterator[Executor]:
    """An executor with `jobs` worker processes (inline for 1, so one job costs no process), which end when
    this process dies (`end_with_owner`) or is interrupted (`_stop_workers`). `preload`: the modules the jobs
    run from, imported once for all workers (`_worker_context`)."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    if jobs == 1:
        yield InlineExecutor()
        return
    with ProcessPoolExecutor(max_workers=jobs, mp_context=_worker_context(preload),
                             initializer=end_with_owner, initargs=(os.getpid(),)) as pool:
        try:
            yield pool
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM to this process: the workers stop too
            _stop_workers(pool)
            raise


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """SIGTERM to each of the pool's workers, whose jobs stop as on Ctrl-C (a training saves `last.pt`):
    leaving the pool waits for its workers, and a signal sent to this process alone (`kill PID`) would else
    wait for every job to end. A worker that ended already is left alone."""
    workers = list((pool._processes or {}).values())  # noqa: SLF001 - the only handle on them before 3.14
    pool.shutdown(wait=False, cancel_futures=True)  # no queued job starts (and the pool forgets its workers)
    for worker in workers:
        if worker.is_alive():
            worker.terminate()
