"""The arguments the command line and the Python API share, bounded once.

`cli.py` makes its argparse types from these bounds and choices, and `Model` (and the functions
around it) checks its keyword arguments with the very same ones, so that a value one refuses the
other refuses too, in the same words: `argument --beam: must be <= 64 (...), got 65` from the
command line, `beam: must be <= 64 (...), got 65` from Python (an `ArgumentError`, which is a
`ValueError`; a value of the wrong type is an `ArgumentTypeError`, a `TypeError`). Nothing here
imports torch: the command line parses its arguments before it loads anything heavy.
"""
from __future__ import annotations

import argparse
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from interlingua.errors import ArgumentError, ArgumentTypeError

MAX_BEAM = 64
"""The largest beam the library and the CLI take. Beyond a few dozen hypotheses BLEU stops improving (it
often falls) while time and memory grow linearly: a beam of 1000 took 17 s and 1.35 GB for 16 sentences."""
BEAM_STOPS = ("all", "top")
"""When beam search is done with a sentence (`modules.search.beam_search_nbest`)."""
MAX_OUTPUT_LEN = 16384
"""The largest `max_len` (output subwords per sentence): four times the longest input a model reads
(`preprocess.max_len` is at most 4096), as the default limit is at most four times the model's own.
Greedy search keeps a column per step it may take, and a decoder that never ends a sentence (an
untrained one) takes them all, so an unbounded limit (10**9) is gigabytes and hours, not a longer output."""
PRECISIONS = ("fp32", "bf16", "fp16", "int8", "auto")
"""Inference precisions (`runtime.resolve_device_precision` says which a device can run)."""
ENGINES = ("native", "ctranslate2", "auto")
"""What runs translation: this package's own search, CTranslate2 on the model's cached export (shared
Transformers without a bridge, on the CPU), or `auto`: CTranslate2 where it exports and measures faster."""
POOLINGS = ("mean", "heads")
"""Sentence vectors: the mean of the bridge's heads, or the heads themselves."""
DOCUMENT_UNITS = ("document", "sentences")
"""Document vectors: the whole document as one sequence (DV), or the mean of its sentences' (SV)."""


def _shown(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


@dataclass(frozen=True)
class Bound:
    """A number's kind and range: whole or not, at least `low` (more than `low` where `strict`), at most
    `high` (with the reason, `why_high`), and always finite."""

    whole: bool
    low: float
    strict: bool = False
    high: float | None = None
    why_high: str = ""

    @property
    def expected(self) -> str:
        """What a value must be, for messages: "a whole number" or "a number"."""
        return "a whole number" if self.whole else "a number"

    def problem(self, value: float, shown: str) -> str | None:
        """What is wrong with a number of the right kind (`shown` as the user wrote it), or None."""
        if not math.isfinite(value) or value < self.low or (self.strict and value == self.low):
            return f"must be {'>' if self.strict else '>='} {_shown(self.low)}, got {shown}"
        if self.high is not None and value > self.high:
            why = f" ({self.why_high})" if self.why_high else ""
            return f"must be <= {_shown(self.high)}{why}, got {shown}"
        return None

    def parse(self, text: str) -> float:
        """The command line's reading of `text`, or `argparse.ArgumentTypeError` (a usage error naming the
        option) saying what is wrong."""
        try:
            value: float = int(text) if self.whole else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {self.expected}, got '{text}'") from None
        problem = self.problem(value, text)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value

    def check(self, name: str, value: Any) -> None:
        """The Python API's check of the argument `name`: `ArgumentTypeError` for a value of another kind
        (a bool, a string, a float where a whole number goes), `ArgumentError` for one out of range."""
        if isinstance(value, bool) or not isinstance(value, numbers.Integral if self.whole else numbers.Real):
            raise ArgumentTypeError(f"{name}: expected {self.expected}, got {value!r}")
        problem = self.problem(float(value), str(value))
        if problem:
            raise ArgumentError(f"{name}: {problem}")


COUNT = Bound(whole=True, low=1)
"""Beam sizes' and batch sizes' kind: a whole number >= 1."""
NON_NEGATIVE_INT = Bound(whole=True, low=0)
NON_NEGATIVE = Bound(whole=False, low=0)
POSITIVE = Bound(whole=False, low=0, strict=True)
BEAM = Bound(whole=True, low=1, high=MAX_BEAM,
             why_high="larger beams cost time and memory and do not translate better")
MAX_LEN = Bound(whole=True, low=1, high=MAX_OUTPUT_LEN, why_high="four times the longest input a model reads")
PORT = Bound(whole=True, low=0, high=65535)


def check_choice(name: str, value: Any, choices: Sequence[str]) -> None:
    """`value` is one of `choices`, or an `ArgumentError` in argparse's words."""
    if not isinstance(value, str) or value not in choices:
        raise ArgumentError(f"{name}: invalid choice: {value!r} (choose from {', '.join(map(repr, choices))})")


def check_language(name: str, value: Any) -> None:
    """A language code is a string (whether the model knows it is the model's `LanguageError`)."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name}: expected a language code (a string), got {value!r}")


def check_search(beam: Any, length_penalty: Any, max_len: Any, batch_size: Any, beam_stop: Any) -> None:
    """The search settings of `translate` and `generate` (the options of `interlingua translate`),
    checked before any work."""
    BEAM.check("beam", beam)
    NON_NEGATIVE.check("length_penalty", length_penalty)
    if max_len is not None:
        MAX_LEN.check("max_len", max_len)
    COUNT.check("batch_size", batch_size)
    check_choice("beam_stop", beam_stop, BEAM_STOPS)
