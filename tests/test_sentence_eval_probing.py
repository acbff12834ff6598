"""Probing: the locally built sets have the stated label distributions; the MLP probe learns what is there."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from test_sentence_eval_fakes import HashedBagOfWords, RandomEmbedder, need_data

from interlingua.evaluation.sentence.probing import (
    ProbeConfig,
    ProbeFeatures,
    fit_probe,
    probe_accuracies,
    probe_accuracy,
    probe_features,
)
from interlingua.evaluation.sentence.probing_sets import (
    LENGTH_BINS,
    ProbingTask,
    Sentence,
    SplitSizes,
    build_bigram_shift,
    build_sentence_length,
    build_subject_number,
    build_tense,
    build_word_content,
    length_bin,
    load_tagger,
    local_probing_tasks,
    main_clauses,
    official_probing_tasks,
    parse_in_parts,
    probing_corpus,
    read_probing_file,
    word_tokens,
)
from interlingua.evaluation.sentence.protocol import CachedEmbedder, EvaluationError
from interlingua.evaluation.sentence.tasks import Labelled, MissingDataError
from interlingua.workers import InlineExecutor, process_pool

SIZES = SplitSizes(600, 120, 120)


@pytest.fixture(scope="module")
def pool():
    root = need_data("multi30k").parent
    sentences, notes = probing_corpus(root)
    rng = np.random.default_rng(0)
    return [sentences[i] for i in rng.choice(len(sentences), 12000, replace=False)]


def test_tokenizer_and_length_bins():
    assert word_tokens("It's a dog, isn't it?") == ["It", "'s", "a", "dog", ",", "is", "n't", "it", "?"]
    assert [length_bin(n) for n in (4, 5, 8, 9, 25, 26, 28, 29)] == [None, 0, 0, 1, 4, 5, 5, None]
    assert len(LENGTH_BINS) == 6


def test_sentence_length_is_balanced_over_six_bins(pool):
    task = build_sentence_length(pool, SIZES, seed=0)
    for split in ("train", "dev", "test"):
        counts = task.label_counts(split)
        assert set(counts) == {"0", "1", "2", "3", "4", "5"} and len(set(counts.values())) == 1
    for text, label in zip(task.test.texts, task.test.labels):
        assert length_bin(len(text.split())) == int(label)
    # classes balanced within each text source too, so the source cannot stand in for the length
    sources = {s.text: s.source for s in pool}
    per_source = Counter((sources[t], lab) for t, lab in zip(task.train.texts, task.train.labels))
    for src in {s for s, _ in per_source}:
        assert len({per_source[(src, str(b))] for b in range(6)}) == 1


def test_word_content_has_one_target_per_sentence_and_equal_counts(pool):
    task = build_word_content(pool, SIZES, seed=0, n_words=50)
    words = set(task.train.labels)
    assert len(words) == 50 and set(task.test.labels) == words
    assert len(set(task.label_counts("train").values())) == 1 and len(set(task.label_counts("test").values())) == 1
    for text, word in zip(task.train.texts + task.test.texts, task.train.labels + task.test.labels):
        toks = [t.lower() for t in text.split()]
        assert toks.count(word) == 1 and sum(t in words for t in toks) == 1 and len(word) >= 4
    assert not set(task.train.texts) & set(task.test.texts)


def test_bigram_shift_swaps_one_adjacent_pair_in_half(pool):
    task = build_bigram_shift(pool, SIZES, seed=0)
    assert task.label_counts("train") == {"I": 300, "O": 300}
    originals = {s.text for s in pool}
    for text, label in zip(task.train.texts, task.train.labels):
        if label == "O":
            assert text in originals
        else:
            toks = text.split()
            swaps = [i for i in range(1, len(toks) - 1)
                     if " ".join(toks[:i] + [toks[i + 1], toks[i]] + toks[i + 2:]) in originals]
            assert swaps, text


def test_tagger_tasks_keep_forms_in_one_split(pool):
    nlp, reason = load_tagger()
    if nlp is None:
        from conftest import missing
        missing(reason)
    parsed = pool[:1200]  # enough for splits of 300 / 60 / 60 (800 were, 2026-11-28); each parse costs time
    clauses = main_clauses(parsed, nlp)
    first, second = main_clauses([Sentence(word_tokens("The dogs ran home ."), "x"),
                                  Sentence(word_tokens("A man is running ."), "x")], nlp)
    assert (first.tense, first.verb, first.subj_number, first.subject) == ("PAST", "ran", "NNS", "dogs")
    assert (second.tense, second.subj_number) == (None, "NN")  # main verb VBG: no tense label, as in SentEval
    assert parse_in_parts(parsed[:300], InlineExecutor(), parts=3) == clauses[:300]
    for build, attr in ((build_tense, "verb"), (build_subject_number, "subject")):
        task = build(parsed, clauses, SplitSizes(300, 60, 60), seed=0)
        for split in ("train", "dev", "test"):
            counts = task.label_counts(split)
            assert len(counts) == 2 and len(set(counts.values())) == 1
        form = {s.text: getattr(c, attr) for s, c in zip(parsed, clauses)}
        train_forms = {form[t] for t in task.train.texts}
        assert not train_forms & {form[t] for t in task.test.texts}


def test_official_file_reader(tmp_path):
    lines = [f"{sp}\t{'PAST' if i % 2 else 'PRES'}\tsentence number {i} ."
             for sp, n in (("tr", 40), ("va", 10), ("te", 10))
             for i in range(n)]
    (tmp_path / "past_present.txt").write_text("\n".join(lines) + "\n")
    task = read_probing_file(tmp_path / "past_present.txt", limits=SplitSizes(20, 10, 4))
    assert task.name == "Tense" and task.sizes() == {"train": 20, "dev": 10, "test": 4}
    assert any("20 of 40" in n for n in task.notes)
    tasks, missing = official_probing_tasks(tmp_path)
    assert [t.name for t in tasks] == ["Tense"] and len(missing) == 9
    (tmp_path / "bad.txt").write_text("xx\tA\n")
    with pytest.raises(EvaluationError, match="bad.txt:1"):
        read_probing_file(tmp_path / "bad.txt")
    written = task.write(tmp_path / "again.txt")
    assert read_probing_file(written).sizes() == task.sizes()


def test_mlp_probe_learns_a_signal_and_not_noise():
    rng = np.random.default_rng(0)

    def make(n):
        X = rng.normal(size=(n, 20)).astype(np.float32)
        return X, np.array(["low", "mid", "high"])[np.digitize(X[:, 0] + 0.5 * X[:, 1], [-0.5, 0.5])]

    (a, b), (c, d), (e, f) = make(1500), make(300), make(300)
    res = probe_accuracy(a, b, c, d, e, f, l2_grid=[1e-5])
    assert res["acc"] > 85.0 and res["n_classes"] == 3
    noise = probe_accuracy(a, rng.permutation(b), c, d, e, f, l2_grid=[1e-5])
    assert noise["acc"] < 50.0  # the largest class holds about 38%
    assert ProbeConfig().hidden == 200 and ProbeConfig().dropout == 0.1


def test_stacked_probes_train_each_member_on_its_own_features_and_l2():
    rng = np.random.default_rng(1)
    n = {"train": 1200, "dev": 300, "test": 300}
    y = {s: rng.integers(0, 3, size) for s, size in n.items()}
    signal = {s: (np.eye(3)[y[s]] * 3 + rng.normal(size=(size, 3))).astype(np.float32) for s, size in n.items()}
    noise = {s: rng.normal(size=(size, 3)).astype(np.float32) for s, size in n.items()}
    X = {s: np.stack([signal[s], noise[s], signal[s]]) for s in n}  # member 2: same signal, crushing L2
    res = probe_accuracies(X["train"], y["train"].tolist(), X["dev"], y["dev"].tolist(), X["test"],
                           y["test"].tolist(), l2s=[1e-5, 1e-5, 10.0])
    assert [r["l2"] for r in res] == [1e-5, 1e-5, 10.0]
    assert res[0]["acc"] > 85.0
    assert res[1]["acc"] < 50.0 and res[2]["acc"] < res[0]["acc"] - 20.0


def test_a_probe_fit_gives_the_same_result_in_a_worker_process():
    rng = np.random.default_rng(2)
    n = {"train": 400, "dev": 100, "test": 100}
    y = {s: rng.integers(0, 3, size).tolist() for s, size in n.items()}
    X = {s: (np.eye(3)[y[s]] + rng.normal(size=(size, 3))).astype(np.float32) for s, size in n.items()}
    heads = {s: rng.normal(size=(2, size, 3)).astype(np.float32) for s, size in n.items()}
    feats = ProbeFeatures("toy", X, y, heads=heads, head_train_labels=y["train"])
    cfg = ProbeConfig(max_epochs=3, l2_grid=(1e-5, 1e-3))
    here = fit_probe(feats, cfg=cfg, seed=3)
    with process_pool(2) as workers:  # one job: the pool starts one worker process for it
        there = workers.submit(fit_probe, feats, cfg=cfg, seed=3).result()
    assert {k: v for k, v in there.items() if k != "fit_s"} == {k: v for k, v in here.items() if k != "fit_s"}
    assert len(here["per_head"]["acc"]) == 2 and here["acc"] > 50.0
    with pytest.raises(ValueError, match="at least 1"):
        with process_pool(0):
            pass


class LengthInOneHead:
    """Head 0 holds the sentence's length bin (one-hot), the other heads seeded noise."""

    languages = ["en"]

    def __init__(self, heads: int = 3, dim: int = 16):
        self.k, self.dim = heads, dim

    def encode(self, sentences, lang, pooling="mean", batch_size=64):
        out = np.stack([RandomEmbedder(self.dim * self.k).encode([s], lang)[0].reshape(self.k, self.dim)
                        for s in sentences])
        for i, s in enumerate(sentences):
            out[i, 0] = 0.0
            out[i, 0, length_bin(len(s.split()))] = 1.0
        return out if pooling == "heads" else out.mean(1)


def _probe(encoder: CachedEmbedder, task: ProbingTask, **features) -> dict:
    """Encode and fit one task, as the probing suite does (there on worker processes)."""
    return fit_probe(probe_features(encoder, task, **features))


def test_per_head_probing_gives_one_score_per_head(pool):
    task = build_sentence_length(pool, SplitSizes(300, 60, 60), seed=0)
    res = _probe(CachedEmbedder("heads", LengthInOneHead()), task, per_head=True, per_head_train=150)
    assert len(res["per_head"]["acc"]) == 3 and res["per_head"]["n_train"] == 150
    # six balanced bins: the head holding the length is read off, the noise heads sit near chance (16.7%)
    informative, *noise = res["per_head"]["acc"]
    assert informative > 90.0 and all(a < 40.0 for a in noise), res["per_head"]["acc"]
    plain = _probe(CachedEmbedder("random", RandomEmbedder(dim=16)), task, per_head=True)
    assert "not (n, k, d)" in plain["per_head"]["skipped"]  # this fake ignores pooling='heads'
    assert plain["acc"] < 40.0  # random vectors: near chance
    no_heads = _probe(CachedEmbedder("bow", HashedBagOfWords(dim=8)), task, per_head=True)
    assert "not available" in no_heads["per_head"]["skipped"]
    labels = ProbingTask("toy", "test", Labelled(["a"] * 3, ["x"] * 3), Labelled([], []), Labelled([], []))
    with pytest.raises(EvaluationError, match="two classes"):
        _probe(CachedEmbedder("random", RandomEmbedder(dim=4)), labels)


def test_probing_reads_webis_as_the_data_command_writes_it(tmp_path):
    """`interlingua data webis-cls10` writes <lang>/<domain>/train.review.gz (the release's XML, no other
    form): the probing sets' review text comes from exactly that, through `data.webis`."""
    from interlingua.cli import main
    source = need_data("webis_cls10")
    root = tmp_path / "data"
    assert main(["data", "webis-cls10", "--dest", str(root / "webis_cls10"), "--from", str(source)]) == 0
    assert sorted(p.name for p in (root / "webis_cls10" / "en" / "books").iterdir()) == ["train.review.gz"]
    sentences, notes = probing_corpus(root, sources=("webis_cls10",))
    assert notes == ["webis_cls10: 30,984 sentences of 5-28 tokens"]  # the count the earlier text files gave
    assert {s.source for s in sentences} == {"webis_cls10"}
    task = build_sentence_length(sentences, SplitSizes(300, 60, 60), seed=0)
    res = fit_probe(probe_features(CachedEmbedder("bow", HashedBagOfWords(dim=32)), task))
    assert res["acc"] > 100 / len(LENGTH_BINS)  # a bag of words knows a sentence's length somewhat


def test_webis_probing_text_leaves_each_reviews_first_sentence_out(tmp_path):
    """The summary runs into the text's first sentence: only the sentences after it are taken."""
    import gzip
    from xml.sax.saxutils import escape
    review = ("Great record The first line sits with the title. The band plays well on every one of these songs . "
              "I would buy this album again for my friends !")
    item = (f"<item><summary>{escape(review[:12])}</summary><rating>5.0</rating>"
            f"<text>{escape(review[13:])}</text></item>")
    path = tmp_path / "webis_cls10" / "en" / "music" / "train.review.gz"
    path.parent.mkdir(parents=True)
    path.write_bytes(gzip.compress(f'<?xml version="1.0" encoding="utf-8"?><items>{item}</items>'.encode()))
    sentences, _ = probing_corpus(tmp_path, sources=("webis_cls10",))
    assert [s.text for s in sentences] == ["The band plays well on every one of these songs .",
                                           "I would buy this album again for my friends !"]
    with pytest.raises(MissingDataError, match="no probing text"):
        probing_corpus(tmp_path / "empty", sources=("webis_cls10",))


def test_without_spacy_tense_and_subjnum_say_how_to_install(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "spacy", None)  # import spacy -> ImportError
    nlp, reason = load_tagger()
    assert nlp is None and "interlingua[probing]" in reason
    tasks, _, not_run = local_probing_tasks(need_data("multi30k").parent, SIZES, sources=("multi30k",))
    assert [t.name for t in tasks] == ["Length", "WC", "BShift"]
    assert set(not_run) == {"Tense", "SubjNum"} and "interlingua[probing]" in not_run["Tense"]
