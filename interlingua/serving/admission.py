"""The bound on work in the service: at most `max_concurrent_requests` model requests at once.

Why: the model answers a fixed number of texts a second; past that, every request accepted only
lengthens the queue, so latency grows without bound and memory with it. Refusing the one request
too many at once (429 with Retry-After, as TEI does) keeps the latency of the accepted ones bounded
and tells clients to back off. A pure ASGI middleware, so a refused request costs neither reading
nor parsing its body. Requests that do not reach the model (health, languages, the page) are not
counted: they stay answered under any load.
"""
from __future__ import annotations

from collections.abc import Collection

from starlette.types import ASGIApp, Receive, Scope, Send

from interlingua.serving.error_responses import error_response

RETRY_AFTER_S = 1
"""What a refused client is told to wait: about the time the model takes to drain a full batch."""


class InFlight:
    """The number of model requests being answered now (the /metrics gauge reads it too)."""

    def __init__(self) -> None:
        self.count = 0


class AdmissionLimit:
    """ASGI middleware: a POST to one of `paths` while `limit` are in flight is a 429."""

    def __init__(self, app: ASGIApp, paths: Collection[str], limit: int, in_flight: InFlight):
        self.app = app
        self.paths = frozenset(paths)
        self.limit = limit
        self.in_flight = in_flight

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return
        if self.in_flight.count >= self.limit:
            response = error_response(429, f"the service is answering {self.limit} requests already, the most it "
                                           f"takes at once (--max-concurrent-requests); retry in {RETRY_AFTER_S} s",
                                      None, {"Retry-After": str(RETRY_AFTER_S)})
            await response(scope, receive, send)
            return
        self.in_flight.count += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight.count -= 1
