"""BLEU of the matrix and of the length buckets is plain sacreBLEU (lowercased, 13a) of the
hypotheses against the raw reference lines of the corpus files, nothing rebuilt or cut."""
from __future__ import annotations

import gzip
import re

import pytest
import sacrebleu
from conftest import MULTI30K
from sacrebleu.metrics import CHRF

from interlingua.evaluation.bleu_matrix import bleu_matrix, load_split_texts, parallel_texts
from interlingua.evaluation.length_analysis import bleu_by_length, bucket_of
from interlingua.inference.api import Languages

SPLIT = "test_2016_flickr"


def raw_lines(lang: str) -> list[str]:
    """The reference file itself, read without any of the package's code."""
    with gzip.open(MULTI30K / f"{SPLIT}.{lang}.gz", "rt", encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


def mangle(ref: str, i: int) -> str:
    """A hypothesis close to the reference, in ways the documented scoring must see through
    (case, punctuation glued on) or not (dropped and swapped words)."""
    words = ref.split()
    words = [w for j, w in enumerate(words) if (i + j) % 4]
    if i % 3 == 0 and len(words) > 3:
        words[1], words[2] = words[2], words[1]
    out = " ".join(words)
    out = out.upper() if i % 2 else out
    return re.sub(r" ([.,!?])", r"\1", out)  # 13a splits punctuation off again


class StubTranslator:
    """Hypotheses derived from the reference of each source line; records every call."""

    def __init__(self, langs):
        self.languages = Languages(tuple(langs), tuple(langs), (("en", "de"), ("de", "en")))
        self.refs = {lang: raw_lines(lang) for lang in langs}
        self.calls = []

    def translate(self, sentences, src, tgt, beam=1, length_penalty=1.0, batch_size=64, pivot=None, progress=False,
                  no_repeat_ngram=0):
        assert no_repeat_ngram == 0  # what the matrix asks of the model by default
        index = {s: i for i, s in enumerate(self.refs[src])}
        self.calls.append((src, tgt, pivot))
        return [mangle(self.refs[tgt][index[s]], index[s]) for s in sentences]


@pytest.fixture
def corpus(multi30k_corpus):
    return multi30k_corpus


def test_matrix_is_sacrebleu_on_the_raw_references(corpus):
    stub = StubTranslator(["en", "de", "fr"])
    result = bleu_matrix(stub, corpus, split=SPLIT, max_sentences=300, progress=False)
    assert sorted((s, t) for s in result.bleu for t in result.bleu[s]) == \
        [(s, t) for s in ("de", "en", "fr") for t in ("de", "en", "fr") if s != t]
    for s in result.bleu:
        for t, score in result.bleu[s].items():
            refs = raw_lines(t)[:300]
            hyps = [mangle(r, i) for i, r in enumerate(refs)]
            direct = sacrebleu.corpus_bleu(hyps, [refs], lowercase=True, tokenize="13a")
            assert score == round(direct.score, 2), (s, t)
            assert 20 < score < 90  # far from both 0 and 100: the mangling is seen, case and glued punctuation not
            assert result.chrf[s][t] == round(CHRF(lowercase=True).corpus_score(hyps, [refs]).score, 2)
    assert "case:lc" in result.signature and "tok:13a" in result.signature and "nrefs:1" in result.signature
    assert sorted(result.zero_shot) == [("de", "fr"), ("en", "fr"), ("fr", "de"), ("fr", "en")]


def test_matrix_scores_the_whole_split_by_default(corpus):
    result = bleu_matrix(StubTranslator(["en", "de"]), corpus, split=SPLIT, progress=False)
    for s, t in (("en", "de"), ("de", "en")):
        refs = raw_lines(t)
        assert len(refs) == 1000
        hyps = [mangle(r, i) for i, r in enumerate(refs)]
        assert result.bleu[s][t] == round(sacrebleu.corpus_bleu(hyps, [refs], lowercase=True, tokenize="13a").score, 2)


def test_matrix_pivot_only_where_there_is_something_to_go_through(corpus):
    stub = StubTranslator(["en", "de", "fr"])
    bleu_matrix(stub, corpus, split=SPLIT, pivot="en", max_sentences=5, progress=False)
    assert sorted(stub.calls) == [("de", "en", None), ("de", "fr", "en"), ("en", "de", None), ("en", "fr", None),
                                  ("fr", "de", "en"), ("fr", "en", None)]


def test_length_buckets_are_sacrebleu_on_the_raw_references(corpus):
    stub = StubTranslator(["en", "de"])
    src, ref = parallel_texts(load_split_texts(corpus, SPLIT), "en", "de")  # what `analyze lengths` passes
    assert src == raw_lines("en") and ref == raw_lines("de")
    edges = (8, 12, 16)
    result = bleu_by_length({"stub": stub}, src, ref, "en", "de", edges=edges)
    buckets = [bucket_of(len(s.split()), edges) for s in src]
    assert result.counts == [buckets.count(b) for b in range(4)] and min(result.counts) > 20
    hyps = [mangle(r, i) for i, r in enumerate(ref)]
    for b, score in enumerate(result.bleu["stub"]):
        h = [x for x, k in zip(hyps, buckets) if k == b]
        r = [x for x, k in zip(ref, buckets) if k == b]
        assert score == round(sacrebleu.corpus_bleu(h, [r], lowercase=True, tokenize="13a").score, 2), b
    assert len(set(result.bleu["stub"])) == 4
