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

And the framing of a request is checked where h11 lets it through (`FramedConnection`): a head (request
line and headers) over `MAX_HEAD_BYTES` is a 431 however it arrives (h11 itself refuses only a head
that is still incomplete past its limit, so one that came in a single socket read of up to 256 KiB
passed); a request with both `Content-Length` and `Transfer-Encoding` is a 400 (RFC 9112 §6.1: the
two can disagree about where the body ends, which a proxy in front and this server could read
differently, smuggling a second request past the proxy). Either closes the connection; so does any
other malformed request, with h11's reason in the service's JSON error.
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


MAX_HEAD_BYTES = 16 * 1024
"""Bytes of a request's head (request line and headers, as nginx's and h11's default buffer)."""


def raw_error(status: int, message: str, field: str | None = None) -> bytes:
    """A whole HTTP/1.1 answer with the service's JSON error that closes the connection: for the moments
    when no request (so no ASGI app) is there to answer."""
    body = json.dumps({"error": {"message": message, "field": field}}).encode("utf-8")
    head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n")
    return head.encode("ascii") + body


class RequestRefused(h11.RemoteProtocolError):
    """A request head h11 parsed but the service refuses: its status (`error_status_hint`), the field."""

    def __init__(self, status: int, message: str, field: str | None):
        super().__init__(message, error_status_hint=status)
        self.field = field


def head_bytes(request: h11.Request) -> int:
    """The bytes of `request`'s head as sent, but for optional whitespace around header values."""
    line = len(request.method) + len(request.target) + len(b"HTTP/") + len(request.http_version) + 4
    return line + sum(len(name) + len(value) + 4 for name, value in request.headers.raw_items()) + 2


class FramedConnection(h11.Connection):
    """h11's server side, refusing what h11 parses but the service must not answer: a head over
    `MAX_HEAD_BYTES`, or a body framed by both Content-Length and Transfer-Encoding. The refusal (or
    h11's own) is kept in `refused` for the answer, as the protocol closes the connection."""

    def __init__(self) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.refused: h11.RemoteProtocolError | None = None

    def next_event(self) -> Any:
        reading_head = self.their_state is h11.IDLE
        try:
            event = super().next_event()
            if isinstance(event, h11.Request):
                self._check(event)
        except h11.RemoteProtocolError as err:
            if reading_head and err.error_status_hint == 431 and not isinstance(err, RequestRefused):
                err = RequestRefused(431, f"the request head (request line and headers) is over {MAX_HEAD_BYTES:,} "
                                          "bytes, the most allowed", "header")
            self.refused = err
            raise err from None
        return event

    @staticmethod
    def _check(request: h11.Request) -> None:
        size = head_bytes(request)
        if size > MAX_HEAD_BYTES:
            raise RequestRefused(431, f"the request head (request line and headers) has {size:,} bytes; at most "
                                      f"{MAX_HEAD_BYTES:,} are allowed", "header")
        names = {name for name, _ in request.headers}  # lower case
        if b"content-length" in names and b"transfer-encoding" in names:
            raise RequestRefused(400, "the request has both Content-Length and Transfer-Encoding, which may disagree "
                                      "on where its body ends; send one of them", "header.transfer-encoding")


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the head deadline, the connection cap (class attributes: see
    `guarded_protocol`) and the framing checks of `FramedConnection`."""

    read_timeout_s: float = 30.0
    max_connections: int = 2048

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn = FramedConnection()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request h11 (or `FramedConnection`) refused: the refusal's status and
        reason in the service's JSON, not a plain-text 400 "Invalid HTTP request received."."""
        refused = getattr(self.conn, "refused", None)
        if refused is None:  # pragma: no cover - uvicorn calls this only after next_event raised
            self._close_with(400, msg)
            return
        status = refused.error_status_hint if 400 <= refused.error_status_hint < 500 else 400
        message = str(refused) if isinstance(refused, RequestRefused) else f"invalid HTTP request: {refused}"
        self._close_with(status, message, getattr(refused, "field", None))

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

    def _close_with(self, status: int, message: str, field: str | None = None) -> None:
        self.transport.write(raw_error(status, message, field))
        self.transport.close()

    def _peer(self) -> str:
        return f"{self.client[0]}:{self.client[1]:d}" if self.client else "a client"


def guarded_protocol(read_timeout_s: float, max_connections: int) -> type[GuardedH11Protocol]:
    """The protocol class for `uvicorn.Config(http=...)` with these settings."""
    settings: dict[str, Any] = {"read_timeout_s": read_timeout_s, "max_connections": max_connections}
    return type("GuardedH11Protocol", (GuardedH11Protocol,), settings)
