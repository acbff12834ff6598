"""`Translator`: text in, text out, for any (src, tgt) the model has modules for, zero-shot too."""
from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path

import torch
from tqdm import tqdm

from interlingua.data.inputs import encode_inputs, length_sorted_batches
from interlingua.data.vocab import language_tag
from interlingua.modules.checkpoint import LoadedModel, load_model
from interlingua.modules.search import beam_search, greedy_search

log = logging.getLogger(__name__)


class Translator:
    """Batched translation with greedy or beam search; output is detokenised text.

    >>> tr = Translator("runs/demo/best.pt")
    >>> tr.translate(["ein hund läuft."], src="de", tgt="fr", beam_size=5)

    It runs on torch's current thread count; setting that (`torch.set_num_threads`) is the caller's choice.
    """

    def __init__(self, checkpoint: str | Path | LoadedModel):
        self.loaded = checkpoint if isinstance(checkpoint, LoadedModel) else load_model(checkpoint)
        self.model = self.loaded.model.eval()
        self.vocabs = self.loaded.vocabs
        self.pre = self.loaded.config.preprocess

    @property
    def source_languages(self) -> list[str]:
        return self.model.encoder_langs

    @property
    def target_languages(self) -> list[str]:
        return self.model.decoder_langs

    @property
    def trained_directions(self) -> list[tuple[str, str]]:
        return self.loaded.directions

    def _check(self, src: str, tgt: str) -> None:
        self.model.encoder_for(src)
        self.model.decoder_for(tgt)

    @torch.inference_mode()
    def translate(self, sentences: Sequence[str], src: str, tgt: str, beam_size: int = 1,
                  length_penalty: float = 1.0, max_len: int | None = None, batch_size: int = 64,
                  pivot: str | None = None, progress: bool = False) -> list[str]:
        """Translate `sentences` from `src` to `tgt`; one output line per input line, in order
        (an empty input line gives an empty output line).

        With `pivot`, translate src -> pivot, then the pivot text -> tgt with the same settings.
        A pivot equal to `src` or `tgt` leaves nothing to go through: the translation is the
        direct src -> tgt one, and a note says so in the log.
        `beam_size` 1 is greedy search; `length_penalty` (beam search only) divides each
        hypothesis' log-probability by its length**length_penalty (see `beam_search_nbest`).
        """
        if beam_size < 1:
            raise ValueError(f"beam_size must be at least 1, got {beam_size}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if max_len is not None and max_len < 1:
            raise ValueError(f"max_len must be at least 1 (or None for the default), got {max_len}")
        if length_penalty < 0 or not math.isfinite(length_penalty):
            raise ValueError(f"length_penalty must be a finite number >= 0, got {length_penalty}")
        if pivot is not None:
            if pivot not in (src, tgt):
                self._check(src, pivot)
                self._check(pivot, tgt)
                mid = self.translate(sentences, src, pivot, beam_size, length_penalty, max_len, batch_size, progress=progress)
                return self.translate(mid, pivot, tgt, beam_size, length_penalty, max_len, batch_size, progress=progress)
            log.info("pivot '%s' is the %s language: translating %s->%s directly", pivot,
                     "source" if pivot == src else "target", src, tgt)
        self._check(src, tgt)
        seqs = encode_inputs(sentences, self.vocabs[src], self.pre)
        prefix = self.vocabs[src].piece_id(language_tag(tgt)) if self.model.cfg.shared else None
        out = [""] * len(seqs)
        n_batches = (sum(1 for s in seqs if len(s)) + batch_size - 1) // batch_size
        for idx, ids, lengths in tqdm(length_sorted_batches(seqs, batch_size, prefix), total=n_batches,
                                       desc=f"{src}->{tgt}", unit="batch", disable=not progress, leave=False):
            limit = max_len or min(int(lengths.max()) * 2 + 10, 4 * self.pre.max_len)
            decoder, state = self.model.start_decoding(self.model.encode(ids, lengths, src), tgt)
            if beam_size == 1:
                hyps = greedy_search(decoder, state, limit)
            else:
                hyps = beam_search(decoder, state, limit, beam_size, length_penalty)
            for i, h in zip(idx, hyps):
                out[i] = self.vocabs[tgt].decode(h)
        return out
