"""What one request may ask of the service, what the service takes on at once, and the checks that
say which field broke a limit.

Limits keep one client from holding the single model thread for long (a request's texts all go
through one model call), bound the memory a request can take, and bound the work the service
accepts at once, so that under overload it answers quickly with 429 or 503 instead of queueing
without end; they are checked before any work is queued, so a rejected request costs nothing.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

from interlingua.data.inputs import text_problem
from interlingua.serving.error_responses import RequestFieldError


@dataclass(frozen=True)
class ServiceLimits:
    """Per-request limits, the batcher's settings and the service's bounds (`interlingua serve
    --max-texts ...`; each field's default is the flag's)."""

    max_texts: int = 64
    """Texts in one request (`texts` / `input`)."""
    max_chars: int = 2000
    """Characters in one text (longer inputs would be truncated to the model's max_len subwords anyway)."""
    max_wait_ms: float = 0.0
    """How long a request waits for companions when the model is idle (while it is busy, requests
    gather anyway); 0 measured best (bench/results/2026-11-24.md)."""
    max_batch_texts: int = 64
    """Texts in one model call (a single request with more runs alone)."""
    max_batch_tokens: int = 8192
    """Subwords in one model call, estimated (`estimated_subwords`); a single request with more runs alone."""
    payload_limit: int = 2_000_000
    """Bytes of one request body; a larger one is a 413 before it is read (as TEI's --payload-limit)."""
    max_concurrent_requests: int = 512
    """Requests to the model endpoints answered at once (queued or in a model call); one more is a
    429 at once, so a flood waits in the clients, not in the server's memory (as TEI's)."""
    request_timeout_s: float = 60.0
    """Seconds from a request's arrival to its answer; a request still waiting is a 503 and its texts
    leave the queue (a model call already running finishes; its answer is dropped)."""
    read_timeout_s: float = 30.0
    """Seconds a client may take to send a request's head (request line and headers), and to send each
    next part of its body; a stalled client gets a 408 and its connection closes (as nginx's
    client_header_timeout / client_body_timeout)."""
    keep_alive_timeout_s: float = 5.0
    """Seconds an idle keep-alive connection stays open after an answer (uvicorn's timeout_keep_alive)."""
    max_connections: int = 2048
    """Open connections; one more is answered 503 and closed at once."""

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if field.type == "int" and value < 1:
                raise ValueError(f"{field.name} must be at least 1, got {value}")
            if field.type == "float" and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{field.name} must be a finite number >= 0, got {value}")
        for name in ("request_timeout_s", "read_timeout_s", "keep_alive_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")


def estimated_subwords(text: str, max_len: int) -> int:
    """A text's subwords for `max_batch_tokens`, estimated without tokenizing: its characters, at most
    the `max_len` subwords the model reads of it (+1: the end of the sentence). Exact tokenizing
    would cost a second sentencepiece pass per request on the event loop (~0.4 ms a sentence, a
    tenth of a small model's embedding); characters are 3-5 per subword in alphabetic scripts, so
    the estimate errs on the safe side (smaller batches), and long texts are capped exactly."""
    return min(len(text), max_len) + 1


def check_texts(texts: Sequence[str], field: str, limits: ServiceLimits, indexed: bool = True) -> None:
    """Reject an empty list, too many texts, a text that is not valid Unicode (a lone UTF-16 surrogate
    from `"\\ud800"` in JSON: no tokenizer takes it) or a text over `max_chars`, naming its index
    (with `indexed` False the field held one string, so the field alone is named).
    Empty strings are fine: the library gives them an empty translation or a zero vector."""
    if not texts:
        raise RequestFieldError(field, "the list of texts is empty; send at least one text")
    if len(texts) > limits.max_texts:
        raise RequestFieldError(field, f"{len(texts)} texts in one request; at most {limits.max_texts} are allowed "
                                       "(split them over several requests)")
    for index, text in enumerate(texts):
        problem = text_problem(text)
        if problem is not None:
            where, which = _named(field, index, indexed)
            raise RequestFieldError(where, f"{which} {problem}")
        if len(text) > limits.max_chars:
            where, which = _named(field, index, indexed)
            raise RequestFieldError(where, f"{which} has {len(text)} characters; at most {limits.max_chars} are "
                                           "allowed per text")


def check_written(texts: Sequence[str], field: str, limits: ServiceLimits, indexed: bool = True) -> None:
    """`check_texts`, and no blank text either: where the answer is a text's tokens or its vector
    compared with others (attention, similarity), an empty text has nothing to show."""
    check_texts(texts, field, limits, indexed)
    for index, text in enumerate(texts):
        if not text.strip():
            where, which = _named(field, index, indexed)
            raise RequestFieldError(where, f"{which} is empty: type a sentence (an empty text has no subwords "
                                           "to attend over and no sentence vector to compare)")


def _named(field: str, index: int, indexed: bool) -> tuple[str, str]:
    """(the field at fault, the text's name in the message) for text `index` of `field`."""
    return (f"{field}.{index}", f"text {index}") if indexed else (field, "the text")
