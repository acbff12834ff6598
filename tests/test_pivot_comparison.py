"""Zero-shot against pivot: the difference of each direction comes with sacreBLEU's paired bootstrap test, which
tells a real difference from one that the choice of test sentences explains."""
from __future__ import annotations

import random

from interlingua.evaluation.bleu_matrix import MatrixResult
from interlingua.evaluation.pivot_comparison import compare_with_pivot

WORDS = "a man in a blue shirt rides a red bike down the street while two dogs run beside him".split()


def _sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))) for _ in range(n)]


def _result(hyps: list[str], refs: list[str], pivot: str | None) -> MatrixResult:
    """A one-direction de->fr matrix (zero-shot) with its translations, as bleu_matrix returns it."""
    from sacrebleu.metrics import BLEU
    score = round(BLEU(tokenize="13a").corpus_score(hyps, [refs]).score, 2)
    return MatrixResult("test", ["de", "fr"], {"de": {"fr": score}}, {}, [("de", "fr")], 1, pivot,
                        bleu_cased={"de": {"fr": score}}, outputs={("de", "fr"): hyps},
                        references={("de", "fr"): refs})


def _drop_words(sentences: list[str], share: float, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(w for w in s.split() if rng.random() > share) or s for s in sentences]


def test_a_clear_difference_is_beyond_chance_and_a_tiny_one_is_not():
    refs = _sentences(300, seed=1)
    good, poor = _drop_words(refs, 0.1, seed=2), _drop_words(refs, 0.5, seed=3)
    clear = compare_with_pivot(_result(good, refs, None), _result(poor, refs, "en"), cased=True)
    row = clear.rows[0]
    assert row.difference > 10 and row.p_value is not None and row.p_value < 0.05 and row.beyond_chance
    assert "beyond chance" in clear.lines()[0] and "above in 1, below in 0 of 1" in clear.verdict()
    # the same translations but for one sentence: a small difference the test calls chance
    nearly = good[:-1] + [poor[-1]]
    close = compare_with_pivot(_result(good, refs, None), _result(nearly, refs, "en"), cased=True)
    assert 0 < close.rows[0].difference < 1 and close.rows[0].p_value is not None and close.rows[0].p_value > 0.05
    assert "within chance" in close.lines()[0] and "above in 0, below in 0 of 1" in close.verdict()
    assert close.to_json()["directions"]["de-fr"]["p_value"] == close.rows[0].p_value
    assert "| p |" in close.to_markdown()


def test_results_without_their_translations_are_compared_untested():
    refs = _sentences(50, seed=4)
    direct, pivoted = _result(refs, refs, None), _result(_drop_words(refs, 0.3, 5), refs, "en")
    bare = MatrixResult(**{**pivoted.to_json(), "zero_shot": [("de", "fr")]})  # as read back from its JSON
    comparison = compare_with_pivot(direct, bare, cased=True)
    assert comparison.rows[0].p_value is None and "chance" not in comparison.verdict()
    assert comparison.rows[0].difference > 0


def test_identical_translations_are_no_difference_and_a_handful_of_sentences_is_not_tested():
    refs = _sentences(40, seed=6)
    hyps = _drop_words(refs, 0.2, seed=7)
    same = compare_with_pivot(_result(hyps, refs, None), _result(list(hyps), refs, "en"), cased=True)
    assert same.rows[0].difference == 0 and same.rows[0].p_value == 1.0 and not same.rows[0].beyond_chance
    few = compare_with_pivot(_result(hyps[:5], refs[:5], None), _result(refs[:5], refs[:5], "en"), cased=True)
    assert few.rows[0].p_value is None and "chance" not in few.lines()[0]
