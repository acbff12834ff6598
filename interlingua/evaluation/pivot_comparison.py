"""Zero-shot against pivoting, per direction: the direct translation of a direction never trained on real
pairs beside the same model's translation through a pivot language (twice the cost), their difference,
and a one-line verdict. The yardstick of paper 004 and of zero-resource training (`train.synthetic`).

BLEU is read the way the model was trained: cased for a cased model, lowercased for a lowercased one.
Where both translations are at hand, each difference gets the p-value of sacreBLEU's paired bootstrap
test (1,000 resamples of the test sentences, its fixed seed): on a test set of a thousand sentences a
difference of half a BLEU point is often within what resampling the sentences moves it, and the verdict
says how many differences are beyond that.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from interlingua.evaluation.bleu_matrix import MatrixResult

SIGNIFICANCE = 0.05
"""A difference with a paired-bootstrap p-value below this is called beyond chance."""
BOOTSTRAP_RESAMPLES = 1000
MIN_TESTED_SENTENCES = 10
"""Fewer sentences than this are not tested (p None): resampling a handful of sentences says nothing."""


@dataclass(frozen=True)
class DirectVsPivot:
    """One zero-shot direction: BLEU direct and through `pivot`."""

    src: str
    tgt: str
    direct: float
    through_pivot: float
    pivot: str
    p_value: float | None = None
    """The paired bootstrap test's p-value of the difference; None where the translations were not at hand."""

    @property
    def difference(self) -> float:
        """Direct minus pivot: positive where translating directly is better."""
        return self.direct - self.through_pivot

    @property
    def beyond_chance(self) -> bool | None:
        """Whether the difference is beyond what resampling the test sentences explains (None: not tested)."""
        return None if self.p_value is None else self.p_value < SIGNIFICANCE

    def significance(self) -> str:
        """"" where untested, else e.g. "p = 0.03, beyond chance"."""
        if self.p_value is None:
            return ""
        return f"p = {self.p_value:.2f}, {'beyond' if self.beyond_chance else 'within'} chance"


@dataclass(frozen=True)
class PivotComparison:
    """Every zero-shot direction of a model, direct against pivot, in one BLEU (`metric`)."""

    rows: tuple[DirectVsPivot, ...]
    metric: str
    """"BLEU (cased)" or "BLEU (lowercased)"."""

    @property
    def mean_difference(self) -> float | None:
        return sum(r.difference for r in self.rows) / len(self.rows) if self.rows else None

    def verdict(self) -> str:
        """One line: in how many directions zero-shot reaches pivoting, and by how much on average."""
        if not self.rows:
            return "no zero-shot direction with a pivot to compare against"
        above = sum(r.difference >= 0 for r in self.rows)
        mean = self.mean_difference
        assert mean is not None
        word = ("at or above" if above == len(self.rows) else "below" if above == 0 else "mixed against")
        line = (f"zero-shot is {word} pivoting: at or above it in {above} of {len(self.rows)} direction(s), "
                f"mean difference {mean:+.2f} {self.metric}")
        tested = [r for r in self.rows if r.p_value is not None]
        if tested:
            ahead = sum(bool(r.beyond_chance) and r.difference > 0 for r in tested)
            behind = sum(bool(r.beyond_chance) and r.difference < 0 for r in tested)
            line += (f"; beyond chance (paired bootstrap, p < {SIGNIFICANCE:g}): above in {ahead}, below in {behind} "
                     f"of {len(tested)}")
        return line

    def lines(self) -> list[str]:
        """Plain lines for a terminal: one per direction, then the verdict."""
        out = [f"  {r.src}->{r.tgt}: {r.direct:5.2f} direct, {r.through_pivot:5.2f} through {r.pivot} "
               f"({r.difference:+.2f}{'; ' + r.significance() if r.p_value is not None else ''})" for r in self.rows]
        return out + [f"  verdict: {self.verdict()}"]

    def to_markdown(self) -> str:
        head = ["## Zero-shot against pivot", "", f"{self.metric}; difference = direct - through the pivot; p: "
                f"sacreBLEU's paired bootstrap test ({BOOTSTRAP_RESAMPLES:,} resamples).", "",
                "| direction | direct | through pivot | pivot | difference | p |", "|---|---|---|---|---|---|"]
        rows = [f"| {r.src}->{r.tgt} | {r.direct:.2f} | {r.through_pivot:.2f} | {r.pivot} | {r.difference:+.2f} | "
                f"{'-' if r.p_value is None else f'{r.p_value:.3f}'} |" for r in self.rows]
        return "\n".join(head + rows + ["", f"Verdict: {self.verdict()}.", ""])

    def to_json(self) -> dict:
        return {"metric": self.metric, "verdict": self.verdict(), "mean_difference": self.mean_difference,
                "directions": {f"{r.src}-{r.tgt}": {"direct": r.direct, "through_pivot": r.through_pivot,
                                                    "pivot": r.pivot, "difference": r.difference,
                                                    "p_value": r.p_value}
                               for r in self.rows}}


def paired_p_value(direct: Sequence[str], through_pivot: Sequence[str], references: Sequence[str],
                   cased: bool) -> float | None:
    """sacreBLEU's paired bootstrap test of two translations of the same sentences: the p-value of their BLEU
    difference (`BOOTSTRAP_RESAMPLES` resamples; sacreBLEU fixes its seed, so the same inputs give the same p).
    None under `MIN_TESTED_SENTENCES`; 1.0 for identical translations (sacreBLEU itself gives its smallest p there,
    by design: "a zero difference should not be attributed to chance")."""
    if len(references) < MIN_TESTED_SENTENCES:
        return None
    if list(direct) == list(through_pivot):
        return 1.0
    sacrebleu_log = logging.getLogger("sacrebleu")
    level = sacrebleu_log.level
    sacrebleu_log.setLevel(logging.WARNING)  # it logs every stage of the test at INFO
    try:
        test = PairedTest([("pivot", list(through_pivot)), ("direct", list(direct))],
                          {"BLEU": BLEU(lowercase=not cased, tokenize="13a")}, [list(references)],
                          test_type="bs", n_samples=BOOTSTRAP_RESAMPLES)
        _, scores = test()
    finally:
        sacrebleu_log.setLevel(level)
    result = scores["BLEU"][1]
    assert not isinstance(result, str) and result.p_value is not None
    return float(result.p_value)


def compare_with_pivot(direct: MatrixResult, pivoted: MatrixResult, cased: bool) -> PivotComparison:
    """The zero-shot directions of `direct` that `pivoted` (the same model through `pivoted.pivot`) also scored."""
    table = "bleu_cased" if cased else "bleu"
    pivot = pivoted.pivot or "?"
    rows = []
    for s, t in direct.zero_shot:
        a = getattr(direct, table).get(s, {}).get(t)
        b = getattr(pivoted, table).get(s, {}).get(t)
        if a is not None and b is not None:
            refs = direct.references.get((s, t))
            p = None
            if refs is not None and refs == pivoted.references.get((s, t)) and (s, t) in direct.outputs \
                    and (s, t) in pivoted.outputs:  # both translated the same sentences
                p = paired_p_value(direct.outputs[s, t], pivoted.outputs[s, t], refs, cased)
            rows.append(DirectVsPivot(s, t, a, b, pivot, p))
    return PivotComparison(tuple(rows), "BLEU (cased)" if cased else "BLEU (lowercased)")
