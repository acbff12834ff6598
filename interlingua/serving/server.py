"""`serve(...)`: load a checkpoint once and answer HTTP requests until SIGTERM or Ctrl-C.

The model is loaded before the port is opened, so a bad checkpoint is the usual one-line error
and nothing ever listens without a model behind it. Stopping is graceful: the listening socket
closes at once, requests in flight get their answers (for up to `graceful_timeout_s`), the
batcher finishes what is queued, and `serve` returns normally, so the command exits 0.
"""
from __future__ import annotations

import ipaddress
import logging
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import uvicorn
from fastapi import FastAPI

from interlingua.errors import InterlinguaError
from interlingua.inference.api import load
from interlingua.serving.app import build_app
from interlingua.serving.auth import check_api_key
from interlingua.serving.connections import guarded_protocol
from interlingua.serving.limits import ServiceLimits

# uvicorn's own server logger: its configuration (made by uvicorn.Config) prints these lines beside
# uvicorn's, in its format, also when `serve` is called from Python with no logging set up.
server_log = logging.getLogger("uvicorn.error")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port); port 0 picks a free one (the log line says which)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP, and without
    # it every keep-alive response after the first waits ~40 ms for the client's delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise InterlinguaError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    sock.set_inheritable(True)
    return sock


@contextmanager
def _stop_signals_noted(received: list[int], server: uvicorn.Server) -> Iterator[None]:
    """While uvicorn serves it handles SIGINT / SIGTERM itself (graceful shutdown); afterwards it
    restores the previous handlers and raises the signal again. Our handlers here note that signal
    instead of letting it kill the process, so a graceful stop ends the command with exit code 0;
    a signal that comes before uvicorn has taken over stops the server as soon as it has started."""
    if threading.current_thread() is not threading.main_thread():  # signals are the main thread's business
        yield
        return

    def note(signum: int, _: FrameType | None) -> None:
        received.append(signum)
        server.should_exit = True

    previous = {sig: signal.signal(sig, note) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def server_config(app: FastAPI, limits: ServiceLimits, graceful_timeout_s: float = 30.0,
                  log_level: str = "info") -> uvicorn.Config:
    """uvicorn's settings for `app`: the connection limits of `limits` (idle keep-alive, the head's read
    deadline, open connections: `connections.py`) and a graceful stop."""
    return uvicorn.Config(app, log_level=log_level, lifespan="on",
                          timeout_graceful_shutdown=graceful_timeout_s,  # type: ignore[arg-type]  # a float works
                          http=guarded_protocol(limits.read_timeout_s, limits.max_connections),
                          timeout_keep_alive=limits.keep_alive_timeout_s)  # type: ignore[arg-type]  # a float works


def reachable_from_elsewhere(host: str) -> bool:
    """Whether a socket bound to `host` (an address) takes connections from other machines."""
    try:
        return not ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:  # not an address (a name bound as given): assume so
        return True


def serve(model_path: str | Path, host: str = "127.0.0.1", port: int = 8080, device: str = "auto",
          precision: str = "fp32", limits: ServiceLimits | None = None, graceful_timeout_s: float = 30.0,
          log_level: str = "info", api_key: str | None = None, shortlist: str | Path | None = None,
          engine: str = "native") -> None:
    """Serve the checkpoint at `model_path` over HTTP on host:port until SIGTERM or Ctrl-C (a second
    Ctrl-C stops at once); with `api_key`, requests need `Authorization: Bearer <api_key>` (`auth.py`).
    Raises `CheckpointError` for a missing or corrupt checkpoint and `InterlinguaError` when the
    address cannot be bound, `ConfigError` for an empty `api_key`. `shortlist`: a lexical shortlist file for
    translation (`Model.use_shortlist`); `engine`: what translates (`Model.load`)."""
    limits = limits or ServiceLimits()
    check_api_key(api_key)
    model = load(model_path, device, precision, engine)
    if shortlist is not None:
        model.use_shortlist(shortlist)
    app = build_app(model, limits, model_name=str(model_path), api_key=api_key)
    sock = listening_socket(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    shown_host = f"[{bound_host}]" if ":" in bound_host else bound_host
    server = uvicorn.Server(server_config(app, limits, graceful_timeout_s, log_level))
    langs = model.languages
    server_log.info("serving %s (%s; reads %s) on http://%s:%d (API docs: /docs); stop with Ctrl-C or SIGTERM",
                    model_path, model.device, ", ".join(langs.sources), shown_host, bound_port)
    if not api_key and reachable_from_elsewhere(bound_host):
        server_log.warning("listening on %s without an API key: anyone who reaches this address can use the "
                           "service; set --api-key (or INTERLINGUA_API_KEY), or keep --host on 127.0.0.1",
                           shown_host)
    received: list[int] = []
    try:
        with _stop_signals_noted(received, server):
            server.run(sockets=[sock])
    finally:
        sock.close()
    if received:
        server_log.info("stopped on %s, gracefully (requests in flight had up to %g s to finish)",
                        signal.Signals(received[0]).name, graceful_timeout_s)
