"""The model calls that requests can share, as hashable batch keys.

Two requests can go through one model call when everything but their texts is equal: the
operation and its settings. Each key below holds exactly those settings (normalised, so that
equivalent requests share a key) and knows how to run itself on a `Model` for a list of texts.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from interlingua.inference.api import AttentionMaps, Model
from interlingua.inference.representation import Representation

Pooling = Literal["mean", "heads"]
"""The poolings `Model.encode` supports."""


@dataclass(frozen=True)
class TranslateCall:
    """`Model.translate(texts, src, tgt, beam, pivot, beam_stop, no_repeat_ngram)`; `pivot` is None unless it is a
    third language (a pivot equal to src or tgt is the direct translation, so such requests share a batch with it).

    Batching leaves every translation as it is alone: the search gives each sentence its own length
    limit (twice its source + 10 subwords), whatever it is batched with."""

    src: str
    tgt: str
    beam: int
    pivot: str | None
    beam_stop: str = "all"
    no_repeat_ngram: int = 0

    @classmethod
    def normalised(cls, src: str, tgt: str, beam: int, pivot: str | None, beam_stop: str = "all",
                   no_repeat_ngram: int = 0) -> TranslateCall:
        """Greedy search has no stop rule: greedy requests share batches whatever they asked."""
        return cls(src, tgt, beam, None if pivot in (src, tgt) else pivot, beam_stop if beam > 1 else "all",
                   no_repeat_ngram)

    def run(self, model: Model, texts: list[str]) -> list[str]:
        return model.translate(texts, self.src, self.tgt, beam=self.beam, pivot=self.pivot, beam_stop=self.beam_stop,
                               no_repeat_ngram=self.no_repeat_ngram)


@dataclass(frozen=True)
class TranslateTargetsCall:
    """The texts into each of `tgts`, as `TranslateCall(src, tgt, beam, pivot, ...)` would answer per target,
    but encoded once: `Model.represent`, then `Model.generate` per target (a model whose source carries the
    target's tag, `Model.target_in_source`, is encoded once per target). With a third-language `pivot`, the
    first leg (src -> pivot) runs once and its output is encoded once for every other target; a target equal
    to the pivot gets that first leg, its direct translation. Each text's result: one translation per target."""

    src: str
    tgts: tuple[str, ...]
    beam: int
    pivot: str | None
    beam_stop: str = "all"
    no_repeat_ngram: int = 0

    @classmethod
    def normalised(cls, src: str, tgts: tuple[str, ...], beam: int, pivot: str | None,
                   beam_stop: str = "all", no_repeat_ngram: int = 0) -> TranslateTargetsCall:
        """As `TranslateCall.normalised`; a pivot no target goes through (the source, or every target) is none."""
        through = pivot is not None and pivot != src and any(t != pivot for t in tgts)
        return cls(src, tuple(tgts), beam, pivot if through else None, beam_stop if beam > 1 else "all",
                   no_repeat_ngram)

    def run(self, model: Model, texts: list[str]) -> list[tuple[str, ...]]:
        settings = {"beam": self.beam, "beam_stop": self.beam_stop, "no_repeat_ngram": self.no_repeat_ngram}
        if self.pivot is None:
            out = translate_into(model, texts, self.src, self.tgts, **settings)
        else:
            middle = translate_into(model, texts, self.src, (self.pivot,), **settings)[self.pivot]
            out = translate_into(model, middle, self.pivot, [t for t in self.tgts if t != self.pivot], **settings)
            out[self.pivot] = middle
        return list(zip(*(out[t] for t in self.tgts)))


def translate_into(model: Model, texts: list[str], src: str, tgts: Sequence[str], **settings: Any
                   ) -> dict[str, list[str]]:
    """Each target's translations of `texts`, from one representation where it serves every target."""
    out: dict[str, list[str]] = {}
    shared: Representation | None = None
    for tgt in dict.fromkeys(tgts):
        rep = shared if shared is not None else model.represent(texts, src, tgt=tgt)
        if rep.tgt is None:
            shared = rep
        out[tgt] = model.generate(rep, tgt, **settings)
    return out


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


ModelCall = TranslateCall | TranslateTargetsCall | EncodeCall | AttentionCall


def run_model_call(model: Model, call: ModelCall, texts: list[str]
                   ) -> list[str] | list[tuple[str, ...]] | list[EncodedText] | list[AttentionMaps]:
    """The batcher's `run_batch`: one call on `model` for the texts of every request in the batch."""
    return call.run(model, texts)
