"""The model calls that requests can share, as hashable batch keys.

Two requests can go through one model call when everything but their texts is equal: the
operation and its settings. Each key below holds exactly those settings (normalised, so that
equivalent requests share a key) and knows how to run itself on a `Model` for a list of texts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from interlingua.inference.api import AttentionMaps, Model

Pooling = Literal["mean", "heads"]
"""The poolings `Model.encode` supports."""


@dataclass(frozen=True)
class TranslateCall:
    """`Model.translate(texts, src, tgt, beam, pivot, beam_stop)`; `pivot` is None unless it is a third language
    (a pivot equal to src or tgt is the direct translation, so such requests share a batch with it).

    Batching leaves every translation as it is alone: the search gives each sentence its own length
    limit (twice its source + 10 subwords), whatever it is batched with."""

    src: str
    tgt: str
    beam: int
    pivot: str | None
    beam_stop: str = "all"

    @classmethod
    def normalised(cls, src: str, tgt: str, beam: int, pivot: str | None, beam_stop: str = "all") -> "TranslateCall":
        """Greedy search has no stop rule: greedy requests share batches whatever they asked."""
        return cls(src, tgt, beam, None if pivot in (src, tgt) else pivot, beam_stop if beam > 1 else "all")

    def run(self, model: Model, texts: list[str]) -> list[str]:
        return model.translate(texts, self.src, self.tgt, beam=self.beam, pivot=self.pivot, beam_stop=self.beam_stop)


@dataclass(frozen=True)
class EncodedText:
    """One text's sentence vector ((d,) for mean pooling, (k, d) per head) and its subword count
    (0 where the call did not count)."""

    vector: np.ndarray
    tokens: int


@dataclass(frozen=True)
class EncodeCall:
    """`Model.encode(texts, lang, pooling)`; with `count_tokens`, also each text's subword count (the
    OpenAI-style usage), which costs a second tokenisation and so is only done where it is reported."""

    lang: str
    pooling: Pooling
    count_tokens: bool = False

    def run(self, model: Model, texts: list[str]) -> list[EncodedText]:
        vectors = model.encode(texts, self.lang, pooling=self.pooling)
        counts = [0] * len(texts)
        if self.count_tokens:
            # Blank texts have no tokens; leaving them out spares the log a second "empty input" warning.
            written = [i for i, text in enumerate(texts) if text.strip()]
            for i, ids in zip(written, model.token_ids([texts[i] for i in written], self.lang)):
                counts[i] = len(ids)
        return [EncodedText(vector, count) for vector, count in zip(vectors, counts)]


@dataclass(frozen=True)
class AttentionCall:
    """`Model.attention_maps(texts, lang)`: every layer is computed in the one pass anyway, so requests
    for different layers share a call and each answer picks its own layer."""

    lang: str

    def run(self, model: Model, texts: list[str]) -> list[AttentionMaps]:
        return model.attention_maps(texts, self.lang)


ModelCall = TranslateCall | EncodeCall | AttentionCall


def run_model_call(model: Model, call: ModelCall, texts: list[str]
                   ) -> list[str] | list[EncodedText] | list[AttentionMaps]:
    """The batcher's `run_batch`: one call on `model` for the texts of every request in the batch."""
    return call.run(model, texts)
