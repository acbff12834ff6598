"""The record of `interlingua evaluate crosslingual` (`crosslingual_report` computes it, `crosslingual_markdown`
renders it): what it measured per pair of languages, its summary and the language probe, as JSON and back."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields

from interlingua.evaluation.pivot_comparison import DirectVsPivot, PivotComparison


@dataclass
class CrosslingualReport:
    """Retrieval and probe accuracies and off-target rates in percent, BLEU / chrF as sacreBLEU gives them,
    margins and cosines as cosines."""

    model: str
    corpus: str
    split: str
    languages: list[str]
    """The source languages compared (retrieval, margin, probe)."""
    sentences: int
    """Aligned sentences per language (blank lines and repeated sentences left out)."""
    summary: dict[str, float | int | str | None]
    pairs: dict[str, dict]
    """"src-tgt" -> the keys of PAIR_KEYS: every ordered pair of source languages and every translated direction."""
    probe: dict[str, float | int]
    beam: int | None = None
    """Beam size of the translations; None where BLEU was not computed."""
    pivot: str | None = None
    """The preferred pivot language (each pair's `pivot` says which one its zero-shot direction went through)."""
    lid_ceiling: dict[str, float] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    cased: bool = False
    """Whether the model was trained on cased text: its zero-shot-against-pivot verdict reads cased BLEU."""
    no_repeat_ngram: int = 0
    """The translations wrote no n-gram of this many subwords twice (`Model.translate`'s); 0: no blocking."""

    def pivot_comparison(self) -> PivotComparison:
        """Each zero-shot direction that was also translated through a pivot: direct, pivot, difference."""
        key = "bleu_cased" if self.cased else "bleu"
        rows = tuple(DirectVsPivot(r["src"], r["tgt"], r[key], r[f"pivot_{key}"], r["pivot"], r.get("pivot_p_value"))
                     for r in self.pairs.values()
                     if r["route"] == "zero-shot" and r[key] is not None and r[f"pivot_{key}"] is not None)
        return PivotComparison(rows, "BLEU (cased)" if self.cased else "BLEU (lowercased)")

    def pair(self, src: str, tgt: str) -> dict:
        return self.pairs[f"{src}-{tgt}"]

    def matrix(self, key: str) -> dict[str, dict[str, float | None]]:
        """One per-pair score as {src: {tgt: value}}, for tables and heat maps."""
        out: dict[str, dict[str, float | None]] = {}
        for row in self.pairs.values():
            out.setdefault(row["src"], {})[row["tgt"]] = row[key]
        return out

    @property
    def zero_shot(self) -> set[tuple[str, str]]:
        return {(r["src"], r["tgt"]) for r in self.pairs.values() if r["route"] == "zero-shot"}

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping) -> CrosslingualReport:
        """A report as `to_json` wrote it; one written before a pair's `route` was named so calls it `kind`."""
        report = cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})
        report.pairs = {key: {("route" if k == "kind" else k): v for k, v in row.items()}
                        for key, row in report.pairs.items()}
        return report
