"""Published SentEval numbers of the papers' Multi30k-trained attention-bridge models (k = 10).

Printed under our suite tables so that our vectors are read beside the papers' (see
`paper_rows` and `report.Table.paper`). Task names are the names our suite uses
(`tasks.CLASSIFICATION_TASKS`, `STS_YEARS`, "STS-B", "SICK-R", "SICK-E",
`probing_sets.OFFICIAL_PROBING` values); accuracies in %, correlations as Pearson r.

Sources (papers in shared/papers/, see its README.md):

- "000 T9": journal article (000, Vázquez et al. 2020, Computational Linguistics 46(2)),
  Table 9: "Accuracies of models trained with limited data in eight different classification
  tasks" (Multi30k models, mean of five seeds). Rows EN-DE, EN-CS, EN-FR (bilingual + bridge),
  M↔EN ({DE,FR,CS}↔EN), M↔M (many-to-many). The paper's SSTB column is our SST2.
- "000 T10": same article, Table 10: "SentEval NLI and semantic similarity tasks results for the
  models trained with limited data" (Pearson for similarity; STS-B, SICK-R trainable,
  STS12-16 non-trainable cosine). Same five rows.
- "000 T12": same article, Table 12: "Scores for the SentEval probing tasks (Multi30k models)".
  The PDF extraction lost the row labels. Rows 4 and 5 equal the M↔EN and M-2-M columns of
  002 Table 2 cell for cell, so they are transcribed as M↔EN and M↔M. Rows 1-3 are the three
  bilingual models, but which pair is which cannot be read, so they are left out (their
  column-wise maximum is 002 Table 2's BASELINE, which is included).
- "002 T2": RepL4NLP paper (002, Vázquez et al. 2019), Table 2: "Scores obtained in the SentEval
  tasks. The BASELINE column reports the best score among the bilingual models + att bridge"
  (accuracy, except SICKR / STS-B: Pearson). Columns BASELINE (here "best bilingual"),
  M ↔ EN, M-2-M (here "M↔M"), GloVe-BoW (GloVe vectors trained on the same BPE-encoded
  Multi30k data). Its M↔EN / M-2-M numbers equal 000's Tables 9, 10 and 12.

Not transcribed: the Europarl tables (000 Tables 4-8, 11), which are not Multi30k models;
whether the multilingual Multi30k models used in these tables include the monolingual
(copy) data is not stated in either paper.
"""
from __future__ import annotations

from collections.abc import Iterable

LOCAL_SUFFIX = " (local)"


def _row(tasks: tuple[str, ...], values: tuple[float | None, ...]) -> dict[str, float]:
    if len(tasks) != len(values):
        raise ValueError(f"{len(values)} values for {len(tasks)} tasks")
    return {t: v for t, v in zip(tasks, values) if v is not None}


# Column orders as printed in the papers (with our task names).
_T9 = ("CR", "MR", "MPQA", "SUBJ", "SST2", "TREC")
_T10 = ("SICK-E", "SICK-R", "STS-B", "STS12", "STS13", "STS14", "STS15", "STS16")
_PROBING = ("Length", "WC", "Depth", "TopConst", "BShift", "Tense", "SubjNum", "ObjNum", "SOMO", "CoordInv")
_T2_DOWN = ("CR", "MR", "MPQA", "SUBJ", "SST2", "TREC", "SICK-E", "SICK-R", "STS-B")

PAPER_NUMBERS: dict[str, dict[str, dict[str, float]]] = {
    "000 T9": {
        "EN-DE": _row(_T9, (68.37, 59.76, 73.19, 75.26, 61.87, 67.44)),
        "EN-CS": _row(_T9, (67.79, 59.71, 73.16, 75.32, 61.92, 67.75)),
        "EN-FR": _row(_T9, (68.52, 60.08, 73.51, 77.25, 61.91, 61.04)),
        "M↔EN": _row(_T9, (68.32, 60.40, 72.98, 78.64, 62.02, 69.84)),
        "M↔M": _row(_T9, (69.01, 61.80, 73.28, 80.88, 62.24, 66.40)),
    },
    "000 T10": {
        "EN-DE": _row(_T10, (72.82, 0.618, 0.564, 0.393, 0.265, 0.426, 0.489, 0.430)),
        "EN-CS": _row(_T10, (73.89, 0.652, 0.616, 0.385, 0.234, 0.380, 0.505, 0.422)),
        "EN-FR": _row(_T10, (74.85, 0.646, 0.574, 0.359, 0.220, 0.428, 0.476, 0.430)),
        "M↔EN": _row(_T10, (75.46, 0.659, 0.618, 0.323, 0.190, 0.353, 0.418, 0.375)),
        "M↔M": _row(_T10, (76.92, 0.677, 0.630, 0.327, 0.256, 0.415, 0.460, 0.400)),
    },
    "000 T12": {  # rows 1-3 (bilingual, pair labels lost in the extraction) left out; see the docstring
        "M↔EN": _row(_PROBING, (84.76, 9.56, 33.05, 44.04, 58.35, 69.36, 69.67, 72.19, 49.46, 60.57)),
        "M↔M": _row(_PROBING, (85.41, 9.13, 31.60, 39.76, 59.76, 68.27, 69.89, 73.29, 50.12, 62.21)),
    },
    "002 T2": {
        "best bilingual": {**_row(_T2_DOWN, (68.52, 60.08, 73.51, 77.25, 61.92, 67.75, 74.85, 0.652, 0.616)),
                           **_row(_PROBING, (80.76, 10.02, 32.14, 40.12, 57.41, 67.61, 68.55, 70.01, 49.90, 61.38))},
        "M↔EN": {**_row(_T2_DOWN, (68.32, 60.40, 72.98, 78.64, 62.02, 69.84, 75.46, 0.659, 0.618)),
                 **_row(_PROBING, (84.76, 9.56, 33.05, 44.04, 58.35, 69.36, 69.67, 72.19, 49.46, 60.57))},
        "M↔M": {**_row(_T2_DOWN, (69.01, 61.80, 73.28, 80.88, 62.24, 66.40, 76.92, 0.677, 0.630)),
                **_row(_PROBING, (85.41, 9.13, 31.60, 39.76, 59.76, 68.27, 69.89, 73.29, 50.12, 62.21))},
        "GloVe-BoW": {**_row(_T2_DOWN, (63.97, 52.32, 68.76, 58.75, 54.68, 21.16, 56.62, 0.174, 0.163)),
                      **_row(_PROBING, (30.90, 0.22, 20.66, 11.48, 50.08, 54.72, 54.32, 60.58, 50.03, 49.88))},
    },
}

# The papers' tasks our suite does not run (paper's own names), kept for reference only.
OTHER_TASKS: dict[str, dict[str, dict[str, float]]] = {
    "000 T9": {"EN-DE": {"SSTF": 31.15, "MRPC": 69.13}, "EN-CS": {"SSTF": 30.43, "MRPC": 68.23},
               "EN-FR": {"SSTF": 30.55, "MRPC": 70.96}, "M↔EN": {"SSTF": 32.10, "MRPC": 68.83},
               "M↔M": {"SSTF": 31.83, "MRPC": 70.43}},
    "000 T10": {"EN-DE": {"SNLI": 61.45}, "EN-CS": {"SNLI": 61.75}, "EN-FR": {"SNLI": 60.95},
                "M↔EN": {"SNLI": 64.52}, "M↔M": {"SNLI": 65.12}},
    "002 T2": {"best bilingual": {"SST5": 31.15, "MRPC": 70.96, "SNLI": 61.75},
               "M↔EN": {"SST5": 32.10, "MRPC": 68.83, "SNLI": 64.52},
               "M↔M": {"SST5": 31.83, "MRPC": 70.43, "SNLI": 65.12},
               "GloVe-BoW": {"SST5": 28.20, "MRPC": 64.87, "SNLI": 35.05}},
}

# What the report shows: (column label, [(source table, row)...]); the first source with a
# task wins. 002's M↔EN / M↔M duplicate 000's and are not shown twice.
DISPLAY: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("EN-DE", (("000 T9", "EN-DE"), ("000 T10", "EN-DE"))),
    ("EN-CS", (("000 T9", "EN-CS"), ("000 T10", "EN-CS"))),
    ("EN-FR", (("000 T9", "EN-FR"), ("000 T10", "EN-FR"))),
    ("best bilingual", (("002 T2", "best bilingual"),)),
    ("M↔EN", (("000 T9", "M↔EN"), ("000 T10", "M↔EN"), ("000 T12", "M↔EN"))),
    ("M↔M", (("000 T9", "M↔M"), ("000 T10", "M↔M"), ("000 T12", "M↔M"))),
    ("GloVe-BoW", (("002 T2", "GloVe-BoW"),)),
)

CAPTION = ("Published, not ours: the papers' Multi30k-trained models (k = 10, five-seed means, SentEval's own "
           "data and classifiers; 000 = journal Tables 9/10/12, 002 = RepL4NLP Table 2; best bilingual = best of "
           "EN-DE/EN-CS/EN-FR per task). Compare magnitudes, not decimals.")
LOCAL_NOTE = ("Rows marked (local) are our rebuilt probing sets, not SentEval's files: the published numbers beside "
              "them are on different data.")


def paper_task(name: str) -> str:
    """The paper task a row of ours corresponds to ("Length (local)" -> "Length")."""
    return name[: -len(LOCAL_SUFFIX)] if name.endswith(LOCAL_SUFFIX) else name


def paper_rows(task_names: Iterable[str]) -> list[tuple[str, dict[str, float]]]:
    """(label, {our task name: published value}) for every displayed paper model with a value for any task.

    Labels say where the numbers come from, e.g. "M↔M (000 T9)". Task names are ours; a
    locally built probing set ("Length (local)") gets the paper's number for the official task."""
    names = list(task_names)
    rows = []
    for label, sources in DISPLAY:
        values: dict[str, float] = {}
        used: list[str] = []
        for name in names:
            for table, row in sources:
                value = PAPER_NUMBERS[table][row].get(paper_task(name))
                if value is not None:
                    values[name] = value
                    if table not in used:
                        used.append(table)
                    break
        if values:
            rows.append((f"{label} ({', '.join(used)})", values))
    return rows


def paper_tasks() -> set[str]:
    """Every task name used in PAPER_NUMBERS."""
    return {task for rows in PAPER_NUMBERS.values() for values in rows.values() for task in values}
