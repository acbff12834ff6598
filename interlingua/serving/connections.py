"""Connections that hold the server without sending a request: a deadline for a request's head, and a
cap on open connections.

Why: uvicorn closes an idle keep-alive connection after an answer (`timeout_keep_alive`), but a
client that connects and sends nothing, or half a request line and then nothing (slowloris), holds
its socket and its protocol object for ever; a few thousand of them exhaust the server's file
descriptors. Its HTTP protocol (h11) is extended here, nothing is copied:

- the head of a request (request line and headers) must arrive within `read_timeout_s` of the
  connection's start or of its first byte after an answer; a deadline, not a gap between bytes,
  so trickling a byte now and then does not keep it open. The client gets a 408 (JSON) and the
  connection closes. Stalls inside a body are `request_body.py`'s (the app is reading then);
  the rest of a body the service already answered (a 413) is discarded, with the same timeout
  between its parts;
- past `max_connections` open connections, a new one is answered 503 (JSON) and closed at once.

Headers are at most h11's 16 KiB (a longer head is uvicorn's 400).
"""
from __future__ import annotations

import asyncio
import json
import logging
from http import HTTPStatus
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)


def raw_error(status: int, message: str) -> bytes:
    """A whole HTTP/1.1 answer with the service's JSON error that closes the connection: for the moments
    when no request (so no ASGI app) is there to answer."""
    body = json.dumps({"error": {"message": message, "field": None}}).encode("utf-8")
    head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n")
    return head.encode("ascii") + body


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the head deadline and the connection cap (class attributes: see
    `guarded_protocol`)."""

    read_timeout_s: float = 30.0
    max_connections: int = 2048

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._read_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            log.warning("%d connections open, the most allowed (--max-connections): refused one", self.max_connections)
            self._close_with(503, f"the service has {self.max_connections} connections open, the most it takes "
                                  "(--max-connections); retry later")
            return
        self._watch()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        super().connection_lost(exc)

    # --- the read timer ---------------------------------------------------------------------------

    def _watch(self) -> None:
        """Arm, re-arm or stop the timer after the client's latest bytes."""
        if self.transport.is_closing():
            self._stop_timer()
        elif self.conn.their_state is h11.IDLE:  # a request head to come: one deadline for all of it
            if self._read_timer is None:
                self._read_timer = self.loop.call_later(self.read_timeout_s, self._head_timed_out)
        elif self.conn.their_state is h11.SEND_BODY and self.conn.our_state in (h11.DONE, h11.MUST_CLOSE):
            self._stop_timer()  # answered already; the rest of the body is discarded, part by part
            self._read_timer = self.loop.call_later(self.read_timeout_s, self._discard_timed_out)
        else:
            self._stop_timer()

    def _stop_timer(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _head_timed_out(self) -> None:
        self._read_timer = None
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            log.debug("%s: no complete request head within %g s; closed", self._peer(), self.read_timeout_s)
            self._close_with(408, f"no complete request (line and headers) came within {self.read_timeout_s:g} s "
                                  "(--read-timeout)")

    def _discard_timed_out(self) -> None:
        self._read_timer = None
        if not self.transport.is_closing():
            log.debug("%s: the rest of an answered request's body stalled; closed", self._peer())
            self.transport.close()

    def _close_with(self, status: int, message: str) -> None:
        self.transport.write(raw_error(status, message))
        self.transport.close()

    def _peer(self) -> str:
        return f"{self.client[0]}:{self.client[1]:d}" if self.client else "a client"


def guarded_protocol(read_timeout_s: float, max_connections: int) -> type[GuardedH11Protocol]:
    """The protocol class for `uvicorn.Config(http=...)` with these settings."""
    settings: dict[str, Any] = {"read_timeout_s": read_timeout_s, "max_connections": max_connections}
    return type("GuardedH11Protocol", (GuardedH11Protocol,), settings)
