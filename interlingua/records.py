"""A run's dev validations, typed: `Validation` (one validation's means and, per direction, its
`DevScores`), and the reading of metrics.jsonl, whose "valid" lines hold them.

This module alone reads a validation record's keys. `to_json` writes the dict metrics.jsonl and a
checkpoint's training history have always stored, key for key; `from_json` reads it back, older
shapes too (no `mean_loss`, `zero_resource`, `elapsed_s` or `type`), and names what is wrong with a
malformed one. It is a base module because its readers span the layers: figures.py (base) draws the
dev curves, model_files keeps the history in checkpoints and writes it into model cards, training
selects and stops on it, evaluation and bench/ read it back.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interlingua.errors import RecordError

log = logging.getLogger(__name__)

VALID = "valid"
"""The `type` of a validation's line in metrics.jsonl."""


@dataclass(frozen=True, kw_only=True)
class DevScores:
    """One direction's dev scores: teacher-forced loss per target token and its perplexity, lowercased
    BLEU and chrF of the translations. A score other than BLEU is None where the record holds null (not
    finite when written) or nothing (hand-made or older records)."""

    bleu: float
    chrf: float | None = None
    loss: float | None = None
    ppl: float | None = None
    zero_shot: bool = False
    """Never trained: reported, never selected on."""
    zero_resource: bool = False
    """Zero-shot, but trained on synthetic pairs (`train.synthetic`)."""

    @property
    def mark(self) -> str:
        """"+" for a zero-resource direction, "*" for another zero-shot one, "" for a trained one."""
        return "+" if self.zero_resource else "*" if self.zero_shot else ""

    def to_json(self) -> dict[str, Any]:
        return {"loss": self.loss, "ppl": self.ppl, "bleu": self.bleu, "chrf": self.chrf, "zero_shot": self.zero_shot,
                "zero_resource": self.zero_resource}

    @classmethod
    def from_json(cls, stored: object, where: str = "dev scores") -> DevScores:
        if not isinstance(stored, Mapping):
            raise RecordError(f"{where}: not a mapping but {type(stored).__name__}")
        bleu = _number(stored, "bleu", where)
        if bleu is None:
            raise RecordError(f"{where}: no 'bleu' (a number)")
        return cls(bleu=bleu, chrf=_number(stored, "chrf", where),
                   loss=_number(stored, "loss", where), ppl=_number(stored, "ppl", where),
                   zero_shot=_flag(stored, "zero_shot", where), zero_resource=_flag(stored, "zero_resource", where))


@dataclass(frozen=True, kw_only=True)
class Validation:
    """The dev validation of one step: per direction ("de-en") its scores, and the mean BLEU and loss of the
    trained directions (None where no trained direction had dev sentences), which select and stop a run
    (with `train.synthetic.selection: with_made`, the directions trained on made pairs count too)."""

    step: int
    mean_bleu: float | None = None
    mean_loss: float | None = None
    """None also in records written before the dev loss was averaged."""
    directions: dict[str, DevScores] = field(default_factory=dict)
    elapsed_s: float | None = None
    """Seconds of training up to this step (the trainer's, added after scoring); None where not recorded."""

    @property
    def zero_shot_bleu(self) -> float | None:
        """The mean BLEU of the zero-shot directions (None: there are none)."""
        scores = [s.bleu for s in self.directions.values() if s.zero_shot]
        return sum(scores) / len(scores) if scores else None

    def to_json(self) -> dict[str, Any]:
        """The record as metrics.jsonl and a checkpoint's history store it (`elapsed_s` only where known)."""
        out: dict[str, Any] = {"type": VALID, "step": self.step, "mean_bleu": self.mean_bleu,
                               "mean_loss": self.mean_loss,
                               "directions": {name: s.to_json() for name, s in self.directions.items()}}
        if self.elapsed_s is not None:
            out["elapsed_s"] = self.elapsed_s
        return out

    @classmethod
    def from_json(cls, stored: object) -> Validation:
        """A stored record; keys an older version did not write read as their defaults. A `RecordError` names
        what is malformed."""
        if not isinstance(stored, Mapping):
            raise RecordError(f"a validation record must be a mapping, not {type(stored).__name__}")
        where = f"validation record of step {stored.get('step')!r}"
        if stored.get("type", VALID) != VALID:
            raise RecordError(f"{where}: its type is {stored['type']!r}, not {VALID!r}")
        step = stored.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            raise RecordError(f"a validation record needs a whole-number 'step', not {step!r}")
        directions = stored.get("directions", {})
        if not isinstance(directions, Mapping):
            raise RecordError(f"{where}: 'directions' is not a mapping but {type(directions).__name__}")
        return cls(step=step, mean_bleu=_number(stored, "mean_bleu", where),
                   mean_loss=_number(stored, "mean_loss", where),
                   directions={str(name): DevScores.from_json(s, f"{where}, direction {name}")
                               for name, s in directions.items()},
                   elapsed_s=_number(stored, "elapsed_s", where))


def is_validation(record: Mapping[str, Any]) -> bool:
    """Whether a metrics.jsonl record is a validation's (its other kinds: "train", "stop")."""
    return record.get("type") == VALID


def validations(records: Iterable[Mapping[str, Any]]) -> list[Validation]:
    """The validation records among metrics.jsonl's records, typed, in order."""
    return [Validation.from_json(r) for r in records if is_validation(r)]


def read_validations(path: Path) -> list[Validation]:
    """The validations of a metrics.jsonl, in order (none: no file); a malformed one is a `RecordError`
    naming its line."""
    found = []
    for n, rec in enumerate(read_records(path), 1):
        if is_validation(rec):
            try:
                found.append(Validation.from_json(rec))
            except RecordError as err:
                raise RecordError(f"{path}, line {n}: {err}") from None
    return found


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every record of a metrics.jsonl (none: no file), as logged."""
    records = []
    for n, line in enumerate(log_lines(path), 1):
        try:
            rec = json.loads(line)
        except ValueError:
            raise RecordError(f"{path}, line {n}: not JSON: {line[:80]!r}") from None
        if not isinstance(rec, dict):
            raise RecordError(f"{path}, line {n}: not a JSON object: {line[:80]!r}")
        records.append(rec)
    return records


def log_lines(path: Path) -> list[str]:
    """A metrics.jsonl's lines, but for a last one cut short (a kill or a full disk mid-append), which is
    dropped with a warning; none where there is no file."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    if lines:
        try:
            json.loads(lines[-1])
        except ValueError:
            log.warning("%s: dropping its last line, cut short: %r", path, lines[-1][:80])
            lines.pop()
    return lines


def _number(stored: Mapping[str, Any], key: str, where: str) -> float | None:
    value = stored.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RecordError(f"{where}: {key!r} is not a number: {value!r}")
    return value


def _flag(stored: Mapping[str, Any], key: str, where: str) -> bool:
    value = stored.get(key, False)
    if not isinstance(value, bool):
        raise RecordError(f"{where}: {key!r} is not true or false: {value!r}")
    return value
