"""The papers' published Multi30k SentEval numbers: transcription checked against the paper text, task names
our suite knows, and the rows shown (italic, separate table, "paper" in the JSON) under our report tables."""
from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest
from test_sentence_eval_fakes import HashedBagOfWords

from interlingua.evaluation.sentence import suites
from interlingua.evaluation.sentence.paper_numbers import (
    CAPTION,
    LOCAL_NOTE,
    OTHER_TASKS,
    PAPER_NUMBERS,
    paper_rows,
    paper_tasks,
)
from interlingua.evaluation.sentence.probing_sets import OFFICIAL_PROBING
from interlingua.evaluation.sentence.report import Table, render_markdown, write_report
from interlingua.evaluation.sentence.suites import downstream_suite, similarity_suite
from interlingua.evaluation.sentence.suites.tables import with_paper
from interlingua.evaluation.sentence.tasks import CLASSIFICATION_TASKS, STS_YEARS, Pairs

PAPERS = Path(__file__).resolve().parents[1].parent / "shared" / "papers"


def _paper(prefix: str) -> str:
    found = sorted(PAPERS.glob(f"{prefix}_*.txt"))
    if not found:
        from conftest import missing
        missing(f"{PAPERS}/{prefix}_*.txt is not available")
    return found[0].read_text(encoding="utf-8")


def _numbers(cells) -> list[float]:
    return [float(c) for c in cells if re.fullmatch(r"\d+(\.\d+)?", c.strip())]


def _published(table: str, row: str) -> dict[str, float]:
    return {**PAPER_NUMBERS.get(table, {}).get(row, {}), **OTHER_TASKS.get(table, {}).get(row, {})}


def test_002_table2_as_printed():
    text = _paper("002")
    block = text[text.index("TASK\tDOWNSTREAM TASKS"):text.index("Table 2: Scores obtained in the SentEval tasks")]
    ours = {"SICKE": "SICK-E", "SICKR": "SICK-R"}
    columns = ("best bilingual", "M↔EN", "M↔M", "GloVe-BoW")
    seen = set()
    for line in block.splitlines():
        cells = line.split("\t")
        values = _numbers(cells[1:])
        if len(values) != 4:
            continue
        task = ours.get(cells[0], cells[0])
        seen.add(task)
        for column, value in zip(columns, values):
            assert _published("002 T2", column)[task] == pytest.approx(value), (task, column)
    assert len(seen) == 22  # 12 downstream + 10 probing rows
    assert {t for row in PAPER_NUMBERS["002 T2"].values() for t in row} | {"SST5", "MRPC", "SNLI"} == seen


def _journal_rows(text: str, start: str, end: str) -> list[tuple[str, list[float]]]:
    """(row label, numbers) of the markdown table rows between two markers of the journal text."""
    block = text[text.index(start):text.index(end)]
    rows = []
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not _numbers(cells[1:]):
            continue
        label = cells[0].replace("$", "").replace("\\leftrightarrow", "↔").replace(" ", "")
        rows.append((label, _numbers(cells[1:])))
    return rows


def test_000_tables_9_and_10_as_printed():
    text = _paper("000")
    rows = _journal_rows(text, "\nTable 9\n", "is, the trainable semantic similarity tasks")
    labels = ["EN-DE", "EN-CS", "EN-FR", "M↔EN", "M↔M"]
    assert [label for label, _ in rows] == labels * 2
    t9 = ("CR", "MR", "MPQA", "SUBJ", "SST2", "SSTF", "TREC", "MRPC")  # the paper's SSTB is our SST2
    t10 = ("SNLI", "SICK-E", "SICK-R", "STS-B", "STS12", "STS13", "STS14", "STS15", "STS16")
    for (label, values), (table, tasks) in zip(rows, [("000 T9", t9)] * 5 + [("000 T10", t10)] * 5):
        assert len(values) == len(tasks)
        published = _published(table, label)
        assert set(published) == set(tasks)
        assert [published[t] for t in tasks] == pytest.approx(values), (table, label)


def test_000_table12_rows_and_their_labels():
    """Table 12 lost its row labels; rows 4-5 are M↔EN / M↔M (equal to 002's), rows 1-3 peak at 002's BASELINE."""
    text = _paper("000")
    block = text[text.index("Scores for the SentEval probing tasks"):text.index("Table 12 Scores for t")]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in block.splitlines()]
    # no label column survived; cell 2 is a fragment of the Length column's digits ("| 75.69 | 6 |"): drop it
    values = [_numbers(cells[:1] + cells[2:]) for cells in rows if re.fullmatch(r"\d+\.\d+", cells[0])]
    assert len(values) == 5 and all(len(v) == 10 for v in values)
    tasks = list(OFFICIAL_PROBING.values())
    assert [PAPER_NUMBERS["000 T12"]["M↔EN"][t] for t in tasks] == pytest.approx(values[3])
    assert [PAPER_NUMBERS["000 T12"]["M↔M"][t] for t in tasks] == pytest.approx(values[4])
    best = [max(v[i] for v in values[:3]) for i in range(10)]
    assert [PAPER_NUMBERS["002 T2"]["best bilingual"][t] for t in tasks] == pytest.approx(best)


def test_the_two_papers_agree_where_they_overlap():
    for row in ("M↔EN", "M↔M"):
        journal = {**PAPER_NUMBERS["000 T9"][row], **PAPER_NUMBERS["000 T10"][row], **PAPER_NUMBERS["000 T12"][row]}
        for task, value in PAPER_NUMBERS["002 T2"][row].items():
            assert journal[task] == value, (row, task)
    for task, value in PAPER_NUMBERS["002 T2"]["best bilingual"].items():
        pairs = [PAPER_NUMBERS[t][p].get(task) for t in ("000 T9", "000 T10") for p in ("EN-DE", "EN-CS", "EN-FR")]
        pairs = [v for v in pairs if v is not None]
        if pairs:
            assert max(pairs) == value, task


def test_task_names_are_the_suites():
    modules = (suites.downstream_suite, suites.similarity_suite, suites.nli_suite, suites.probing_suite,
               suites.xnli_suite, suites.retrieval_suite)
    source = "".join(inspect.getsource(m) for m in modules)
    known = set(CLASSIFICATION_TASKS) | set(STS_YEARS) | set(OFFICIAL_PROBING.values())
    known |= {name for name in ("STS-B", "SICK-R", "SICK-E") if f'"{name}"' in source}
    assert paper_tasks() <= known
    assert {"MR", "STS12", "STS-B", "SICK-R", "SICK-E", "Length", "CoordInv"} <= paper_tasks()


def test_paper_rows_for_a_table():
    rows = dict(paper_rows(["MR", "SST2", "AVG"]))
    assert list(rows) == ["EN-DE (000 T9)", "EN-CS (000 T9)", "EN-FR (000 T9)", "best bilingual (002 T2)",
                          "M↔EN (000 T9)", "M↔M (000 T9)", "GloVe-BoW (002 T2)"]
    assert rows["M↔M (000 T9)"] == {"MR": 61.80, "SST2": 62.24}
    assert dict(paper_rows(["STS12"])) == {f"{m} (000 T10)": {"STS12": v} for m, v in
                                           (("EN-DE", 0.393), ("EN-CS", 0.385), ("EN-FR", 0.359), ("M↔EN", 0.323),
                                            ("M↔M", 0.327))}
    assert dict(paper_rows(["Length (local)"]))["M↔M (000 T12)"] == {"Length (local)": 85.41}
    assert paper_rows(["XNLI-en", "AVG"]) == []


def _fake_result(tmp_path) -> dict:
    table = Table("SentEval classification (accuracy %)", ["ours", "bow", "majority"], reference_columns=["majority"])
    table.add("MR", [65.0, 55.0, 50.0])
    table.add("TREC", [70.0, 60.0, 20.0])
    table.add("AVG", [67.5, 57.5, 35.0])
    probing = Table("Probing (accuracy %)", ["ours", "chance"], reference_columns=["chance"])
    probing.add("WC (local)", [5.0, 0.1])
    return {"suite": "fake", "embedders": ["ours", "bow"],
            "tables": [with_paper(table), with_paper(probing), Table("other", ["ours"])]}


def test_report_shows_published_rows_apart_from_ours(tmp_path):
    result = _fake_result(tmp_path)
    md_path, json_path = write_report(result, tmp_path)
    md = md_path.read_text(encoding="utf-8")
    assert "| MR | **65.00** | 55.00 | 50.00 |" in md  # our table unchanged
    assert CAPTION in md and LOCAL_NOTE in md
    header = ("| task | *EN-DE (000 T9)* | *EN-CS (000 T9)* | *EN-FR (000 T9)* | *best bilingual (002 T2)* | "
              "*M↔EN (000 T9)* | *M↔M (000 T9)* | *GloVe-BoW (002 T2)* |")
    assert header in md
    assert "| MR | *59.76* | *59.71* | *60.08* | *60.08* | *60.40* | *61.80* | *52.32* |" in md
    assert "| TREC | *67.44* | *67.75* | *61.04* | *67.75* | *69.84* | *66.40* | *21.16* |" in md
    assert md.count("| AVG |") == 1  # no published average over our rows
    assert "| WC (local) | *10.02* | *9.56* | *9.13* | *0.22* |" in md
    assert md.count(CAPTION) == 2  # not under the table without published tasks

    saved = json.loads(json_path.read_text(encoding="utf-8"))
    assert saved["tables"][0]["paper"][5] == ["M↔M (000 T9)", {"MR": 61.8, "TREC": 66.4}]
    assert saved["tables"][2]["paper"] == []
    assert render_markdown(saved) == md  # the JSON alone renders the same report


def test_suites_attach_published_rows(tmp_path, monkeypatch):
    """Downstream and similarity suites on stubbed data and scores: paper rows under the right tables only."""
    monkeypatch.setattr(downstream_suite, "load_classification", lambda *a, **kw: type("T", (), {"note": ""})())
    monkeypatch.setattr(downstream_suite, "_cap_classification", lambda task, ctx: task)
    monkeypatch.setattr(downstream_suite, "evaluate_classification", lambda *a, **kw: {"acc": 70.0})
    monkeypatch.setattr(downstream_suite, "task_majority", lambda *a, **kw: 50.0)
    pairs = Pairs(["a"], ["b"], [1.0])
    monkeypatch.setattr(similarity_suite, "load_sts", lambda root, year: {"sub": pairs})
    monkeypatch.setattr(similarity_suite, "sts_cosine", lambda enc, data: {
        "all": {"pearson": {"mean": 0.5}, "spearman": {"mean": 0.4}}, "subsets": {"sub": {"pearson": 0.5}}})
    monkeypatch.setattr(similarity_suite, "load_stsb", lambda root: {"train": pairs})
    monkeypatch.setattr(similarity_suite, "load_sick", lambda root, what: {"train": pairs})
    monkeypatch.setattr(similarity_suite, "trainable_relatedness", lambda *a, **kw: {"pearson": 0.7})
    (tmp_path / "data").mkdir()
    embedders = {"ours": HashedBagOfWords(dim=4)}

    down = suites.run_suite("downstream", embedders, tmp_path / "data", tmp_path / "out")
    assert [label for label, _ in down.tables[0].paper][-1] == "GloVe-BoW (002 T2)"
    assert "| SST2 | *61.87* | *61.92* | *61.91* | *61.92* | *62.02* | *62.24* | *54.68* |" in \
        (tmp_path / "out" / "downstream.md").read_text(encoding="utf-8")

    sim = suites.run_suite("similarity", embedders, tmp_path / "data", tmp_path / "out")
    pearson, spearman, trained, subsets = sim.tables
    assert len(pearson.paper) == 5 and spearman.paper == [] and subsets.paper == []
    assert dict(trained.paper)["GloVe-BoW (002 T2)"] == {"STS-B": 0.163, "SICK-R": 0.174}
    md = (tmp_path / "out" / "similarity.md").read_text(encoding="utf-8")
    assert "| STS16 | *0.430* | *0.422* | *0.430* | *0.375* | *0.400* |" in md
    assert "| SICK-R | *0.618* | *0.652* | *0.646* | *0.652* | *0.659* | *0.677* | *0.174* |" in md
    saved = json.loads((tmp_path / "out" / "similarity.json").read_text(encoding="utf-8"))
    assert saved["tables"][1]["paper"] == [] and saved["tables"][2]["paper"][0][0] == "EN-DE (000 T10)"


def test_similarity_on_a_trained_checkpoint_shows_ours_beside_the_published_rows(trained_model, tmp_path):
    """The similarity suite on real STS data and the tiny checkpoint: our numbers for the model and its untrained
    twin, and the published rows under the same tables."""
    import numpy as np
    from test_sentence_eval_fakes import need_data

    from interlingua.inference.api import load
    root = need_data("senteval_downstream").parent
    embedders = {"model": load(trained_model), "untrained": load(trained_model).untrained_like()}
    res = suites.run_suite("similarity", embedders, root, tmp_path, quick=True, max_examples=200)
    assert res.skipped == {}
    tasks = [*STS_YEARS, "STS-B", "SICK-R"]
    scores = {}
    for task in tasks:
        got = res.tasks[task].scores
        scores[task] = [got[n]["all"]["pearson"]["mean"] if "all" in got[n] else got[n]["pearson"] for n in embedders]
    values = np.array(list(scores.values()))
    # measured 0.25-0.47 (model) and 0.43-0.57 (untrained): both correlate with the gold scores, and differently
    assert np.isfinite(values).all() and values.min() > 0.1 and values.max() < 0.95, scores
    assert all(abs(model - untrained) > 0.01 for model, untrained in values), scores
    pearson, _, trained, _ = res.tables
    assert [label for label, _ in pearson.paper][-1] == "M↔M (000 T10)" and dict(trained.paper)["GloVe-BoW (002 T2)"]
    md = (tmp_path / "similarity.md").read_text(encoding="utf-8")
    cells = [f"**{v:.3f}**" if v == max(scores["STS16"]) else f"{v:.3f}" for v in scores["STS16"]]
    assert f"| STS16 | {cells[0]} | {cells[1]} |" in md  # ours, the better in bold
    assert "| STS16 | *0.430* | *0.422* | *0.430* | *0.375* | *0.400* |" in md  # the published row under it
