"""Zero-shot against pivoting, per direction: the direct translation of a direction never trained on real
pairs beside the same model's translation through a pivot language (twice the cost), their difference,
and a one-line verdict. The yardstick of paper 004 and of zero-resource training (`train.synthetic`).

BLEU is read the way the model was trained: cased for a cased model, lowercased for a lowercased one.
"""
from __future__ import annotations

from dataclasses import dataclass

from interlingua.evaluation.bleu_matrix import MatrixResult


@dataclass(frozen=True)
class DirectVsPivot:
    """One zero-shot direction: BLEU direct and through `pivot`."""

    src: str
    tgt: str
    direct: float
    through_pivot: float
    pivot: str

    @property
    def difference(self) -> float:
        """Direct minus pivot: positive where translating directly is better."""
        return self.direct - self.through_pivot


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
        return (f"zero-shot is {word} pivoting: at or above it in {above} of {len(self.rows)} direction(s), "
                f"mean difference {mean:+.2f} {self.metric}")

    def lines(self) -> list[str]:
        """Plain lines for a terminal: one per direction, then the verdict."""
        out = [f"  {r.src}->{r.tgt}: {r.direct:5.2f} direct, {r.through_pivot:5.2f} through {r.pivot} "
               f"({r.difference:+.2f})" for r in self.rows]
        return out + [f"  verdict: {self.verdict()}"]

    def to_markdown(self) -> str:
        head = ["## Zero-shot against pivot", "", f"{self.metric}; difference = direct - through the pivot.", "",
                "| direction | direct | through pivot | pivot | difference |", "|---|---|---|---|---|"]
        rows = [f"| {r.src}->{r.tgt} | {r.direct:.2f} | {r.through_pivot:.2f} | {r.pivot} | {r.difference:+.2f} |"
                for r in self.rows]
        return "\n".join(head + rows + ["", f"Verdict: {self.verdict()}.", ""])

    def to_json(self) -> dict:
        return {"metric": self.metric, "verdict": self.verdict(), "mean_difference": self.mean_difference,
                "directions": {f"{r.src}-{r.tgt}": {"direct": r.direct, "through_pivot": r.through_pivot,
                                                    "pivot": r.pivot, "difference": r.difference}
                               for r in self.rows}}


def compare_with_pivot(direct: MatrixResult, pivoted: MatrixResult, cased: bool) -> PivotComparison:
    """The zero-shot directions of `direct` that `pivoted` (the same model through `pivoted.pivot`) also scored."""
    table = "bleu_cased" if cased else "bleu"
    pivot = pivoted.pivot or "?"
    rows = []
    for s, t in direct.zero_shot:
        a = getattr(direct, table).get(s, {}).get(t)
        b = getattr(pivoted, table).get(s, {}).get(t)
        if a is not None and b is not None:
            rows.append(DirectVsPivot(s, t, a, b, pivot))
    return PivotComparison(tuple(rows), "BLEU (cased)" if cased else "BLEU (lowercased)")
