"""Typed suite results, and the one place that lays them out as the report JSON.

The JSON layout (`results`/`reference`/`elapsed_s`/`encode_s` keyed task -> embedder) is what
the published reports under docs/results/sentence/ hold and what readers of them expect, so it
is kept key for key; the dataclasses keep the code from passing that layout around untyped.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interlingua.evaluation.sentence.report import Table, jsonable, write_all_report, write_report

# one embedder's scores on one task, as the task's scoring function returns them: nested JSON-like values
# whose shape differs from task to task (each suite's report knows its own)
Score = dict[str, Any]


@dataclass(frozen=True)
class Timing:
    """Seconds one embedder spent on one task, and the part of them inside its encoder (the rest is fitting)."""

    total_s: float
    encode_s: float


@dataclass
class TaskRun:
    """One task across the embedders: a score each (None where the embedder lacks a language it needs),
    their timings, and the task's reference points (majority class, chance) where it has them."""

    scores: dict[str, Score | None] = field(default_factory=dict)
    timings: dict[str, Timing] = field(default_factory=dict)
    reference: dict[str, object] | None = None

    def record(self, name: str, score: Score, timing: Timing) -> None:
        self.scores[name] = score
        self.timings[name] = timing


class _Report:
    """What every result writes: its `to_dict` as plain JSON, and as markdown + JSON files."""

    _writer = staticmethod(write_report)

    def to_dict(self) -> dict:
        raise NotImplementedError

    def to_json(self) -> dict:
        """`<suite>.json` as written: plain JSON types only."""
        return jsonable(self.to_dict())

    def write(self, out_dir: Path) -> tuple[Path, Path]:
        """Write `<suite>.md` and `<suite>.json` into `out_dir` (for `all`, the suites' reports joined)."""
        return self._writer(self.to_dict(), out_dir)


@dataclass
class SuiteResult(_Report):
    """One suite's outcome: per-task runs, report tables, notes, what was not run and why, and timings."""

    suite: str
    embedders: list[str]
    settings: dict[str, object]
    tasks: dict[str, TaskRun] = field(default_factory=dict)
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    setup_s: dict[str, float] | None = None  # seconds spent building data before any task (probing sets)
    total_elapsed_s: float | None = None  # the suite's wall clock, set once it has run

    def task(self, name: str) -> TaskRun:
        """The run of task `name`, started empty on first use."""
        return self.tasks.setdefault(name, TaskRun())

    def skip(self, what: str, why: object) -> None:
        self.skipped[what] = str(why)

    def to_dict(self) -> dict:
        """The report layout with `Table` objects kept (what the markdown renders from)."""
        out: dict[str, Any] = {"suite": self.suite, "embedders": self.embedders, "settings": self.settings,
               "results": {name: run.scores for name, run in self.tasks.items()},
               "reference": {name: run.reference for name, run in self.tasks.items() if run.reference is not None},
               "tables": self.tables, "notes": self.notes, "skipped": self.skipped,
               "elapsed_s": {name: {e: t.total_s for e, t in run.timings.items()} for name, run in self.tasks.items()},
               "encode_s": {name: {e: t.encode_s for e, t in run.timings.items()} for name, run in self.tasks.items()}}
        if self.setup_s is not None:
            out["setup_s"] = self.setup_s
        if self.total_elapsed_s is not None:
            out["total_elapsed_s"] = self.total_elapsed_s
        return out


@dataclass
class AllResult(_Report):
    """Every suite of `all`, each also written as its own report."""

    _writer = staticmethod(write_all_report)

    embedders: list[str]
    suites: dict[str, SuiteResult] = field(default_factory=dict)
    total_elapsed_s: float | None = None
    suite: str = "all"

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"suite": self.suite, "embedders": self.embedders,
               "suites": {name: result.to_dict() for name, result in self.suites.items()},
               "elapsed_s": {name: {"suite": result.total_elapsed_s} for name, result in self.suites.items()}}
        if self.total_elapsed_s is not None:
            out["total_elapsed_s"] = self.total_elapsed_s
        return out
