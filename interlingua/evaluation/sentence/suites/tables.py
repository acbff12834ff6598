"""Turning task runs into report rows: one cell per embedder, averages, published rows, matrices."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from interlingua.evaluation.sentence.paper_numbers import LOCAL_NOTE, LOCAL_SUFFIX, paper_rows
from interlingua.evaluation.sentence.report import Table
from interlingua.evaluation.sentence.suites.results import Score, SuiteResult, TaskRun


def cells(run: TaskRun, names: list[str], getter: Callable[[Score], object]) -> list:
    """`getter` of each embedder's score, None where it has none (a language it lacks)."""
    return [None if (score := run.scores.get(n)) is None else getter(score) for n in names]


def add_average(table: Table) -> None:
    """AVG row over the rows where every column has a value (so averages compare like with like)."""
    full = [row for _, row in table.rows if all(isinstance(c, (int, float)) for c in row)]
    if len(full) > 1:
        table.add("AVG", [float(np.mean([row[i] for row in full])) for i in range(len(table.columns))])


def with_paper(table: Table) -> Table:
    """Attach the papers' published Multi30k numbers for the table's tasks (shown under it, kept in the JSON)."""
    labels = [label for label, _ in table.rows]
    table.paper = paper_rows(labels)
    if table.paper and any(label.endswith(LOCAL_SUFFIX) for label in labels):
        table.paper_note = LOCAL_NOTE
    return table


def add_matrix_rows(table: Table, run: TaskRun, names: list[str], key: str) -> None:
    """One row per `a → b` of the scores' `{a: {b: value}}` under `key`, one cell per embedder."""
    rows: dict[str, list] = {}
    for j, name in enumerate(names):
        for a, row in (run.scores.get(name) or {}).get(key, {}).items():
            for b, value in row.items():
                rows.setdefault(f"{a} → {b}", [None] * len(names))[j] = value
    for label, row_cells in rows.items():
        table.add(label, row_cells)


def note_missing_languages(result: SuiteResult, run: TaskRun, names: list[str], prefix: str) -> None:
    """A note per embedder that lacks some of a multilingual task's languages (scored on the others)."""
    for name in names:
        missing = (run.scores.get(name) or {}).get("missing_languages")
        if missing:
            result.notes.append(f"{prefix}: '{name}' has no encoder for {', '.join(missing)}")
