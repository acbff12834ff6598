"""Dynamic batching: concurrent requests that can share one model call are answered by one call.

Why: on a CPU a model call over 30 short sentences costs far less than 30 calls over one (the
per-call overhead and the small matrix products dominate), so under load the service answers
more requests per second when it gathers them. While the model is busy, requests with the same
batch key (same operation and settings) gather, so batches grow with the load and no request
waits for companions longer than the model makes it wait anyway. `max_wait_ms` adds a wait for
companions when the model is idle; the service's default is 0, which measured best at 1, 8 and
32 clients alike (bench/results/2026-11-24.md). A batch is bounded by its texts and by its
tokens (`max_batch_tokens`, counted by `count_tokens`), so that a few long texts do not make one
slow, memory-hungry call; a request is never split, and one over a bound runs alone.

The model runs in ONE worker thread: torch work never blocks the asyncio event loop (health
checks and new requests are still answered during a long translation) and there is one model
call at a time (torch uses its own intra-op threads; two concurrent calls would only fight over
the cores). A failing shared call is run again for each of its requests alone, so that only the
request at fault gets the error; a request whose caller stopped waiting (timed out, went away)
leaves the queue before its model call starts.
"""
from __future__ import annotations

import asyncio
import logging
import time
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


@dataclass(frozen=True)
class Answer(Generic[Result]):
    """One request's results and what it waited for: `queue_s` from submission until its (first) model
    call started, `model_s` the seconds of the model calls that answered it (a shared call counts whole:
    the request waited for all of it)."""

    results: list[Result]
    queue_s: float
    model_s: float


@dataclass(frozen=True)
class BatchRun:
    """One model call, for the service's metrics: its key, texts, estimated tokens, requests and seconds."""

    key: Hashable
    texts: int
    tokens: int
    requests: int
    seconds: float


@dataclass
class _Waiting:
    """One request's texts and the future its caller awaits."""

    texts: list[str]
    tokens: int
    future: asyncio.Future[Answer[Any]]
    queued_at: float
    deadline: float
    """Event-loop time after which the request stops waiting for companions."""
    started_at: float | None = None
    model_s: float = 0.0


class DynamicBatcher(Generic[Key, Result]):
    """Gathers `submit(key, texts)` calls with equal keys into one `run_batch(key, all_texts)` call.

    `run_batch` runs in a single worker thread and must return one result per text, in order; each
    caller gets back the slice that belongs to its own texts. `on_batch` (on the event loop) hears of
    every model call. Use as `async with DynamicBatcher(...)` (or `start()` / `drain()`) inside the
    event loop that submits.
    """

    def __init__(self, run_batch: Callable[[Key, list[str]], Sequence[Result]], max_wait_ms: float = 0.0,
                 max_batch_texts: int = 64, thread_name: str = "interlingua-model",
                 max_batch_tokens: int | None = None, count_tokens: Callable[[str], int] = len,
                 on_batch: Callable[[BatchRun], None] | None = None):
        if max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {max_wait_ms}")
        if max_batch_texts < 1:
            raise ValueError(f"max_batch_texts must be at least 1, got {max_batch_texts}")
        if max_batch_tokens is not None and max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be at least 1, got {max_batch_tokens}")
        self._run_batch = run_batch
        self._max_wait_s = max_wait_ms / 1000.0
        self._max_batch_texts = max_batch_texts
        self._max_batch_tokens = max_batch_tokens
        self._count_tokens = count_tokens
        self._on_batch = on_batch
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

    async def __aenter__(self) -> DynamicBatcher[Key, Result]:
        self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.drain()

    @property
    def accepting(self) -> bool:
        return self._loop_task is not None and not self._closing

    @property
    def queued(self) -> int:
        """Requests waiting for a model call (not those in the call now running)."""
        return sum(1 for queue in self._waiting.values() for waiting in queue if not waiting.future.done())

    # --- requests --------------------------------------------------------------------------------

    async def submit(self, key: Key, texts: Sequence[str]) -> list[Result]:
        """Queue `texts` for a model call shared with other requests of the same `key`; the results
        for these texts, in order. A model error is raised here, for the request at fault only."""
        return (await self.answer(key, texts)).results

    async def answer(self, key: Key, texts: Sequence[str]) -> Answer[Result]:
        """`submit`, with the time the request waited in the queue and in the model. Cancelling the
        caller (a timeout) takes the request out of the queue if its model call has not started."""
        if not self.accepting:
            raise BatcherClosed("the service is shutting down and takes no new requests"
                                if self._closing else "the batcher has not been started")
        if not texts:
            return Answer([], 0.0, 0.0)
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Answer[Any]] = loop.create_future()
        tokens = sum(self._count_tokens(text) for text in texts)
        self._waiting.setdefault(key, deque()).append(
            _Waiting(list(texts), tokens, future, time.perf_counter(), loop.time() + self._max_wait_s))
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

    def _over(self, texts: int, tokens: int) -> bool:
        return texts > self._max_batch_texts or (self._max_batch_tokens is not None and tokens > self._max_batch_tokens)

    def _ready_key(self, now: float) -> Key | None:
        """The key whose batch should run now (the one whose oldest request came first), if any."""
        ready: list[tuple[float, Key]] = []
        for key, queue in list(self._waiting.items()):
            live = deque(waiting for waiting in queue if not waiting.future.done())  # callers that went away leave
            if not live:
                del self._waiting[key]
                continue
            self._waiting[key] = live
            texts = sum(len(w.texts) for w in live)
            tokens = sum(w.tokens for w in live)
            full = texts >= self._max_batch_texts or \
                (self._max_batch_tokens is not None and tokens >= self._max_batch_tokens)
            if self._closing or full or live[0].deadline <= now:
                ready.append((live[0].deadline, key))
        return min(ready, key=lambda item: item[0])[1] if ready else None

    def _take_batch(self, key: Key) -> list[_Waiting]:
        """Oldest requests first, up to `max_batch_texts` texts and `max_batch_tokens` tokens (a larger
        single request goes alone); a request is never split over two model calls."""
        queue = self._waiting[key]
        batch: list[_Waiting] = []
        texts = tokens = 0
        while queue:
            waiting = queue[0]
            if waiting.future.done():
                queue.popleft()
                continue
            if batch and self._over(texts + len(waiting.texts), tokens + waiting.tokens):
                break
            batch.append(queue.popleft())
            texts += len(waiting.texts)
            tokens += waiting.tokens
        if not queue:
            del self._waiting[key]
        return batch

    async def _call(self, key: Key, batch: list[_Waiting]) -> Sequence[Result]:
        """One model call in the worker thread for the texts of `batch`, timed onto each request."""
        assert self._worker is not None
        texts = [text for waiting in batch for text in waiting.texts]
        started = time.perf_counter()
        for waiting in batch:
            waiting.started_at = waiting.started_at or started
        try:
            results = await asyncio.get_running_loop().run_in_executor(self._worker, self._run_batch, key, texts)
        finally:
            seconds = time.perf_counter() - started
            for waiting in batch:
                waiting.model_s += seconds
            if self._on_batch is not None:
                self._on_batch(BatchRun(key, len(texts), sum(w.tokens for w in batch), len(batch), seconds))
        if len(results) != len(texts):
            raise RuntimeError(f"the model call returned {len(results)} results for {len(texts)} texts")
        return results

    async def _run(self, key: Key, batch: list[_Waiting]) -> None:
        """One model call; each request gets its slice. If the shared call fails, each request runs
        alone, so that the error goes to the request that caused it and the others get their answers."""
        batch = [waiting for waiting in batch if not waiting.future.done()]
        if not batch:
            return
        try:
            results = await self._call(key, batch)
        except asyncio.CancelledError:  # the event loop is going away: nobody will read the answers
            for waiting in batch:
                waiting.future.cancel()
            raise
        except Exception as err:
            if len(batch) == 1:
                log.debug("model call for %r failed: %s", key, err)
                _fail(batch[0], err)
                return
            log.debug("model call for %r over %d requests failed (%s); running each alone", key, len(batch), err)
            try:
                for waiting in batch:
                    await self._run(key, [waiting])
            except asyncio.CancelledError:
                for waiting in batch:
                    waiting.future.cancel()
                raise
            return
        start = 0
        for waiting in batch:
            end = start + len(waiting.texts)
            _answer(waiting, list(results[start:end]))
            start = end


def _answer(waiting: _Waiting, results: list[Any]) -> None:
    if not waiting.future.done():
        queued = (waiting.started_at or waiting.queued_at) - waiting.queued_at
        waiting.future.set_result(Answer(results, queued, waiting.model_s))


def _fail(waiting: _Waiting, err: Exception) -> None:
    if not waiting.future.done():
        waiting.future.set_exception(err)
