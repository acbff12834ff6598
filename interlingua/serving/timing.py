"""What each request took: timing headers for the client, metrics for the operator.

A model request's answer carries, in milliseconds (as TEI's):
- `X-Total-Time`     from its arrival to its answer;
- `X-Queue-Time`     waiting for the model (in the batcher's queue, behind other model calls);
- `X-Inference-Time` the model calls that answered it (a shared call counts whole).
Every request, model or not, is counted in /metrics by endpoint and status, with its latency.
"""
from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from interlingua.serving.metrics import ServiceMetrics

STATE_KEY = "interlingua_timing"


@dataclass
class RequestTiming:
    """One request's clock: its arrival, and the span and model seconds of its model calls."""

    start: float
    first_submit: float | None = None
    last_answer: float | None = None
    inference_s: float = 0.0

    def model_call(self, submitted: float, answered: float, model_s: float) -> None:
        """One batcher answer (several where a request's texts went to several encoders at once)."""
        self.first_submit = submitted if self.first_submit is None else min(self.first_submit, submitted)
        self.last_answer = answered if self.last_answer is None else max(self.last_answer, answered)
        self.inference_s += model_s

    @property
    def queue_s(self) -> float:
        """The time between the first submission and the last answer not spent in a model call of this
        request (model calls of one request run one after another: the model has one thread)."""
        if self.first_submit is None or self.last_answer is None:
            return 0.0
        return max(0.0, self.last_answer - self.first_submit - self.inference_s)

    def left_s(self, timeout_s: float) -> float:
        """Seconds left of `timeout_s` counted from the arrival."""
        return self.start + timeout_s - time.perf_counter()


def request_timing(request: Request) -> RequestTiming:
    """The clock `Measured` started for `request` (a fresh one where it did not run)."""
    state = request.scope.setdefault("state", {})
    return state.setdefault(STATE_KEY, RequestTiming(time.perf_counter()))


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.1f}"


class Measured:
    """ASGI middleware, outermost: starts each request's clock, adds the timing headers to the answers of
    POSTs to `model_paths`, and reports every answer to `metrics` under its endpoint (one of
    `endpoints`, "/page" for the page's files, "unmatched" for anything else: labels stay few)."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics, endpoints: Collection[str],
                 model_paths: Collection[str]):
        self.app = app
        self.metrics = metrics
        self.endpoints = frozenset(endpoints)
        self.model_paths = frozenset(model_paths)

    def _endpoint(self, path: str) -> str:
        if path in self.endpoints:
            return path
        return "/page" if path.startswith("/page/") else "unmatched"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        timing = RequestTiming(time.perf_counter())
        scope.setdefault("state", {})[STATE_KEY] = timing
        model = scope["method"] == "POST" and scope["path"] in self.model_paths
        status = 500  # what the client gets if the app fails before answering

        async def timed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                if model:
                    headers = MutableHeaders(scope=message)
                    headers["X-Total-Time"] = _ms(time.perf_counter() - timing.start)
                    headers["X-Queue-Time"] = _ms(timing.queue_s)
                    headers["X-Inference-Time"] = _ms(timing.inference_s)
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            self.metrics.request(self._endpoint(scope["path"]), status, time.perf_counter() - timing.start,
                                 (timing.queue_s, timing.inference_s) if timing.first_submit is not None else None)
