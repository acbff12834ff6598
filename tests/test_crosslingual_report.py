"""The cross-lingual report (`evaluate crosslingual`): its numbers on hand-made vectors, the report on
every model kind (tiny random checkpoints, a multi-way corpus whose line i is the same sentence in en, de, fr),
the command line end to end without and with translation, and one-line errors."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_config, write_multiway_corpus
from test_decoding import _WORDS, _sentences, random_checkpoint

import interlingua
from interlingua.cli import main
from interlingua.config import parse_config
from interlingua.data.vocab import Vocab, language_tag
from interlingua.errors import LanguageError
from interlingua.evaluation.bleu_matrix import bleu_matrix
from interlingua.evaluation.crosslingual_markdown import markdown
from interlingua.evaluation.crosslingual_record import CrosslingualReport
from interlingua.evaluation.crosslingual_report import (
    PAIR_KEYS,
    aligned_indices,
    evaluate_crosslingual,
    summarize,
    write_crosslingual,
)
from interlingua.evaluation.crosslingual_scores import language_probe, pair_vector_scores, probe_halves, similarity_gaps
from interlingua.evaluation.crosslingual_translation import pivot_for
from interlingua.evaluation.sentence.protocol import EvaluationError
from interlingua.inference.api import Languages
from interlingua.model_files.checkpoint import build_payload, read_checkpoint, save_atomic
from interlingua.modules.model import TranslationNetwork

LANGS = ("en", "de", "fr")
TRAINED = [("en", "de"), ("de", "en"), ("en", "fr"), ("fr", "en")]
"""English-centred: de->fr and fr->de are zero-shot, with English as their pivot."""
TRANSFORMER = {"embed_dim": 32, "bridge": {"type": "none"}, "encoder": {"type": "transformer", "layers": 2, "heads": 2},
               "decoder": {"type": "transformer", "layers": 1, "heads": 2}}


# --- hand-made vectors ---------------------------------------------------------------------------


def meaning_vectors(n: int = 60, d: int = 16, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, d))


def test_identical_vectors_are_found_and_tell_no_language():
    same = meaning_vectors()
    vectors = {lang: same.copy() for lang in LANGS}
    scores = pair_vector_scores(vectors)
    assert set(scores) == {(s, t) for s in LANGS for t in LANGS if s != t}
    for row in scores.values():
        assert row["retrieval"] == row["retrieval_centered"] == row["retrieval_ratio_margin"] == 100.0
        assert row["cos_translation"] == pytest.approx(1.0) and row["margin"] > 0 and row["margin_centered"] > 0
        assert row["cos_unrelated"] == pytest.approx(0.0, abs=0.1)  # independent Gaussian directions
    probe = language_probe(vectors)
    assert probe["chance"] == pytest.approx(100 / 3)
    assert probe["accuracy"] == pytest.approx(100 / 3)  # each vector stands for three languages alike


def test_a_language_offset_is_found_by_the_probe_and_removed_by_centring():
    meaning = meaning_vectors()
    rng = np.random.default_rng(1)
    vectors = {lang: meaning + 20 * rng.normal(size=(1, meaning.shape[1])) for lang in LANGS}
    probe = language_probe(vectors)
    assert probe["accuracy"] == 100.0  # the offset names the language
    for row in pair_vector_scores(vectors).values():
        assert row["retrieval_centered"] == 100.0 and row["margin_centered"] > 0
        assert row["retrieval"] < 50.0 and row["margin"] < 0  # cosine is swamped by the offsets


def test_similarity_gaps_by_hand():
    src = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    tgt = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    # cosines: rows are the sources; the diagonal are the translations
    sim = np.array([[1.0, 2 ** -0.5, 0.0], [0.0, 2 ** -0.5, 1.0], [2 ** -0.5, 1.0, 2 ** -0.5]])
    gaps = similarity_gaps(src, tgt)
    translation = np.diag(sim)
    nearest = np.array([2 ** -0.5, 1.0, 1.0])
    unrelated = np.array([(2 ** -0.5 + 0.0) / 2, (0.0 + 1.0) / 2, (2 ** -0.5 + 1.0) / 2])
    assert gaps["cos_translation"] == pytest.approx(translation.mean())
    assert gaps["cos_nearest_unrelated"] == pytest.approx(nearest.mean())
    assert gaps["cos_unrelated"] == pytest.approx(unrelated.mean())
    assert gaps["margin"] == pytest.approx((translation - nearest).mean())


def test_probe_halves_never_share_a_sentence():
    train, test = probe_halves(11, seed=3)
    assert len(train) == 5 and len(test) == 6 and not set(train) & set(test)
    assert sorted([*train, *test]) == list(range(11))


def test_vector_scores_refuse_what_they_cannot_score():
    with pytest.raises(EvaluationError, match="two or more languages"):
        pair_vector_scores({"en": meaning_vectors()})
    with pytest.raises(EvaluationError, match="one shape"):
        language_probe({"en": meaning_vectors(10), "de": meaning_vectors(9)})
    with pytest.raises(EvaluationError, match="at least 4"):
        pair_vector_scores({"en": meaning_vectors(3), "de": meaning_vectors(3)})


def test_aligned_indices_skip_blank_and_repeated_lines():
    group = {"en": ["a", "b", "", "a", "c", "d"], "de": ["x", "y", "z", "w", "y", "v"]}
    assert aligned_indices(group, ["en", "de"]) == [0, 1, 5]  # 2: blank en; 3: en repeats; 4: de repeats


def test_summary_means_by_route():
    def row(src, tgt, route, retrieval, bleu=None, pivot_bleu=None):
        return {**dict.fromkeys(PAIR_KEYS), "src": src, "tgt": tgt, "route": route, "retrieval": retrieval,
                "retrieval_centered": retrieval + 10, "margin": 0.1, "bleu": bleu, "off_target": 0.0 if bleu else None,
                "pivot_bleu": pivot_bleu}

    pairs = {"en-de": row("en", "de", "supervised", 80.0, bleu=30.0),
             "de-en": row("de", "en", "supervised", 70.0, bleu=20.0),
             "de-fr": row("de", "fr", "zero-shot", 40.0, bleu=2.0, pivot_bleu=12.0),
             "fr-de": row("fr", "de", "zero-shot", 50.0)}
    summary = summarize(pairs, {"accuracy": 90.0, "chance": 100 / 3})
    assert summary["retrieval_mean"] == 60.0 and summary["retrieval_centered_mean"] == 70.0
    assert summary["retrieval_min"] == 40.0 and summary["retrieval_min_pair"] == "de-fr"
    assert summary["bleu_supervised_mean"] == 25.0 and summary["bleu_zero_shot_mean"] == 2.0
    assert summary["bleu_pivot_mean"] == 12.0 and summary["bleu_cased_pivot_mean"] is None
    assert summary["zero_shot_directions"] == 1 and summary["pivot_directions"] == 1 and summary["retrieval_pairs"] == 4
    assert summary["probe_accuracy"] == 90.0 and summary["margin_mean"] == pytest.approx(0.1)


def test_pivot_prefers_the_given_language_only_with_two_trained_legs():
    languages = Languages(("en", "de", "fr", "cs"), ("en", "de", "fr", "cs"),
                          (("en", "de"), ("de", "en"), ("en", "fr"), ("fr", "en"), ("de", "cs"), ("cs", "fr")))
    assert pivot_for(languages, "de", "fr", "en") == "en"
    assert pivot_for(languages, "de", "fr", "cs") == "cs"
    assert pivot_for(languages, "fr", "de", "cs") == "en"  # no fr -> cs: the model's own pivot
    assert pivot_for(languages, "cs", "de", "en") is None  # no leg anywhere


# --- tiny random models of every kind --------------------------------------------------------------


def aligned_sentences(n: int, seed: int) -> dict[str, list[str]]:
    """Line i in en, de, fr: the same words (the word lists of test_decoding are translations of each other)."""
    rng = random.Random(seed)
    picks = [[rng.randrange(len(_WORDS["en"])) for _ in range(rng.randint(3, 8))] for _ in range(n)]
    return {lang: [" ".join(_WORDS[lang][w] for w in p) + " ." for p in picks] for lang in LANGS}


def english_centred(path: Path) -> Path:
    payload = read_checkpoint(path)
    payload["directions"] = [list(d) for d in TRAINED]
    save_atomic(payload, path)
    return path


def shared_transformer_checkpoint(path: Path) -> Path:
    """One Transformer encoder and decoder for en, de, fr (joint vocabulary, <2xx> tag), no bridge."""
    cfg = parse_config(tiny_config(path.parent / "corpus.yaml", path.parent,
                                   directions={"mode": "explicit", "pairs": [list(d) for d in TRAINED]},
                                   model={**TRANSFORMER, "shared": True}))
    vocab = Vocab.train([s for lang in LANGS for s in _sentences(lang)], vocab_size=150,
                        user_symbols=[language_tag(lang) for lang in LANGS], threads=1)
    torch.manual_seed(0)
    net = TranslationNetwork(cfg.model, {lang: len(vocab) for lang in LANGS}, list(LANGS), list(LANGS))
    save_atomic(build_payload(cfg, net, {lang: vocab for lang in LANGS}, TRAINED), path)
    return path


KINDS = {
    "attention": lambda p: english_centred(random_checkpoint(p, langs=LANGS)),
    "shared-transformer": shared_transformer_checkpoint,
    "ntdv": lambda p: english_centred(random_checkpoint(p, langs=LANGS,
                                                        bridge={"type": "ntdv", "heads": 4, "hidden": 24})),
}


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory) -> Path:
    """corpus.yaml (test, val) beside the checkpoints, which name it as their training corpus."""
    root = tmp_path_factory.mktemp("crosslingual")
    write_multiway_corpus(root, "aligned", {"test": aligned_sentences(40, 0), "val": aligned_sentences(20, 1)})
    return root


@pytest.fixture(scope="module", params=list(KINDS))
def kind_checkpoint(request, corpus_dir) -> Path:
    return KINDS[request.param](corpus_dir / f"{request.param}.pt")


def test_the_report_on_every_model_kind(kind_checkpoint):
    report = evaluate_crosslingual(kind_checkpoint, split="test", limit=30, bleu=False, device="cpu", progress=False)
    assert sorted(report.languages) == sorted(LANGS) and report.sentences == 30 and report.beam is None
    assert set(report.pairs) == {f"{s}-{t}" for s in LANGS for t in LANGS if s != t}
    for key, row in report.pairs.items():
        assert list(row) == list(PAIR_KEYS) and key == f"{row['src']}-{row['tgt']}"
        assert 0.0 <= row["retrieval"] <= 100.0 and 0.0 <= row["retrieval_centered"] <= 100.0
        assert -2.0 <= row["margin"] <= 2.0 and row["bleu"] is None and row["pivot"] is None
        assert row["route"] == ("zero-shot" if {row["src"], row["tgt"]} == {"de", "fr"} else "supervised")
    assert report.probe["train_sentences"] == 15 and report.summary["probe_chance"] == pytest.approx(100 / 3)
    assert report.summary["bleu_supervised_mean"] is None and report.summary["retrieval_pairs"] == 6
    assert CrosslingualReport.from_json(json.loads(json.dumps(report.to_json()))) == report
    written_before = {**report.to_json(), "pairs": {key: {("kind" if k == "route" else k): v for k, v in row.items()}
                                                    for key, row in report.pairs.items()}}
    assert CrosslingualReport.from_json(written_before) == report  # a report whose pairs said `kind`
    assert "## Summary" in markdown(report) and "BLEU" not in markdown(report).split("## Per pair")[1]


def test_the_report_takes_a_loaded_model_and_matches_the_vectors(corpus_dir):
    """The retrieval and probe numbers are those of the model's own `encode` vectors."""
    model = interlingua.load(KINDS["attention"](corpus_dir / "attention_again.pt"), "cpu")
    report = evaluate_crosslingual(model, corpus_dir / "corpus.yaml", "val", bleu=False, progress=False, name="m")
    texts = aligned_sentences(20, 1)
    vectors = {lang: model.encode(texts[lang], lang) for lang in LANGS}
    by_hand = pair_vector_scores(vectors)
    assert report.model == "m" and report.sentences == 20
    assert report.pair("de", "fr")["retrieval"] == round(by_hand[("de", "fr")]["retrieval"], 2)
    assert report.probe == language_probe(vectors)


def test_translation_scores_are_the_bleu_matrix_with_pivots(corpus_dir):
    path = KINDS["attention"](corpus_dir / "attention_bleu.pt")
    report = evaluate_crosslingual(path, split="test", limit=6, device="cpu", progress=False)
    assert report.beam == 1 and report.pivot == "en"
    model = interlingua.load(path, "cpu")
    direct = bleu_matrix(model, corpus_dir / "corpus.yaml", "test", max_sentences=6, progress=False, pairs=TRAINED)
    pivoted = bleu_matrix(model, corpus_dir / "corpus.yaml", "test", max_sentences=6, progress=False, pivot="en",
                          pairs=[("de", "fr"), ("fr", "de")])
    for s, t in TRAINED:
        row = report.pair(s, t)
        assert (row["bleu"], row["bleu_cased"], row["off_target"]) == (direct.bleu[s][t], direct.bleu_cased[s][t],
                                                                       direct.off_target[s][t])
        assert row["pivot"] is None and row["pivot_bleu"] is None
    for s, t in (("de", "fr"), ("fr", "de")):
        row = report.pair(s, t)
        assert row["route"] == "zero-shot" and row["bleu"] is not None and row["pivot"] == "en"
        assert row["pivot_bleu"] == pivoted.bleu[s][t] and row["pivot_off_target"] == pivoted.off_target[s][t]
        assert row["pivot_p_value"] is None  # 6 sentences: too few for the paired bootstrap test
    assert all(r.p_value is None for r in report.pivot_comparison().rows)
    tested = evaluate_crosslingual(path, split="test", limit=12, device="cpu", progress=False)
    assert all(0 < r.p_value <= 1 for r in tested.pivot_comparison().rows)  # the test, in the report's record
    assert all(0 < tested.pair(s, t)["pivot_p_value"] <= 1 for s, t in (("de", "fr"), ("fr", "de")))
    with pytest.raises(LanguageError, match="pivot 'xx' is not a language of the model"):
        evaluate_crosslingual(path, split="test", limit=6, device="cpu", progress=False, pivot="xx")
    s = report.summary
    assert (s["supervised_directions"], s["zero_shot_directions"], s["pivot_directions"]) == (4, 2, 2)
    assert s["bleu_supervised_mean"] is not None and s["off_target_zero_shot_mean"] is not None
    assert set(report.lid_ceiling) == set(LANGS)


# --- the command line ------------------------------------------------------------------------------


def test_cli_without_translation(corpus_dir, tmp_path, capsys):
    checkpoint = KINDS["attention"](corpus_dir / "attention_cli.pt")
    out = tmp_path / "report"
    code = main(["evaluate", "crosslingual", "--model", str(checkpoint), "--split", "test", "--max-sentences", "12",
                 "--no-bleu", "--out", str(out), "--device", "cpu"])
    assert code == 0, capsys.readouterr().err
    stem = "crosslingual_report_test"
    for suffix in (".md", ".json", "_retrieval.png", "_retrieval_centered.png", "_margin.png"):
        assert (out / f"{stem}{suffix}").stat().st_size > 0, suffix
    data = json.loads((out / f"{stem}.json").read_text())
    assert data["sentences"] == 12 and data["beam"] is None and data["corpus"] == str(corpus_dir / "corpus.yaml")
    assert data["pairs"]["de-fr"]["route"] == "zero-shot" and data["pairs"]["de-fr"]["bleu"] is None
    assert {"retrieval_mean", "retrieval_centered_mean", "retrieval_min", "margin_mean", "probe_accuracy",
            "probe_chance", "bleu_supervised_mean", "bleu_zero_shot_mean", "bleu_pivot_mean",
            "off_target_zero_shot_mean"} <= set(data["summary"])
    assert "# Cross-lingual report" in capsys.readouterr().out


def test_cli_with_translation_on_a_trained_model(trained_model, multi30k_corpus, tmp_path, capsys):
    """The tiny en<->de model of conftest: supervised BLEU both ways, no zero-shot direction."""
    code = main(["evaluate", "crosslingual", "--model", str(trained_model), "--corpus", str(multi30k_corpus),
                 "--max-sentences", "16", "--out", str(tmp_path), "--device", "cpu"])
    assert code == 0, capsys.readouterr().err
    data = json.loads((tmp_path / "crosslingual_report_test_2016_flickr.json").read_text())
    assert sorted(data["languages"]) == ["de", "en"] and data["sentences"] == 16 and data["beam"] == 1
    for pair in ("en-de", "de-en"):
        row = data["pairs"][pair]
        assert row["route"] == "supervised" and 0.0 <= row["bleu"] <= 100.0 and row["off_target"] is not None
    assert data["summary"]["bleu_supervised_mean"] is not None and data["summary"]["bleu_zero_shot_mean"] is None
    assert data["summary"]["probe_chance"] == 50.0
    assert "BLEU lowercased" in capsys.readouterr().out
    # --no-repeat-ngram: the translations of Model.translate(no_repeat_ngram=1), and the report says so
    code = main(["evaluate", "crosslingual", "--model", str(trained_model), "--corpus", str(multi30k_corpus),
                 "--max-sentences", "16", "--out", str(tmp_path / "blocked"), "--device", "cpu",
                 "--no-repeat-ngram", "1"])
    blocked = json.loads((tmp_path / "blocked" / "crosslingual_report_test_2016_flickr.json").read_text())
    assert code == 0 and blocked["no_repeat_ngram"] == 1 and data["no_repeat_ngram"] == 0
    assert "beam 1, no 1-gram twice" in (tmp_path / "blocked" / "crosslingual_report_test_2016_flickr.md").read_text()
    assert blocked["pairs"]["en-de"]["bleu"] != data["pairs"]["en-de"]["bleu"]


def test_errors_are_one_clear_line(corpus_dir, tmp_path, capsys):
    checkpoint = KINDS["attention"](corpus_dir / "attention_errors.pt")
    two_languages = write_multiway_corpus(tmp_path, "en_de", {"test": {k: v for k, v in aligned_sentences(10, 2).items()
                                                                        if k != "fr"}})
    cases = {"'nosuch'": ["--split", "nosuch"],
             "fr": ["--split", "test", "--corpus", str(two_languages)],
             "at least 4": ["--split", "test", "--max-sentences", "3"]}
    for needle, argv in cases.items():
        code = main(["evaluate", "crosslingual", "--model", str(checkpoint), "--no-bleu", "--out", str(tmp_path),
                     "--device", "cpu", *argv])
        err = capsys.readouterr().err.strip()
        assert code == 2 and err.startswith("error: ") and "\n" not in err and needle in err, err
    with pytest.raises(LanguageError, match="fr"):
        evaluate_crosslingual(checkpoint, two_languages, "test", bleu=False, progress=False)
    assert not list(tmp_path.glob("crosslingual_report*"))


def test_write_uses_its_own_stem(tmp_path):
    """The report's files never take the names of the XNLI sentence suite's files."""
    vectors = {lang: meaning_vectors(8) for lang in ("en", "de")}
    scores = pair_vector_scores(vectors)
    pairs = {f"{s}-{t}": {**dict.fromkeys(PAIR_KEYS), "src": s, "tgt": t, **v} for (s, t), v in scores.items()}
    probe = language_probe(vectors)
    report = CrosslingualReport("m", "c.yaml", "val", ["en", "de"], 8, summarize(pairs, probe), pairs, probe)
    files = write_crosslingual(report, tmp_path)
    assert [f.name for f in files] == ["crosslingual_report_val.md", "crosslingual_report_val.json",
                                       "crosslingual_report_val_retrieval.png",
                                       "crosslingual_report_val_retrieval_centered.png",
                                       "crosslingual_report_val_margin.png"]
