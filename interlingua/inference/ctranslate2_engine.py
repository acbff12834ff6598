"""Translation through CTranslate2 (`engine: ctranslate2`): the same model, CTranslate2's decoder.

A shared Transformer without a bridge (what `interlingua export ctranslate2` can export) is exported once
into a folder beside the model file, `<model>.ctranslate2/` (re-exported when the weights change: the
export records their SHA-256), and translated there with this package's own preprocessing,
tokenization, language tags, input truncation and per-sentence output limits, so that greedy output is
the native engine's token for token (tests/test_ctranslate2_engine.py). Beam search is CTranslate2's,
which stops a sentence as `beam_stop: top` does. `engine: auto` picks CTranslate2 where the model exports,
the package is installed, the device is the CPU and a short greedy run measures it faster here (cached
per machine, like `precision: auto`); everything else stays native. Sentence vectors always come from
the native network.
"""
from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from interlingua.data.vocab import Vocab, language_tag
from interlingua.errors import ConfigError
from interlingua.model_files.ctranslate2_export import exported_weights, unsupported_features, write_ctranslate2
from interlingua.model_files.load import beside_model
from interlingua.model_files.loaded import LoadedModel
from interlingua.precision import measure_speedup

log = logging.getLogger(__name__)

COMPUTE_TYPES = {"fp32": "float32", "int8": "int8", "bf16": "bfloat16"}
"""CTranslate2's compute type for each precision a model can be loaded in on the CPU."""

MIN_ENGINE_SPEEDUP = 1.05
"""`engine: auto` takes CTranslate2 only when its greedy pass is at least this much faster than ours."""


def export_folder_for(model_path: Path) -> Path:
    """Where a model's CTranslate2 export is cached: beside it, `<file stem or folder name>.ctranslate2`."""
    return beside_model(model_path, ".ctranslate2")


def why_not_ctranslate2(loaded: LoadedModel, device: torch.device, precision: str) -> str | None:
    """Why this model cannot translate through CTranslate2 here, or None where it can."""
    if device.type != "cpu":
        return f"the model runs on {device.type}; the CTranslate2 engine runs it on the CPU only"
    if precision not in COMPUTE_TYPES:
        return f"precision {precision} has no CTranslate2 counterpart on the CPU (fp32, int8, bf16)"
    lacking = unsupported_features(loaded.config.model, loaded.vocabs)
    if lacking:
        return "CTranslate2 cannot compute " + "; ".join(lacking)
    if loaded.provenance.source is None:
        return "the model was not loaded from a file, so its export has no place beside it"
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        return "the ctranslate2 package is not installed (pip install 'interlingua[ctranslate2]')"
    return None


class CTranslate2Engine:
    """A model's CTranslate2 export, opened for translation with this package's inputs and outputs."""

    def __init__(self, folder: Path, vocabs: dict[str, Vocab], target_in_source: bool, compute_type: str):
        import ctranslate2
        self.folder = folder
        self.compute_type = compute_type
        self._vocabs = vocabs
        self._target_in_source = target_in_source
        self._translator = ctranslate2.Translator(str(folder), device="cpu", compute_type=compute_type,
                                                  inter_threads=1, intra_threads=torch.get_num_threads())

    @classmethod
    def open(cls, loaded: LoadedModel, fingerprint: str, precision: str, target_in_source: bool
             ) -> CTranslate2Engine:
        """The export beside `loaded`'s file, written (or rewritten, when the weights changed) first."""
        assert loaded.provenance.source is not None
        folder = export_folder_for(loaded.provenance.source)
        if exported_weights(folder) != fingerprint:
            log.info("exporting the model for CTranslate2 into %s (once per weights)", folder)
            try:
                write_ctranslate2(loaded, folder, weights_sha256=fingerprint)
            except OSError as err:
                raise ConfigError(f"engine ctranslate2 caches the model's export in {folder}, which could not be "
                                  f"written ({err.strerror or err}): use engine native, or a model in a writable "
                                  f"folder") from None
        return cls(folder, loaded.vocabs, target_in_source, COMPUTE_TYPES[precision])

    def translate(self, seqs: Sequence[np.ndarray], src: str, tgt: str, beam: int, length_penalty: float,
                  max_len: int | None, max_len_cap: int, batch_size: int, no_repeat_ngram: int = 0) -> list[str]:
        """Each source (ids, already cut to `preprocess.max_len`) translated into `tgt`; an empty source gives
        "". The output limit is `max_len`, else per sentence 2 x its subwords (a source tag counted) + 10, at
        most `max_len_cap`, as in the native search: a batch runs to its longest limit and each output is
        cut to its own (greedy output is the same either way). `no_repeat_ngram`: CTranslate2's
        `no_repeat_ngram_size` (the native search's `no_repeat_ngram`)."""
        tag = language_tag(tgt)
        out = [""] * len(seqs)
        todo = [i for i, ids in enumerate(seqs) if len(ids)]
        if not todo:
            return out
        vocab = self._vocabs[src]
        sources = []
        for i in todo:
            pieces = [vocab.id_to_piece(int(x)) for x in seqs[i]]
            sources.append([tag, *pieces] if self._target_in_source else pieces)
        limits = [max_len if max_len is not None else min(2 * len(s) + 10, max_len_cap) for s in sources]
        prefix = {} if self._target_in_source else {"target_prefix": [[tag]] * len(sources)}
        results = self._translator.translate_batch(
            sources, beam_size=beam, length_penalty=length_penalty, min_decoding_length=0,
            max_decoding_length=max(limits), max_batch_size=batch_size, num_hypotheses=1,
            no_repeat_ngram_size=no_repeat_ngram, **prefix)
        target = self._vocabs[tgt]
        for i, limit, result in zip(todo, limits, results):
            ids = [target.piece_id(p) for p in result.hypotheses[0][:limit]]
            out[i] = target.decode(ids)
        return out


def measure_engine_speedup(native: Callable[[list[str]], Any], engine: Callable[[list[str]], Any], vocab: Vocab,
                           sentences: int = 48, length: int = 14, rounds: int = 3) -> float:
    """Native time over CTranslate2 time for greedy translation of the same pseudo-sentences (random
    subwords of the vocabulary), timed as `precision.measure_speedup` times two precisions: interleaved,
    after one warm-up pass each, medians of `rounds` passes."""
    rng = random.Random(0)
    ids = list(range(4, len(vocab)))
    texts = [vocab.decode([rng.choice(ids) for _ in range(length)]) for _ in range(sentences)]
    runs = {"native": native, "engine": engine}
    return measure_speedup(lambda which: runs[which](texts), rounds, pair=("native", "engine"))
