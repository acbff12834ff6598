"""What one request may ask of the service, and the checks that say which field broke a limit.

Limits keep one client from holding the single model thread for long (a request's texts all go
through one model call) and bound the memory a request can take; they are checked before any
work is queued, so a rejected request costs nothing.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from interlingua.serving.error_responses import RequestFieldError


@dataclass(frozen=True)
class ServiceLimits:
    """Per-request limits and the batcher's settings (`interlingua serve --max-texts ...`)."""

    max_texts: int = 64
    """Texts in one request (`texts` / `input`)."""
    max_chars: int = 2000
    """Characters in one text (longer inputs would be truncated to the model's max_len subwords anyway)."""
    max_wait_ms: float = 0.0
    """How long a request waits for companions when the model is idle (while it is busy, requests
    gather anyway); 0 measured best (bench/results/2026-11-24.md)."""
    max_batch_texts: int = 64
    """Texts in one model call (a single request with more runs alone)."""

    def __post_init__(self) -> None:
        if self.max_texts < 1 or self.max_chars < 1 or self.max_batch_texts < 1:
            raise ValueError(f"limits must be at least 1: {self}")
        if not self.max_wait_ms >= 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {self.max_wait_ms}")


def check_texts(texts: Sequence[str], field: str, limits: ServiceLimits, indexed: bool = True) -> None:
    """Reject an empty list, too many texts, or a text over `max_chars` (naming its index; with
    `indexed` False the field held one string, so the field alone is named).
    Empty strings are fine: the library gives them an empty translation or a zero vector."""
    if not texts:
        raise RequestFieldError(field, "the list of texts is empty; send at least one text")
    if len(texts) > limits.max_texts:
        raise RequestFieldError(field, f"{len(texts)} texts in one request; at most {limits.max_texts} are allowed "
                                       "(split them over several requests)")
    for index, text in enumerate(texts):
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
