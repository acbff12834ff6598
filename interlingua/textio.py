"""Text in from files and pipes: lines split the same way everywhere, and undecodable input
named by its line, so that a stray Latin-1 or binary file gets one clear error, not a traceback.

Lines split only at line breaks (\\n, \\r\\n, \\r), as Python's text files do, so a file and the
same text on stdin give the same lines; other characters Unicode counts as breaks (U+2028,
form feed) stay inside their line.
"""
from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import yaml

from interlingua.errors import InterlinguaError

_LINE_BREAK = re.compile(rb"\r\n|\n|\r")


class TextDecodeError(InterlinguaError):
    """Input that is not UTF-8 text; the message names the source and the line."""


def check_input_path(path: str | Path | None) -> None:
    """Refuse an input path that is missing or a folder, before a command does slower work (loading a model);
    None or "-" (stdin) is read when the command gets to it. Pipes and devices (`<(zcat f.gz)`, /dev/null) are
    inputs like files."""
    if path is None or str(path) == "-":
        if sys.stdin is None:  # started with standard input closed (`0<&-`, some service managers)
            raise InterlinguaError("no input: standard input is closed; give the input file with -i FILE")
        return
    file = Path(path)
    if file.is_dir():
        raise InterlinguaError(f"{file} is a folder: give the input file (one sentence per line)")
    if not file.exists():
        raise InterlinguaError(f"input file not found: {file}")


def check_standard_output() -> None:
    """Refuse to write to standard output where the process was started with it closed (`1>&-`), before a command
    does slower work: Python then has no `sys.stdout` and the results would be lost."""
    if sys.stdout is None:
        raise InterlinguaError("no output: standard output is closed; give an output file with -o FILE")


def read_input_lines(path: str | Path | None) -> list[str]:
    """The lines of a file, or of stdin for None or "-", decoded as every command decodes its input
    (`decode_lines`), so that each input line gives one output line or vector whichever way it came in."""
    check_input_path(path)
    if path is None or str(path) == "-":
        return decode_lines(sys.stdin.buffer.read(), "stdin")
    return decode_lines(Path(path).read_bytes(), str(path))


def decode_lines(raw: bytes, source: str) -> list[str]:
    """UTF-8 `raw` bytes as lines without their breaks; a final break ends the last line."""
    if not raw:
        return []
    pieces = _LINE_BREAK.split(raw)
    if pieces[-1] == b"":  # the text ended with a line break
        pieces.pop()
    lines = []
    for number, piece in enumerate(pieces, 1):
        if b"\0" in piece:
            raise TextDecodeError(f"{source}: line {number} holds NUL bytes: binary data, not text")
        try:
            lines.append(piece.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise TextDecodeError(f"{source}: line {number} is not UTF-8 text "
                                  f"(byte 0x{piece[err.start]:02x} at column {err.start + 1})") from None
    return lines


def decode_text(raw: bytes, source: str) -> str:
    """A whole UTF-8 document (a config, a corpus description); errors name the line."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        decode_lines(raw, source)  # raises, naming the first bad line
        raise


def read_text(path: Path, source: str | None = None) -> str:
    """The UTF-8 text of a file; undecodable bytes raise `TextDecodeError` naming the line."""
    return decode_text(Path(path).read_bytes(), source or str(path))


def iter_decoded_lines(raw_lines: Iterable[bytes], source: str) -> Iterator[str]:
    """Lines of a binary stream (a file read line by line), split and decoded exactly as
    `decode_lines` splits and decodes the whole: so a corpus streamed in gives the same lines."""
    number = 0
    for raw in raw_lines:
        if raw.endswith(b"\n"):
            raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
        elif raw.endswith(b"\r"):  # a last line ended by a lone CR
            raw = raw[:-1]
        for piece in raw.split(b"\r") if b"\r" in raw else (raw,):
            number += 1
            if b"\0" in piece:
                raise TextDecodeError(f"{source}: line {number} holds NUL bytes: binary data, not text")
            try:
                yield piece.decode("utf-8")
            except UnicodeDecodeError as err:
                raise TextDecodeError(f"{source}: line {number} is not UTF-8 text "
                                      f"(byte 0x{piece[err.start]:02x} at column {err.start + 1})") from None


def yaml_problem(err: yaml.YAMLError) -> str:
    """A YAML parse error as one line: what is wrong and where (line and column counted from 1), without the
    quoted source and caret lines PyYAML's own message spreads over several lines."""
    if not isinstance(err, yaml.MarkedYAMLError):
        return " ".join(str(err).split())
    where = err.problem_mark or err.context_mark
    parts = [f"line {where.line + 1}, column {where.column + 1}: " if where else "", err.problem or "invalid YAML"]
    if err.context:
        at = err.context_mark
        parts.append(f" ({err.context}" + (f" at line {at.line + 1}, column {at.column + 1})" if at else ")"))
    return "".join(parts)
