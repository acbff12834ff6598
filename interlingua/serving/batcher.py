"""Dynamic batching: concurrent requests that can share one model call are answered by one call.

Why: on a CPU a model call over 30 short sentences costs far less than 30 calls over one (the
per-call overhead and the small matrix products dominate), so under load the service answers
more requests per second when it gathers them. While the model is busy, requests with the same
batch key (same operation and settings) gather, so batches grow with the load and no request
waits for companions longer than the model makes it wait anyway. `max_wait_ms` adds a wait for
companions when the model is idle; the service's default is 0, which measured best at 1, 8 and
32 clients alike (bench/results/2026-11-24.md).

The model runs in ONE worker thread: torch work never blocks the asyncio event loop (health
checks and new requests are still answered during a long translation) and there is one model
call at a time (torch uses its own intra-op threads; two concurrent calls would only fight over
the cores). A failing call fails the requests of its batch only.
"""
from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

Key = TypeVar("Key", bound=Hashable)
Result = TypeVar("Result")


class BatcherClosed(RuntimeError):
    """The batcher no longer takes requests (the server is shutting down)."""


@dataclass
class _Waiting:
    """One request's texts and the future its caller awaits."""

    texts: list[str]
    future: asyncio.Future[list[Any]]
    deadline: float
    """Event-loop time after which the request stops waiting for companions."""


class DynamicBatcher(Generic[Key, Result]):
    """Gathers `submit(key, texts)` calls with equal keys into one `run_batch(key, all_texts)` call.

    `run_batch` runs in a single worker thread and must return one result per text, in order; each
    caller gets back the slice that belongs to its own texts. Use as `async with DynamicBatcher(...)`
    (or `start()` / `drain()`) inside the event loop that submits.
    """

    def __init__(self, run_batch: Callable[[Key, list[str]], Sequence[Result]], max_wait_ms: float = 0.0,
                 max_batch_texts: int = 64, thread_name: str = "interlingua-model"):
        if max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {max_wait_ms}")
        if max_batch_texts < 1:
            raise ValueError(f"max_batch_texts must be at least 1, got {max_batch_texts}")
        self._run_batch = run_batch
        self._max_wait_s = max_wait_ms / 1000.0
        self._max_batch_texts = max_batch_texts
        self._thread_name = thread_name
        self._waiting: dict[Key, deque[_Waiting]] = {}
        self._wakeup: asyncio.Event | None = None
        self._worker: ThreadPoolExecutor | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._closing = False

    # --- life cycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start taking requests; call it from the event loop that will submit them."""
        if self._loop_task is not None:
            raise RuntimeError("the batcher is already started")
        self._wakeup = asyncio.Event()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._thread_name)
        self._loop_task = asyncio.get_running_loop().create_task(self._dispatch_batches(), name="dynamic-batcher")

    async def drain(self) -> None:
        """Stop taking requests, then answer every request already queued or in flight and stop the
        worker thread. Safe to call twice."""
        self._closing = True
        if self._loop_task is None:
            return
        assert self._wakeup is not None and self._worker is not None
        self._wakeup.set()
        await self._loop_task
        self._worker.shutdown(wait=True)  # idle by now: the last batch has been awaited

    async def __aenter__(self) -> "DynamicBatcher[Key, Result]":
        self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.drain()

    @property
    def accepting(self) -> bool:
        return self._loop_task is not None and not self._closing

    # --- requests --------------------------------------------------------------------------------

    async def submit(self, key: Key, texts: Sequence[str]) -> list[Result]:
        """Queue `texts` for a model call shared with other requests of the same `key`; the results
        for these texts, in order. A model error is raised here, for the requests of that batch only."""
        if not self.accepting:
            raise BatcherClosed("the service is shutting down and takes no new requests"
                                if self._closing else "the batcher has not been started")
        if not texts:
            return []
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Any]] = loop.create_future()
        self._waiting.setdefault(key, deque()).append(_Waiting(list(texts), future, loop.time() + self._max_wait_s))
        self._wakeup.set()
        return await future

    # --- the dispatch loop -----------------------------------------------------------------------

    async def _dispatch_batches(self) -> None:
        """Run the next ready batch, or sleep until one is ready (full, its oldest request has waited
        `max_wait_ms`, or the batcher is draining); return once drained."""
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        while True:
            key = self._ready_key(loop.time())
            if key is not None:
                await self._run(key, self._take_batch(key))
                continue
            if self._closing and not self._waiting:
                return
            self._wakeup.clear()
            deadlines = [queue[0].deadline for queue in self._waiting.values()]
            timeout = max(0.0, min(deadlines) - loop.time()) if deadlines else None
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout)
            except asyncio.TimeoutError:
                pass

    def _ready_key(self, now: float) -> Key | None:
        """The key whose batch should run now (the one whose oldest request came first), if any."""
        ready: list[tuple[float, Key]] = []
        for key, queue in list(self._waiting.items()):
            while queue and queue[0].future.done():  # the caller went away (client disconnected)
                queue.popleft()
            if not queue:
                del self._waiting[key]
                continue
            full = sum(len(w.texts) for w in queue) >= self._max_batch_texts
            if self._closing or full or queue[0].deadline <= now:
                ready.append((queue[0].deadline, key))
        return min(ready, key=lambda item: item[0])[1] if ready else None

    def _take_batch(self, key: Key) -> list[_Waiting]:
        """Oldest requests first, up to `max_batch_texts` texts (a larger single request goes alone);
        a request is never split over two model calls."""
        queue = self._waiting[key]
        batch: list[_Waiting] = []
        size = 0
        while queue and (not batch or size + len(queue[0].texts) <= self._max_batch_texts):
            waiting = queue.popleft()
            if waiting.future.done():
                continue
            batch.append(waiting)
            size += len(waiting.texts)
        if not queue:
            del self._waiting[key]
        return batch

    async def _run(self, key: Key, batch: list[_Waiting]) -> None:
        """One model call in the worker thread; each request gets its slice, or the call's error."""
        if not batch:
            return
        assert self._worker is not None
        texts = [text for waiting in batch for text in waiting.texts]
        try:
            results = await asyncio.get_running_loop().run_in_executor(self._worker, self._run_batch, key, texts)
            if len(results) != len(texts):
                raise RuntimeError(f"the model call returned {len(results)} results for {len(texts)} texts")
        except asyncio.CancelledError:  # the event loop is going away: nobody will read the answers
            for waiting in batch:
                waiting.future.cancel()
            raise
        except Exception as err:  # goes to this batch's callers; the batcher carries on
            log.debug("model call for %r failed: %s", key, err)
            for waiting in batch:
                if not waiting.future.done():
                    waiting.future.set_exception(err)
            return
        start = 0
        for waiting in batch:
            end = start + len(waiting.texts)
            if not waiting.future.done():
                waiting.future.set_result(list(results[start:end]))
            start = end
