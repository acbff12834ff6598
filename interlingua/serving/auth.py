"""An optional API key: `Authorization: Bearer KEY` on every request but the open ones.

Open without the key: GET /health (load balancers and orchestrators probe it without secrets),
and the static files that hold no data: the page at / with its script and style sheet, and the API
docs (/docs and the /openapi.json they render). Everything that reaches the model or tells about
the model and its traffic (/languages, /model, /metrics, every POST) needs the key; the page asks
for it when the service answers 401 and sends it with each of its calls.

A pure ASGI middleware, so that a request without the key costs neither reading nor parsing its
body; the key is compared in constant time (`hmac.compare_digest`).
"""
from __future__ import annotations

import hmac
from collections.abc import Mapping

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from interlingua.errors import ConfigError
from interlingua.serving.error_responses import error_response

OPEN_PATHS = frozenset({"/health", "/", "/docs", "/openapi.json"})
OPEN_PREFIXES = ("/page/",)
ENV_VAR = "INTERLINGUA_API_KEY"


def check_api_key(key: str | None, source: str = "the API key") -> str | None:
    """`key` itself, or None for no key. A key that is given but empty (or blank: header values lose
    their surrounding spaces) is refused, not taken as no key: `--api-key "$UNSET_VAR"` must not
    serve without authentication."""
    if key is not None and not key.strip():
        raise ConfigError(f"{source} is {'empty' if not key else 'blank'}: give a key, or leave it out to serve "
                          "without one")
    return key


def api_key_from(flag: str | None, environ: Mapping[str, str]) -> str | None:
    """The service's key: --api-key, else the environment variable, else None; either empty is an error."""
    if flag is not None:
        return check_api_key(flag, "--api-key")
    return check_api_key(environ.get(ENV_VAR), f"the environment variable {ENV_VAR}")


def is_open(path: str) -> bool:
    """Whether `path` is answered without the key."""
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


class ApiKey:
    """ASGI middleware: requests outside `is_open` without `Authorization: Bearer <key>` are a 401."""

    def __init__(self, app: ASGIApp, key: str):
        if not key:
            raise ValueError("the API key is empty")
        self.app = app
        self.key = key.encode("utf-8")  # as a client sends it; header bytes come back from latin-1 below

    def _allowed(self, scope: Scope) -> bool:
        scheme, _, credentials = Headers(scope=scope).get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(credentials.strip().encode("latin-1"), self.key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_open(scope["path"]) or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        sent = "authorization" in Headers(scope=scope)
        message = ("the API key is wrong: send the service's key as Authorization: Bearer KEY" if sent else
                   "this service needs an API key: send it as the header Authorization: Bearer KEY")
        response = error_response(401, message, "header.authorization", {"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)
