"""What a request body may do on its way in: be at most `payload_limit` bytes, and not stall.

A pure ASGI middleware, so that it acts before FastAPI reads (and buffers, and parses) the body:
a declared `Content-Length` over the limit is a 413 before a byte of the body is read, and a
chunked body is counted as it streams in and refused once it passes the limit, so a 100 MB body
costs the server neither the memory nor the time to take it in (uvicorn discards the rest of it
unbuffered). Starlette has a `max_body_size` of its own, but its 413 is plain text whenever the
length is declared; every error here is the service's JSON.

A client that stops sending in the middle of a body (after at most `read_timeout_s` without a
part of it) gets a 408 and its connection closes; stalls before the body, in the request's head,
are `connections.py`'s.
"""
from __future__ import annotations

import asyncio

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from interlingua.serving.error_responses import BodyRejected, error_response


class BodyGuard:
    """ASGI middleware: the payload limit and the body's read timeout, for every HTTP request."""

    def __init__(self, app: ASGIApp, payload_limit: int, read_timeout_s: float):
        self.app = app
        self.payload_limit = payload_limit
        self.read_timeout_s = read_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.payload_limit:
            message = f"the request body has {int(declared):,} bytes; at most {self.payload_limit:,} are allowed " \
                      "(--payload-limit)"
            await error_response(413, message, "body")(scope, receive, send)
            return
        received = 0
        more = True

        async def guarded_receive() -> Message:
            nonlocal received, more
            if not more:  # the body is in: what the app waits for now (a disconnect) is no read
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.read_timeout_s)
            except asyncio.TimeoutError:
                raise BodyRejected(408, f"the request body stalled: nothing of it came for {self.read_timeout_s:g} s "
                                        "(--read-timeout)", headers={"Connection": "close"}) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                more = bool(message.get("more_body", False))
                if received > self.payload_limit:
                    raise BodyRejected(413, f"the request body is longer than {self.payload_limit:,} bytes, the most "
                                            "allowed (--payload-limit)")
            else:
                more = False
            return message

        await self.app(scope, guarded_receive, send)
