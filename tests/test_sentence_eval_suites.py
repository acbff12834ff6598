"""run_suite end to end on small data: report files, one column per embedder, skips instead of crashes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_sentence_eval_fakes import HashedBagOfWords, RandomEmbedder, need_data

from interlingua.evaluation.sentence import SUITES, run_suite
from interlingua.evaluation.sentence.protocol import EvaluationError
from interlingua.evaluation.sentence.report import Table, render_markdown
from interlingua.evaluation.sentence.suites import AllResult, SuiteResult, Timing
from interlingua.workers import usable_cores


@pytest.fixture(scope="module")
def data_root():
    return need_data("senteval_downstream").parent


def test_suite_names():
    assert set(SUITES) == {"downstream", "similarity", "nli", "probing", "xnli", "retrieval", "all"}


def test_nli_and_retrieval_reports(data_root, tmp_path):
    embedders = {"bow": HashedBagOfWords(dim=32), "random": RandomEmbedder(dim=16, languages=["en", "de"])}
    res = run_suite("retrieval", embedders, data_root, tmp_path, quick=True, max_examples=200)
    md = (tmp_path / "retrieval.md").read_text()
    assert "| source → target | bow | random |" in md
    saved = json.loads((tmp_path / "retrieval.json").read_text())
    assert saved["results"]["Multi30k"]["bow"]["n"] == 200
    assert saved["results"]["Multi30k"]["random"]["missing_languages"] == ["fr", "cs"]
    bow = res.tasks["Multi30k"].scores["bow"]
    assert bow["cosine"]["en"]["de"] == saved["results"]["Multi30k"]["bow"]["cosine"]["en"]["de"]
    assert res.to_json() == saved  # the returned result is what the report holds
    assert (saved["elapsed_s"]["Multi30k"]["bow"] >= saved["encode_s"]["Multi30k"]["bow"] > 0
            and "total_elapsed_s" in saved)
    assert "Time in seconds: total (of which encoding)" in md

    res = run_suite("nli", embedders, data_root, tmp_path, quick=True)
    assert set(res.tasks) == {"SICK-E", "XNLI-en"}
    assert "| task | bow | random | majority |" in (tmp_path / "nli.md").read_text()


def test_probing_suite_with_heads(data_root, tmp_path):
    embedders = {"heads": HashedBagOfWords(dim=16, heads=2), "plain": RandomEmbedder(dim=16),
                 "heads-not-probed": HashedBagOfWords(dim=8, heads=2)}
    res = run_suite("probing", embedders, data_root, tmp_path, quick=True, per_head_embedders=["heads", "plain"],
                    jobs=2)
    assert {"Length (local)", "WC (local)", "BShift (local)"} <= set(res.tasks)
    length = res.tasks["Length (local)"].scores
    assert len(length["heads"]["per_head"]["acc"]) == 2
    assert "per_head" not in length["heads-not-probed"]
    assert "per-head probing (plain)" in res.skipped and "official probing" in res.skipped
    assert (tmp_path / "probing_sets" / "Length.txt").is_file() and (tmp_path / "probing_heads_heads.png").is_file()
    assert "Per-head probing, heads" in (tmp_path / "probing.md").read_text()


def test_missing_data_is_skipped_with_a_note(tmp_path):
    empty = tmp_path / "data"
    empty.mkdir()
    res = run_suite("downstream", {"bow": HashedBagOfWords()}, empty, tmp_path / "out", quick=True)
    assert set(res.skipped) == {"MR", "CR", "SUBJ", "MPQA", "TREC", "SST2"}
    assert "rt-polarity.pos" in res.skipped["MR"]
    assert "## Not run" in (tmp_path / "out" / "downstream.md").read_text()


def test_bad_arguments_are_single_line_errors(data_root, tmp_path):
    with pytest.raises(EvaluationError, match="unknown suite 'sts'"):
        run_suite("sts", {"b": HashedBagOfWords()}, data_root, tmp_path)
    with pytest.raises(EvaluationError, match="no embedders"):
        run_suite("nli", {}, data_root, tmp_path)
    with pytest.raises(EvaluationError, match="is not a folder"):
        run_suite("nli", {"b": HashedBagOfWords()}, tmp_path / "nowhere", tmp_path)
    with pytest.raises(EvaluationError, match="pair_features"):
        run_suite("nli", {"b": HashedBagOfWords()}, data_root, tmp_path, pair_features="concat")
    with pytest.raises(EvaluationError, match="jobs must be at least 1"):
        run_suite("probing", {"b": HashedBagOfWords()}, data_root, tmp_path, jobs=0)


def test_result_json_keeps_the_published_layout():
    """Keys, their order and the task -> embedder nesting of the reports under docs/results/sentence/."""
    published = Path(__file__).resolve().parents[1] / "docs" / "results" / "sentence" / "m2m_mono_xlong"
    result = SuiteResult("nli", ["a", "b"], {"seed": 0})
    run = result.task("SICK-E")
    run.scores["b"] = None  # lacks a language: recorded before the scored embedders, as the suites do
    run.record("a", {"acc": 50.0}, Timing(total_s=2.0, encode_s=1.0))
    run.reference = {"majority": 56.7}
    result.skip("XNLI-en", EvaluationError("missing evaluation file x"))
    result.total_elapsed_s = 3.0
    saved = result.to_json()
    assert saved == {"suite": "nli", "embedders": ["a", "b"], "settings": {"seed": 0},
                     "results": {"SICK-E": {"b": None, "a": {"acc": 50.0}}},
                     "reference": {"SICK-E": {"majority": 56.7}},
                     "tables": [], "notes": [], "skipped": {"XNLI-en": "missing evaluation file x"},
                     "elapsed_s": {"SICK-E": {"a": 2.0}}, "encode_s": {"SICK-E": {"a": 1.0}}, "total_elapsed_s": 3.0}
    assert list(saved["results"]["SICK-E"]) == ["b", "a"]
    assert list(saved) == list(json.loads((published / "nli.json").read_text()))
    result.setup_s = {"building": 1.0}
    assert list(result.to_json()) == list(json.loads((published / "probing.json").read_text()))
    everything = AllResult(["a", "b"], {"nli": result}, total_elapsed_s=4.0).to_json()
    assert list(everything) == list(json.loads((published / "all.json").read_text()))
    assert everything["elapsed_s"] == {"nli": {"suite": 3.0}} and everything["suites"]["nli"] == result.to_json()


def test_table_bolds_the_best_embedder_only():
    t = Table("demo", ["model", "bow", "majority"], reference_columns=["majority"])
    t.add("MR", [70.0, 60.0, 90.0])
    t.add("CR", [None, 61.0, 50.0])
    md = t.to_markdown()
    assert "| MR | **70.00** | 60.00 | 90.00 |" in md and "| CR | – | 61.00 | 50.00 |" in md
    with pytest.raises(ValueError, match="2 cells for 3 columns"):
        t.add("X", [1.0, 2.0])
    assert "# Sentence-vector evaluation: x" in render_markdown({"suite": "x", "embedders": ["a"], "tables": [t]})


def test_checkpoint_evaluation_keeps_the_fast_options(tmp_path, monkeypatch):
    """Per-head probing for the trained model only; the bag-of-subwords reference cached under the output folder."""
    import interlingua.evaluation.vectors as vectors

    class FakeModel:
        def __init__(self, checkpoint, device="cpu", precision="fp32"):
            self.checkpoint, self.precision = checkpoint, precision

        def untrained_like(self):
            return FakeModel(self.checkpoint)

    seen = {}
    monkeypatch.setattr(vectors, "load", FakeModel)
    monkeypatch.setattr(vectors, "reference_embedders",
                        lambda root, **kw: seen.update(refs=kw) or {"bow-subword": object()})

    def fake_run_suite(name, embedders, data_root, out, **kw):
        seen.update(embedders=list(embedders), out=out, **kw)
        return SuiteResult(name, list(embedders), {}, total_elapsed_s=1.0)

    monkeypatch.setattr(vectors, "run_suite", fake_run_suite)
    res = vectors.evaluate_sentence_vectors("probing", tmp_path / "best.pt", tmp_path, out_dir=tmp_path / "ev",
                                            quick=True, probing_dir=tmp_path / "senteval")
    assert seen["embedders"] == ["model", "untrained", "bow-subword"] and seen["per_head_embedders"] == ["model"]
    assert seen["probing_dir"] == tmp_path / "senteval" and seen["out"] == tmp_path / "ev"
    assert seen["jobs"] == usable_cores()  # one fit worker per core unless told otherwise
    assert (seen["refs"]["cache_dir"] == tmp_path / "ev" / "cache" / "bow-subword-2000"
            and seen["refs"]["max_lines"] == 2000)
    assert res.setup_elapsed_s >= 0 and res.total_elapsed_s == 1.0
