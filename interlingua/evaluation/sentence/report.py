"""Suite reports: `<suite>.json` (everything) and `<suite>.md` (tables with one column per embedder),
rendered from the report layout that `SuiteResult.to_dict()` gives (or a saved JSON file).

Putting every embedder in its own column keeps the reference points (bag of subwords,
untrained model, majority class) beside the model, so a number is never read alone. A table
with `paper` rows (see paper_numbers.py) is followed by a second, italic table of the
papers' published numbers for the same tasks, one column per published model.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from interlingua.atomic_files import write_text_atomic
from interlingua.evaluation.sentence.paper_numbers import CAPTION as PAPER_CAPTION


@dataclass
class Table:
    """A markdown table: one row per task or setting, one column per embedder (plus reference columns)."""

    title: str
    columns: list[str]
    rows: list[tuple[str, list]] = field(default_factory=list)
    label: str = "task"
    note: str = ""
    digits: int = 2
    reference_columns: list[str] = field(default_factory=list)  # not candidates for the bold "best"
    paper: list[tuple[str, dict]] = field(default_factory=list)  # published (label, {task: value}), not ours
    paper_note: str = ""

    def add(self, label: str, cells: list) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"table '{self.title}': row '{label}' has {len(cells)} cells "
                             f"for {len(self.columns)} columns")
        self.rows.append((label, cells))

    def _cell(self, value, best: bool) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "–"
        text = f"{value:.{self.digits}f}" if isinstance(value, (float, np.floating)) else str(value)
        return f"**{text}**" if best else text

    def to_markdown(self) -> str:
        out = [f"### {self.title}", ""]
        if self.note:
            out += [self.note, ""]
        out += ["| " + " | ".join([self.label, *self.columns]) + " |", "|" + "---|" * (len(self.columns) + 1)]
        for label, cells in self.rows:
            numeric = [v for c, v in zip(self.columns, cells)
                       if c not in self.reference_columns and isinstance(v, (int, float, np.number))
                       and not math.isnan(v)]
            top = max(numeric) if len(numeric) > 1 else None
            out.append("| " + " | ".join([label] + [self._cell(v, top is not None and c not in self.reference_columns
                                                                and v == top)
                                                     for c, v in zip(self.columns, cells)]) + " |")
        return "\n".join(out + self._paper_markdown()) + "\n"

    def _paper_markdown(self) -> list[str]:
        """The published numbers for this table's rows, transposed to our layout (rows: tasks), in italics."""
        rows = [label for label, _ in self.rows if any(label in values for _, values in self.paper)]
        if not rows:
            return []
        out = ["", f"*{PAPER_CAPTION}*" + (f" *{self.paper_note}*" if self.paper_note else ""), "",
               "| " + " | ".join([self.label, *(f"*{name}*" for name, _ in self.paper)]) + " |",
               "|" + "---|" * (len(self.paper) + 1)]
        for label in rows:
            cells = [values.get(label) for _, values in self.paper]
            out.append("| " + " | ".join([label] + ["–" if v is None else f"*{v:.{self.digits}f}*" for v in cells])
                       + " |")
        return out


def jsonable(obj):
    """Plain JSON types for numpy scalars/arrays, tuples, Paths and dataclasses."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, Table):
        return jsonable(asdict(obj))
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float) and math.isnan(obj):
        return None
    return obj


def render_markdown(result: dict) -> str:
    """The human-readable report of one suite result."""
    lines = [f"# Sentence-vector evaluation: {result['suite']}", ""]
    settings = result.get("settings", {})
    if settings:
        lines += ["Settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()), ""]
    lines += [f"Embedders: {', '.join(result.get('embedders', []))}. Bold: best embedder in the row.", ""]
    for table in result.get("tables", []):
        lines.append((table if isinstance(table, Table) else Table(**table)).to_markdown())
    if result.get("notes"):
        lines += ["## Notes", ""] + [f"- {n}" for n in result["notes"]] + [""]
    if result.get("skipped"):
        lines += ["## Not run", ""] + [f"- **{k}**: {v}" for k, v in result["skipped"].items()] + [""]
    elapsed, encoding = result.get("elapsed_s", {}), result.get("encode_s", {})
    if elapsed:
        names = result.get("embedders", [])
        timing = Table("Time in seconds: total (of which encoding)", names, digits=1)
        for task, per in elapsed.items():
            enc = encoding.get(task, {})
            timing.add(task, [f"{per[n]:.1f} ({enc[n]:.1f})" if n in per and n in enc else per.get(n) for n in names])
        lines.append(timing.to_markdown().replace("**", ""))
    for what, secs in result.get("setup_s", {}).items():
        lines.append(f"Setup, {what}: {secs:.1f} s\n")
    if "total_elapsed_s" in result:
        lines.append(f"Total: {result['total_elapsed_s']:.1f} s\n")
    return "\n".join(lines)


def write_report(result: dict, out_dir: Path) -> tuple[Path, Path]:
    """Write `<suite>.json` and `<suite>.md` into `out_dir`; returns both paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"{result['suite']}.json"
    md_path = out_dir / f"{result['suite']}.md"
    data = jsonable(result)
    write_text_atomic(json_path, json.dumps(data, indent=1, ensure_ascii=False))
    write_text_atomic(md_path, render_markdown(result))
    return md_path, json_path


def write_all_report(result: dict, out_dir: Path) -> tuple[Path, Path]:
    """`all.json` holds every suite's result; `all.md` joins their reports. Returns both paths."""
    out_dir = Path(out_dir)
    json_path, md_path = out_dir / "all.json", out_dir / "all.md"
    write_text_atomic(json_path, json.dumps(jsonable(result), indent=1, ensure_ascii=False))
    parts = [render_markdown(r) for r in result["suites"].values()]
    write_text_atomic(md_path, f"# Sentence-vector evaluation: all suites ({result['total_elapsed_s']:.0f} s)\n\n"
                      + "\n\n".join(parts))
    return md_path, json_path
