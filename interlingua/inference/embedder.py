"""`Embedder`: fixed-size sentence vectors from the attention bridge, as numpy arrays."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from interlingua.data.inputs import encode_inputs, length_sorted_batches
from interlingua.data.vocab import language_tag
from interlingua.errors import InterlinguaError
from interlingua.modules.checkpoint import LoadedModel, load_model


class Embedder:
    """Sentence vectors: `mean` is the mean of M's k columns (what the papers use downstream),
    `heads` the k columns themselves (n, k, d). A model without a bridge mean-pools H.

    >>> emb = Embedder("runs/demo/best.pt")
    >>> emb.encode(["a dog runs."], lang="en").shape
    (1, 512)
    """

    def __init__(self, checkpoint: str | Path | LoadedModel):
        self.loaded = checkpoint if isinstance(checkpoint, LoadedModel) else load_model(checkpoint)
        self.model = self.loaded.model.eval()
        self.vocabs = self.loaded.vocabs
        self.pre = self.loaded.config.preprocess

    @classmethod
    def untrained_like(cls, checkpoint: str | Path | LoadedModel, seed: int = 0) -> "Embedder":
        """The same architecture and vocabularies with freshly initialised weights: the
        reference point that shows what training bought."""
        loaded = load_model(checkpoint) if not isinstance(checkpoint, LoadedModel) else checkpoint
        fresh = load_model(loaded.payload_path) if loaded.payload_path else loaded
        torch.manual_seed(seed)
        for module in fresh.model.modules():
            if module is not fresh.model and hasattr(module, "reset_parameters"):
                module.reset_parameters()
        if fresh.model.cfg.param_init:
            fresh.model.reset_uniform(fresh.model.cfg.param_init)
        return cls(fresh)

    @property
    def languages(self) -> list[str]:
        return self.model.encoder_langs

    @property
    def dim(self) -> int:
        return self.model.bridge.output_dim

    def _prefix(self, lang: str) -> int | None:
        return self.vocabs[lang].piece_id(language_tag(lang)) if self.model.cfg.shared else None

    @torch.inference_mode()
    def encode(self, sentences: Sequence[str], lang: str, pooling: str = "mean", batch_size: int = 64) -> np.ndarray:
        """(n, d) float32 for `mean`, (n, k, d) for `heads`: one row per sentence, in order.

        An empty sentence (nothing left after normalisation, e.g. a blank line) gets a vector of
        zeros, the way `Translator` gives it an empty translation, and a warning is logged; a zero
        vector has no direction, so drop such rows before cosine similarities."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if pooling not in ("mean", "heads"):
            raise InterlinguaError(f"unknown pooling '{pooling}' (use 'mean' or 'heads')")
        bridge = self.model.bridge
        if pooling == "heads" and bridge.heads is None:
            raise InterlinguaError(f"pooling='heads' needs an attention-bridge model; this one has bridge: {bridge.kind}")
        self.model.encoder_for(lang)
        seqs = encode_inputs(sentences, self.vocabs[lang], self.pre, empty_output="their vectors are zeros")
        shape = (len(seqs), bridge.heads, self.dim) if pooling == "heads" else (len(seqs), self.dim)
        out = np.zeros(shape, dtype=np.float32)
        for idx, ids, lengths in length_sorted_batches(seqs, batch_size, self._prefix(lang)):
            bridged = self.model.encode(ids, lengths, lang)
            vecs = bridge.head_vectors(bridged) if pooling == "heads" else bridge.pooled(bridged)
            out[idx] = vecs.numpy()
        return out

    def attentions(self, sentences: Sequence[str], lang: str, batch_size: int = 64) -> list[np.ndarray]:
        """Bridge attention A (k, n_i) of each sentence over its n_i subwords (empty: (k, 0))."""
        return self._attentions(self._encode_for_attention(sentences, lang), lang, batch_size)

    def attention(self, sentence: str, lang: str) -> tuple[np.ndarray, list[str]]:
        """Bridge attention A (k, n) of one sentence and its subword pieces (for heat maps)."""
        seqs = self._encode_for_attention([sentence], lang)
        if not len(seqs[0]):
            raise InterlinguaError("cannot show attention for an empty sentence")
        att = self._attentions(seqs, lang, 1)[0]
        return att, [self.vocabs[lang].sp.id_to_piece(int(i)) for i in seqs[0]]

    def _encode_for_attention(self, sentences: Sequence[str], lang: str) -> list[np.ndarray]:
        if not self.model.bridge.attention_available:
            raise InterlinguaError(f"this model has no attention bridge (bridge: {self.model.bridge.kind})")
        self.model.encoder_for(lang)
        return encode_inputs(sentences, self.vocabs[lang], self.pre)

    @torch.inference_mode()
    def _attentions(self, seqs: list[np.ndarray], lang: str, batch_size: int) -> list[np.ndarray]:
        k = self.model.bridge.heads
        out = [np.zeros((k, 0), dtype=np.float32) for _ in seqs]
        for idx, ids, lengths in length_sorted_batches(seqs, batch_size, self._prefix(lang)):
            att = self.model.encode(ids, lengths, lang).attention.float().numpy()
            for row, i in enumerate(idx):
                out[i] = att[row, :, : int(lengths[row])]
        return out
