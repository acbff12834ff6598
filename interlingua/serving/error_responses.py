"""Every error the service returns has one shape: `{"error": {"message": ..., "field": ...}}`.

A client (or a person reading curl output) should learn from one line what was wrong and where:
`field` is the request part at fault as a dotted path (`body.texts.3`, `body.src`,
`header.content-type`), or null when no single field is to blame. Bad input is always a 4xx;
a 500 means a bug in the service, and its message says so.
"""
from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from interlingua.errors import InterlinguaError

log = logging.getLogger(__name__)


class RequestFieldError(Exception):
    """A request the service will not run, blamed on one field (422 unless `status` says otherwise);
    `headers` go with the answer (Retry-After, WWW-Authenticate)."""

    def __init__(self, field: str | None, message: str, status: int = 422, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.field = field
        self.message = message
        self.status = status
        self.headers = headers


class BodyRejected(StarletteHTTPException):
    """A request body refused while it is read (413 over the payload limit, 408 stalled). Raised from
    the ASGI `receive` that FastAPI reads the body with, which lets Starlette's HTTP exceptions through
    (any other exception there becomes a 400 "error parsing the body")."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(status_code=status, detail=message, headers=headers)
        self.field = "body"


def error_response(status: int, message: str, field: str | None, headers: dict[str, str] | None = None
                   ) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "field": field}}, status_code=status, headers=headers)


def _dotted(loc: tuple[Any, ...] | list[Any]) -> str:
    return ".".join(str(part) for part in loc)


_TYPE_LABELS = {"str", "int", "float", "bool", "list", "dict", "none", "bytes"}


def _is_union_branch(part: Any) -> bool:
    """pydantic puts the branch of a union (`str`, `list[str]`) into an error's location; a request
    field is never named so."""
    return isinstance(part, str) and (part in _TYPE_LABELS or "[" in part)


def _blamed(errors: list[dict[str, Any]]) -> tuple[tuple[Any, ...], str]:
    """(location, message) of the first problem. For a value that fits no branch of a union (a number
    for `input: str | list[str]`), the deepest branch error names the item at fault (`input.1`), or,
    where no branch got past the value itself, the field is blamed with every branch's complaint."""
    loc = tuple(errors[0].get("loc", ()))
    tag = next((i for i, part in enumerate(loc) if _is_union_branch(part)), None)
    if tag is None:
        return loc, errors[0].get("msg", "invalid value")
    prefix = loc[:tag]
    branches = [e for e in errors
                if tuple(e.get("loc", ()))[:tag] == prefix and len(e.get("loc", ())) > tag
                and _is_union_branch(e["loc"][tag])]
    # A branch whose type the value has (a string, but not valid Unicode) says more than "not a list".
    fitting = [e for e in branches if not str(e.get("type", "")).endswith("_type")]
    branches = fitting or branches
    deepest = max(branches, key=lambda e: len(e["loc"]))
    if len(deepest["loc"]) > tag + 1:
        return prefix + tuple(deepest["loc"][tag + 1:]), deepest.get("msg", "invalid value")
    return prefix, "; or ".join(dict.fromkeys(e.get("msg", "invalid value") for e in branches))


def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
    """pydantic's first complaint, with its location as the field; invalid JSON is a 400."""
    errors = list(exc.errors())
    if not errors:  # pragma: no cover - FastAPI always gives at least one
        return error_response(422, "invalid request", None)
    first = errors[0]
    if first.get("type") == "json_invalid":
        loc = tuple(first.get("loc", ()))
        detail = (first.get("ctx") or {}).get("error", "JSON decode error")
        position = f" at character {loc[1]}" if len(loc) > 1 else ""
        return error_response(400, f"the request body is not valid JSON: {detail}{position}", "body")
    if first.get("type") == "missing" and tuple(first.get("loc", ())) == ("body",):
        return error_response(422, "the request has no body; send a JSON object (see /docs)", "body")
    loc, message = _blamed(errors)
    field = _dotted(loc) or None
    if first.get("type") == "missing":
        message = "this field is required"
    elif first.get("type") == "extra_forbidden":
        message = "unknown field (see /docs for the fields of this endpoint)"
    return error_response(422, f"{field}: {message}" if field else message, field)


def _field_error(_: Request, exc: RequestFieldError) -> JSONResponse:
    return error_response(exc.status, exc.message, exc.field, exc.headers)


def _library_error(_: Request, exc: InterlinguaError) -> JSONResponse:
    """The library's own user-facing errors (unknown language, unsupported pooling): bad input, not bugs."""
    return error_response(422, str(exc), None)


def _unreadable_body(cause: BaseException | None) -> str:
    """Why FastAPI could not read a body as JSON, where its JSON parser raised something other than a
    syntax error (FastAPI's own message says only "There was an error parsing the body")."""
    if isinstance(cause, UnicodeDecodeError):  # JSON is UTF-8 (or UTF-16/32, told by its first bytes)
        return (f"the request body is not valid JSON: its bytes are not {cause.encoding.upper()} text (byte "
                f"0x{cause.object[cause.start]:02x} at offset {cause.start})")
    if isinstance(cause, RecursionError):
        return "the request body is not JSON the service reads: its arrays or objects are nested too deeply"
    if isinstance(cause, ValueError):  # the one other: an integer of more digits than Python converts (4,300)
        return "the request body is not JSON the service reads: a number in it has too many digits"
    return "the request body could not be read as JSON"


def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
    """404 (no such endpoint), 405 (wrong method) and the like, in the same shape as the rest. A 400 that
    names no field is FastAPI's for a body it could not parse: the body is blamed, with the reason."""
    headers = getattr(exc, "headers", None)
    field, message = getattr(exc, "field", None), str(exc.detail)
    if exc.status_code == 400 and field is None:
        field, message = "body", _unreadable_body(exc.__cause__)
    return error_response(exc.status_code, message, field, dict(headers) if headers else None)


def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    """Only bugs get here; the traceback goes to the server log, the client gets a JSON 500."""
    log.error("unexpected error while answering %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, f"internal server error ({type(exc).__name__}: {exc}); this is a bug in the "
                               "service, not in the request: the server log has the traceback", None)


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers that give every error the shape above."""
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestFieldError, _field_error)  # type: ignore[arg-type]
    app.add_exception_handler(InterlinguaError, _library_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected_error)
