"""The published Multi30k BLEU (paper 000, Table 1) in `paper_bleu.TABLE1`: every number
checked against the table in the paper text, in its cell (sub-table, source row, target column)."""
from __future__ import annotations

import re

import pytest
from conftest import REPO, missing

from interlingua.evaluation.paper_bleu import TABLE1, paper_bleu

PAPERS = REPO.parent / "shared" / "papers"
LANGS = ["en", "de", "cs", "fr"]
# sub-tables of Table 1 as printed: top row left to right, then bottom row left to right
LAYOUT = [["bilingual_nobridge", "pivot_en", "m2m"], ["bilingual", "pivot_en_mono", "m2m_mono"]]


def _paper(prefix: str) -> str:
    """The text of paper `prefix` (as in test_sentence_paper_numbers, without importing the sentence suites)."""
    found = sorted(PAPERS.glob(f"{prefix}_*.txt"))
    if not found:
        missing(f"{PAPERS}/{prefix}_*.txt is not available")
    return found[0].read_text(encoding="utf-8")


def _cells(line: str, sep: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split(sep)]


def _parse(block: str, sep: str) -> dict[str, dict[str, dict[str, float | None]]]:
    """Setting -> source -> target -> number (None for the '-' diagonal) from the rows
    `SRC | 12 cells` (four targets for each of three side-by-side sub-tables)."""
    rows = []
    for line in block.splitlines():
        cells = _cells(line, sep)
        if cells[0].lower() in LANGS and len(cells) == 13:
            rows.append((cells[0].lower(), cells[1:]))
    assert len(rows) == 8, rows
    table: dict = {}
    for n, (src, cells) in enumerate(rows):
        for part, setting in enumerate(LAYOUT[n // 4]):
            for tgt, cell in zip(LANGS, cells[4 * part:4 * part + 4]):
                value = float(cell) if re.fullmatch(r"\d+\.\d\d", cell) else None
                if value is None:
                    assert tgt == src and cell in ("-", "_"), (setting, src, tgt, cell)
                table.setdefault(setting, {}).setdefault(src, {})[tgt] = value
    return table


def _journal_table1() -> dict:
    text = _paper("000")
    block = text[text.index("\nTable 1\n"):text.index("model input and output, the word embeddings")]
    # the header row says which languages the columns are, in that order
    header = next(_cells(line, "|") for line in block.splitlines() if line.strip().startswith("| src/tgt"))
    assert [c.lower() for c in header[1:]] == LANGS * 3
    return _parse(block, "|")


def test_table1_transcribed_cell_by_cell():
    printed = _journal_table1()
    assert set(TABLE1) == {s for row in LAYOUT for s in row}
    for setting, sources in printed.items():
        assert set(TABLE1[setting]) == set(LANGS), setting
        for src, targets in sources.items():
            for tgt, value in targets.items():
                if value is None:
                    assert tgt not in TABLE1[setting][src]
                else:
                    assert TABLE1[setting][src][tgt] == pytest.approx(value, abs=1e-9), (setting, src, tgt)
                    assert paper_bleu(setting, src, tgt) == TABLE1[setting][src][tgt]
    assert sum(len(t) for s in TABLE1.values() for t in s.values()) == 6 * 12


def test_table1_agrees_with_the_workshop_version():
    """Paper 002 prints the same table (tab-separated, same layout): a second reading of it."""
    text = _paper("002")
    block = text[text.index("src/tgt\tBILINGUAL"):text.index("Table 1: BLEU scores obtained in the experiments")]
    assert _parse(block, "\t") == _journal_table1()


def test_labels_of_the_sub_tables():
    """Which sub-table is which setting: the captions printed above them, and the paper's own
    statements about them (bilingual drop largest for en->fr; pivot model fails zero-shot)."""
    text = _paper("002")
    block = text[text.index("src/tgt\tBILINGUAL"):text.index("Table 1: BLEU scores obtained in the experiments")]
    titles = [[c.replace("\\", "").replace("$", "") for c in line.split("\t")[1:] if c.strip()]
              for line in block.splitlines() if line.startswith("src/tgt")]
    assert titles == [["BILINGUAL", "{DE,FR,CS} leftrightarrow EN", "M-2-M"],
                      ["BILINGUAL + ATT BRIDGE", "{DE,FR,CS} leftrightarrow EN + MONOLING", "M-2-M + MONOLINGUAL"]]
    drop = {(s, t): TABLE1["bilingual_nobridge"][s][t] - TABLE1["bilingual"][s][t]
            for s in TABLE1["bilingual"] for t in TABLE1["bilingual"][s]}
    assert max(drop, key=drop.get) == ("en", "fr") and drop[("en", "fr")] > 2
    assert all(TABLE1["pivot_en"][s][t] < 2 for s in ("de", "cs", "fr") for t in ("de", "cs", "fr") if s != t)
