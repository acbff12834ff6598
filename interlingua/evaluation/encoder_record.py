"""The record of `interlingua analyze encoder` (`encoder_analysis` measures it, `encoder_report` renders it): per
layer, token and position probes, similarities between languages and retrieval; as JSON with what each measure means."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from interlingua.evaluation.representation_similarity import DRAWS, LayerSimilarity
from interlingua.evaluation.svcca import SVCCA_K

# --- the result --------------------------------------------------------------------------------

SIMILARITY_KEYS = tuple(f.name for f in fields(LayerSimilarity))
"""The per-pair, per-layer similarity fields of `EncoderAnalysis`, named as `LayerSimilarity`'s."""

MEASURE_NOTES = {
    "svcca_fixed": "SVCCA keeping the same k leading singular directions of each language's states in every layer "
                   "(k used: svcca_fixed_k); compare with svcca_fixed_permuted",
    "cka": "linear CKA (Kornblith et al. 2019); compare with cka_permuted",
    "*_gaussian": "the measure on independent standard Gaussian data of the same shapes (what shape alone gives)",
    "*_permuted": "the measure on the same states with each sentence paired with another sentence's translation "
                  "(each language's spectrum kept, the pairing broken): the reference to subtract",
    "svcca_99": "the paper's SVCCA keeping 99% of the variance: confounded by the number of directions kept "
                "(svcca_99_kept), which changes the score on its own (independent Gaussian data, n = 1000: about "
                "0.08 with 10 directions, 0.30 with 125); not comparable across layers, kept for continuity",
}
"""What the similarity keys of the JSON mean (written beside them as `notes`)."""


def _mean(rows: Iterable[list[float]]) -> list[float]:
    rows = list(rows)
    return [float(v) for v in np.mean(rows, axis=0)] if rows else []


@dataclass
class EncoderAnalysis:
    checkpoint: str
    encoder: str
    corpus: str
    train_split: str
    split: str
    languages: list[str]
    layers: list[str]
    """Row names: `emb` (the embeddings as the first layer sees them), then 1 .. L (L: the output H)."""
    tokens: dict[str, dict[str, int]]
    """split -> language -> token states used."""
    token_accuracy: dict[str, list[float]]
    position_accuracy: dict[str, list[float]]
    token_ceiling: dict[str, float]
    """Per language, the share of test tokens whose id occurs in the training split (the rest count as wrong)."""
    svcca_k: int = SVCCA_K
    """The k asked for fixed-k SVCCA (`svcca_fixed_k`: the k used, lower where a view has lower rank)."""
    similarity_draws: int = DRAWS
    """Gaussian draws and row permutations each reference averages."""
    svcca_fixed: dict[str, list[float]] = field(default_factory=dict)
    """`a-b` -> per layer, as every per-pair field below."""
    svcca_fixed_k: dict[str, list[int]] = field(default_factory=dict)
    svcca_fixed_gaussian: dict[str, list[float]] = field(default_factory=dict)
    svcca_fixed_permuted: dict[str, list[float]] = field(default_factory=dict)
    cka: dict[str, list[float]] = field(default_factory=dict)
    cka_gaussian: dict[str, list[float]] = field(default_factory=dict)
    cka_permuted: dict[str, list[float]] = field(default_factory=dict)
    svcca_99: dict[str, list[float]] = field(default_factory=dict)
    """The paper's 99%-variance SVCCA, confounded by the number of directions kept (`svcca_99_kept`)."""
    svcca_99_random: dict[str, list[float]] = field(default_factory=dict)
    svcca_99_kept: dict[str, list[list[int]]] = field(default_factory=dict)
    """Per layer, [directions kept of a, of b]."""
    retrieval: dict[str, list[float]] = field(default_factory=dict)
    pair_sentences: dict[str, int] = field(default_factory=dict)
    language_id_accuracy: float | None = None
    confusion: list[list[int]] = field(default_factory=list)
    probe: dict = field(default_factory=dict)

    def add_pair(self, name: str, sentences: int, sims: Sequence[LayerSimilarity], retrieval: list[float]) -> None:
        """Store one language pair's per-layer scores (`pair_scores`)."""
        for key in SIMILARITY_KEYS:
            getattr(self, key)[name] = [list(v) if isinstance(v, tuple) else v for v in (getattr(s, key) for s in sims)]
        self.retrieval[name] = retrieval
        self.pair_sentences[name] = sentences

    def means(self) -> dict[str, list[float]]:
        """Per-layer averages over languages (probes) and pairs (similarities, retrieval); for
        `svcca_99_kept` over both languages of every pair."""
        out = {"token_accuracy": _mean(self.token_accuracy.values()),
               "position_accuracy": _mean(self.position_accuracy.values())}
        for key in SIMILARITY_KEYS:
            rows = getattr(self, key).values()
            out[key] = _mean([[sum(v) / len(v) for v in row] for row in rows] if key == "svcca_99_kept" else rows)
        out["retrieval"] = _mean(self.retrieval.values())
        return out

    def to_json(self) -> dict:
        return {**asdict(self), "mean": self.means(), "notes": MEASURE_NOTES}
