"""The public Python API: `load(path, device)` -> a `Model` that translates, embeds and shows attention.

>>> import interlingua
>>> model = interlingua.load("runs/demo/best.pt")            # device="cpu" | "auto" | "cuda" | "cuda:1" | ...
>>> model.languages.trained, model.languages.zero_shot      # which directions were trained, which are zero-shot
>>> model.translate(["ein hund läuft."], src="de", tgt="fr", beam=5)
>>> rep = model.represent(["ein hund läuft."], lang="de")  # encoded once (the bridge's output) ...
>>> model.generate(rep, tgt="fr"), model.generate(rep, tgt="en", beam=5)  # ... written out in any target
>>> model.encode(["a dog runs."], lang="en").shape           # (1, d) float32 sentence vectors
(1, 512)
>>> model.attention_maps(["a dog runs."], lang="en")[0].tokens  # what the bridge and the encoder attend to

The command line, the evaluations and the analyses only call this; each step inside (tokenising
user text, the language-tag prefix, encode -> search -> detokenise, pooling) lives once, below
(`interlingua.data.inputs`, `interlingua.data.vocab.source_prefix`, `interlingua.modules.search`'s
`encoded_batches` and `decode_batch`, `Bridge.pooled`). It runs on torch's current thread count; setting
that is the caller's choice.
"""
from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from interlingua.arguments import (
    COUNT,
    ENGINES,
    NON_NEGATIVE_INT,
    POOLINGS,
    PRECISIONS,
    check_choice,
    check_language,
    check_search,
)
from interlingua.config import ExperimentConfig, PreprocessConfig
from interlingua.data.directions import Direction, synthetic_directions
from interlingua.data.inputs import length_sorted_batches, overlong_inputs, tokenize_inputs
from interlingua.data.shortlist import DirectionTable, Shortlist
from interlingua.data.vocab import Vocab, source_prefix
from interlingua.errors import ArgumentTypeError, ConfigError, InterlinguaError, LanguageError
from interlingua.inference.decoding_probe import decoding_bf16_speedup
from interlingua.inference.int8_probe import auto_int8
from interlingua.inference.representation import (
    Representation,
    check_representation,
    generate_text,
    represent_ids,
    weights_fingerprint,
)
from interlingua.model_files.load import load_model
from interlingua.model_files.loaded import LoadedModel
from interlingua.modules.base import BridgeOutput, Decoder, Encoder
from interlingua.modules.int8 import is_quantized, quantize_network
from interlingua.modules.model import TranslationNetwork
from interlingua.modules.packed_linear import output_kernel_setting, pack_output_layers, packed_output_layers
from interlingua.precision import model_workload
from interlingua.runtime import Runtime, resolve_device, resolve_device_precision

if TYPE_CHECKING:
    from interlingua.inference.ctranslate2_engine import CTranslate2Engine

log = logging.getLogger(__name__)

DirectRoute = Literal["supervised", "zero-shot"]
"""How a direct (unpivoted) translation goes: a trained direction or a zero-shot one."""


@dataclass(frozen=True)
class Languages:
    """What a model reads and writes. Iterating (or `in`) goes over the source languages, the ones
    it can embed, so a `Model` is a sentence encoder for the evaluation suite as it is."""

    sources: tuple[str, ...]
    """Languages with an encoder (what `translate` reads and `encode` embeds)."""
    targets: tuple[str, ...]
    """Languages with a decoder (what `translate` writes)."""
    trained: tuple[Direction, ...]
    """Directions the model was trained on (real parallel data)."""
    zero_resource: tuple[Direction, ...] = ()
    """The zero-shot directions trained on synthetic pairs only (`train.synthetic`): still no real parallel data."""

    @property
    def zero_shot(self) -> tuple[Direction, ...]:
        """Directions with an encoder and a decoder that were never trained together."""
        done = set(self.trained)
        return tuple((s, t) for s in self.sources for t in self.targets if s != t and (s, t) not in done)

    def route(self, src: str, tgt: str) -> DirectRoute:
        """`supervised` where src -> tgt was trained, `zero-shot` where it never was."""
        return "supervised" if (src, tgt) in set(self.trained) else "zero-shot"

    def pivot(self, src: str, tgt: str) -> str | None:
        """A third language to translate src -> tgt through with two trained legs (src -> p, p -> tgt),
        the alternative to a zero-shot direction: of the candidates, the one in the most trained
        directions (the hub of an English-centred model: English), then the first by name; None
        where no language has both legs."""
        done = set(self.trained)
        hub = Counter(lang for direction in done for lang in direction)
        legs = [p for p in self.sources if p not in (src, tgt) and (src, p) in done and (p, tgt) in done]
        return min(legs, key=lambda p: (-hub[p], p), default=None)

    def __iter__(self) -> Iterator[str]:
        return iter(self.sources)

    def __contains__(self, lang: object) -> bool:
        return lang in self.sources

    def __len__(self) -> int:
        return len(self.sources)


@dataclass(frozen=True)
class AttentionMaps:
    """What one sentence's encoder and bridge attend to, for heat maps. Columns (and self-attention
    rows) are `tokens`: the sentence's subwords, after the <2xx> tag where a shared model prepends one."""

    tokens: list[str]
    bridge: np.ndarray | None
    """(k, n) bridge attention A, each head's row a distribution over the tokens; None without a bridge
    that attends over the source."""
    self_attention: np.ndarray | None
    """(layers, heads, n, n) the encoder's self-attention, layer 1 first, row p what token p attends to;
    None for an encoder without self-attention (a BiLSTM), and where `attention_maps` was asked for the bridge only."""


@dataclass(frozen=True)
class Kinds:
    """The registered kind in each slot of a model (the config's `type`s): what reports and the service
    say a model is made of, and what decides which attention it can show."""

    encoder: str
    """e.g. bilstm, transformer."""
    bridge: str
    """e.g. attention, none, ntdv."""
    decoder: str
    """e.g. lstm, transformer."""


def load(path: str | Path, device: str | torch.device = "auto", precision: str = "fp32",
         engine: str = "native") -> Model:
    """A checkpoint (a `.pt` file, or a model folder from `interlingua export folder` / `Model.save`, read
    without unpickling anything) ready to translate and embed on `device` ("auto" = CUDA when available, else
    MPS, else the CPU; "cpu", "cuda", "cuda:N", "mps"); no optimizer or training state is kept in memory.
    `precision` of translation and sentence vectors: `fp32` (default), `bf16`, `fp16` (CUDA only), `int8`
    (CPU only) or `auto` (see `Model.load`); `engine` of translation: `native`, `ctranslate2` or `auto`
    (see `Model.load`)."""
    return Model.load(path, device, precision, engine)


class Model:
    """A trained (or freshly initialised) translation model with its vocabularies, for inference."""

    def __init__(self, loaded: LoadedModel, precision: str = "fp32"):
        self._loaded = loaded
        self._network: TranslationNetwork = loaded.network.eval()
        if precision == "int8" and not is_quantized(self._network):
            quantize_network(self._network)  # in place: the quantized layers' fp32 weights are not kept
        if precision in ("fp32", "int8") and self._network.device.type == "cpu":
            # where measured faster; same Parameters. In int8, the output layers it left in fp32 (packed fp32 as fast)
            pack_output_layers(self._network, output_kernel_setting())
        self._vocabs: dict[str, Vocab] = loaded.vocabs
        self._pre = loaded.config.preprocess
        self._runtime = Runtime(self._network.device, precision)
        self._shortlist: Shortlist | None = None
        self._fingerprint: str | None = None
        self._engine: CTranslate2Engine | None = None

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "auto", precision: str = "fp32",
             engine: str = "native") -> Model:
        """`precision`: `fp32` (default, the numbers every result here was made with; on a CPU the decoders'
        output layers run oneDNN's prepacked fp32 product at the row counts where it measures faster here, the
        same products to rounding: `output_kernel`); `bf16` (autocast: on CPUs
        with AMX or AVX512-BF16 and on GPUs, faster, with outputs that may differ in places); `fp16` (CUDA GPUs);
        `int8` (CPUs: the big linear layers, output layers included, with int8 weights and per-row int8 inputs, each
        layer in the int8 kernel measured fastest here where one is faster than fp32, `interlingua.modules.int8`;
        outputs may differ in places; refused on other devices, for a model with nothing big enough to quantize and
        where no int8 kernel is faster than fp32 at its layers); `auto`: bf16 or fp16 on a GPU, and on a CPU with
        native bf16 bf16 only where timing this model's own greedy and beam search in both precisions measures it
        faster here (cached per machine and model), else fp32; then, on a CPU, int8 instead only where its recorded
        check (`interlingua check-int8`, `interlingua.inference.int8_probe.check_int8`, in `<model>.int8.json`
        beside it) found its dev BLEU within 0.3 of fp32's and it decodes measurably faster still (cached
        likewise). Without such a record `auto` never picks int8: loading reads no corpus.

        `engine`: what translates. `native` (default): this package's search. `ctranslate2`: CTranslate2, on
        the model's export cached beside it (`<model>.ctranslate2/`, written on first use and again when the
        weights change) with this package's preprocessing, tags and limits, so greedy output is the native
        one token for token; beam search is CTranslate2's (it stops a sentence as `beam_stop="top"` does). Only
        shared Transformers without a bridge, on the CPU, in fp32, int8 or bf16 (anything else is one error
        saying why); sentence vectors stay native. `auto`: CTranslate2 where that is possible and a short greedy
        run measures it faster here (cached per machine and model), else native."""
        check_choice("engine", engine, ENGINES)
        model = cls._load(path, device, precision)
        return model._open_engine(engine) if engine != "native" else model

    @classmethod
    def _load(cls, path: str | Path, device: str | torch.device, precision: str) -> Model:
        if not isinstance(path, (str, Path)):
            raise ArgumentTypeError(f"path: expected a checkpoint file or model folder (a str or Path), got {path!r}")
        if not isinstance(device, (str, torch.device)):
            raise ArgumentTypeError(f"device: expected a device name or torch.device, got {device!r}")
        check_choice("precision", precision, PRECISIONS)  # before a possibly long load
        dev = device if isinstance(device, torch.device) else resolve_device(device)
        loaded = load_model(path, dev)
        if precision != "auto":
            return cls(loaded, resolve_device_precision(precision, dev))
        first = loaded.network.encoder_langs[0]
        workload = "decoding " + model_workload(loaded.config.model.model_dump(mode="json"),
                                                {lang: len(v) for lang, v in loaded.vocabs.items()}, 32)
        probe = lambda: decoding_bf16_speedup(loaded.network, len(loaded.vocabs[first]))  # noqa: E731
        baseline = resolve_device_precision(precision, dev, probe, workload)
        quantized = auto_int8(loaded, baseline, workload) if dev.type == "cpu" else None
        return cls(quantized, "int8") if quantized is not None else cls(loaded, baseline)

    def _open_engine(self, engine: str) -> Model:
        """Translate through CTranslate2 from now on (`engine` ctranslate2), or where it measures faster (auto)."""
        from interlingua.inference.ctranslate2_engine import (
            MIN_ENGINE_SPEEDUP,
            CTranslate2Engine,
            measure_engine_speedup,
            why_not_ctranslate2,
        )
        from interlingua.precision import cached_speedup
        why_not = why_not_ctranslate2(self._loaded, self._runtime.device, self._runtime.precision)
        if why_not is not None:
            if engine == "ctranslate2":
                raise ConfigError(f"engine ctranslate2: {why_not}")
            log.info("engine auto -> native (%s)", why_not)
            return self
        opened = CTranslate2Engine.open(self._loaded, self.fingerprint, self._runtime.precision, self.target_in_source)
        if engine == "auto":
            src, tgt = self._loaded.directions[0]
            vocab = self._vocabs[src]
            workload = (f"engine ctranslate2 {opened.compute_type} " + model_workload(
                self._loaded.config.model.model_dump(mode="json"), {lang: len(v) for lang, v in self._vocabs.items()},
                48))
            native = lambda texts: self.translate(texts, src, tgt)  # noqa: E731
            through = lambda texts: self._engine_translate(opened, texts, src, tgt)  # noqa: E731
            speedup = cached_speedup(workload, lambda: measure_engine_speedup(native, through, vocab),
                                     what="CTranslate2 (against the native engine)")
            if speedup < MIN_ENGINE_SPEEDUP:
                log.info("engine auto -> native (CTranslate2 %.2fx the native speed here)", speedup)
                return self
            log.info("engine auto -> ctranslate2 (%.2fx the native speed here)", speedup)
        self._engine = opened
        return self

    @property
    def engine(self) -> str:
        """What translates: `native` or `ctranslate2` (see `Model.load`)."""
        return "native" if self._engine is None else "ctranslate2"

    def _engine_translate(self, engine: CTranslate2Engine, texts: Sequence[str], src: str, tgt: str, beam: int = 1,
                          length_penalty: float = 1.0, max_len: int | None = None, batch_size: int = 64,
                          no_repeat_ngram: int = 0) -> list[str]:
        seqs = tokenize_inputs(texts, self._vocabs[src], self._pre, empty_output="their translation is empty")
        return engine.translate(seqs, src, tgt, beam, length_penalty, max_len, 4 * self._pre.max_len, batch_size,
                                no_repeat_ngram)

    def save(self, folder: str | Path) -> Path:
        """Write this model as a model folder (what `interlingua export folder` writes): config.json,
        model.safetensors, one sentencepiece model per language and a README.md model card; `load(folder)`
        reads it back without unpickling anything, for the same translations and vectors. Written whole or
        not at all; `folder` must be new, empty or a previous export (which it replaces). Returns `folder`.
        A model loaded in int8 holds no fp32 weights for its quantized layers, so it refuses (load it in fp32
        to save it)."""
        from interlingua.model_files.folder import write_folder
        self._check_fp32_weights("saved")
        return write_folder(self._loaded, folder)

    def export_ctranslate2(self, folder: str | Path, quantization: str | None = None) -> Path:
        """Write this model as a CTranslate2 model folder (what `interlingua export ctranslate2` writes):
        CTranslate2's model.bin, config.json and vocabulary, the sentencepiece model, interlingua.json and a
        README.md saying how to call it. Shared Transformer models without a bridge only (anything else
        raises `UnsupportedModelError` naming what CTranslate2 lacks); their greedy output in CTranslate2 is
        this model's. `quantization`: None (float32) or a CTranslate2 weight type (`int8`, `int16`,
        `float16`, `bfloat16`, ...). Written whole or not at all; `folder` must be new, empty or a previous
        CTranslate2 export. Needs `pip install 'interlingua[ctranslate2]'`. Returns `folder`. A model loaded
        in int8 refuses, as `save` does (load it in fp32 and give `quantization="int8"`)."""
        from interlingua.model_files.ctranslate2_export import write_ctranslate2
        self._check_fp32_weights("exported")
        return write_ctranslate2(self._loaded, folder, quantization)

    def untrained_like(self, seed: int = 0) -> Model:
        """The same architecture, vocabularies and device with freshly initialised weights: the
        reference point that shows what training bought."""
        loaded = self._loaded
        source = loaded.provenance.source
        if not source:
            self._check_fp32_weights("re-initialised")
        fresh = load_model(source, self.device) if source else loaded
        torch.manual_seed(seed)
        for module in fresh.network.modules():
            if module is not fresh.network and hasattr(module, "reset_parameters"):
                module.reset_parameters()  # type: ignore[operator]  # torch types attributes as Tensor | Module
        if fresh.network.cfg.param_init:
            fresh.network.reset_uniform(fresh.network.cfg.param_init)
        # what the trained weights were (step, dev BLEU, the files beside them) does not describe these
        provenance = dataclasses.replace(fresh.provenance, source=None, step=None, training=None, recorded=None,
                                         exported_from=None, averaged_from=())
        return Model(dataclasses.replace(fresh, provenance=provenance), self._runtime.precision)

    def _check_fp32_weights(self, what: str) -> None:
        """Refuse what needs the fp32 weights of a model whose linear layers were quantized (precision int8)."""
        if is_quantized(self._network):
            raise InterlinguaError(f"this model was loaded in precision int8, which keeps int8 weights only: it cannot "
                                   f"be {what}; load it with precision fp32 for that")

    @property
    def device(self) -> torch.device:
        return self._network.device

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the weights (hex): the identity a `Representation` carries, so that `generate` writes out
        only representations of these weights (the same file loaded again has the same fingerprint). Worked
        out once, on first use."""
        if self._fingerprint is None:
            self._fingerprint = weights_fingerprint(self._network)
        return self._fingerprint

    @property
    def runtime(self) -> Runtime:
        """Where and in which precision translation and sentence vectors run (weights stay fp32)."""
        return self._runtime

    @property
    def output_kernel(self) -> str:
        """What computes the decoders' output layers: `packed` where oneDNN's prepacked fp32 product runs them at
        the row counts measured faster here (fp32 on a CPU, and in int8 an output layer that runs as fast packed in
        fp32 as in int8; `interlingua.modules.packed_linear`; the environment variable
        `INTERLINGUA_OUTPUT_KERNEL=default` turns it off), else `default` (nn.Linear's, or int8's)."""
        return "packed" if packed_output_layers(self._network) else "default"

    @property
    def languages(self) -> Languages:
        trained = tuple((s, t) for s, t in self._loaded.directions)
        languages = Languages(tuple(self._network.encoder_langs), tuple(self._network.decoder_langs), trained)
        synthetic = self._loaded.config.train.synthetic
        if not synthetic.modes:
            return languages
        made = synthetic_directions(synthetic.directions, list(languages.zero_shot))
        return dataclasses.replace(languages, zero_resource=tuple(d for d in made if d in languages.zero_shot))

    @property
    def dim(self) -> int:
        """Size of a sentence vector (and of each head's vector)."""
        return self._network.bridge.vector_dim

    @property
    def heads(self) -> int | None:
        """k, the bridge's number of heads (None where the memory follows the sentence length)."""
        return self._network.bridge.heads

    # --- what the model is -------------------------------------------------------------------

    @property
    def kinds(self) -> Kinds:
        """The encoder, bridge and decoder kinds it was built with."""
        net = self._network
        return Kinds(net.encoder_for(net.encoder_langs[0]).kind, net.bridge.kind,
                     net.decoder_for(net.decoder_langs[0]).kind)

    @property
    def config(self) -> ExperimentConfig:
        """The experiment config the model was trained with (its corpus, preprocessing, architecture), as
        a copy: changing it changes nothing here."""
        return self._loaded.config.model_copy(deep=True)

    @property
    def preprocess(self) -> PreprocessConfig:
        """How text becomes subwords (normalisation, `max_len`), as a copy: what tokenising text the way
        this model reads it needs (`interlingua.data.document_text.tokenize_documents`)."""
        return self._pre.model_copy(deep=True)

    @property
    def vocabs(self) -> Mapping[str, Vocab]:
        """Each language's subword vocabulary (one and the same object for every language of a shared model)."""
        return MappingProxyType(self._vocabs)

    @property
    def step(self) -> int | None:
        """The training step the weights were saved at; None where the file holds no training state (and
        for `untrained_like`)."""
        return self._loaded.provenance.step

    @property
    def path(self) -> Path | None:
        """The checkpoint file or model folder the weights were read from; None for `untrained_like`."""
        return self._loaded.provenance.source

    def check_source(self, lang: str) -> None:
        """Raise `LanguageError` naming `lang` and the source languages where the model has no encoder
        for it: the check every method that reads `lang` text makes first, for callers that want it
        before any work (a service's request, an evaluation's language list). A `lang` that is no
        string is an `ArgumentTypeError`."""
        check_language("lang", lang)
        self._network.encoder_for(lang)

    def check_target(self, lang: str) -> None:
        """Raise `LanguageError` naming `lang` and the target languages where the model has no decoder
        for it (see `check_source`)."""
        check_language("lang", lang)
        self._network.decoder_for(lang)

    def max_source_length(self, lang: str) -> int | None:
        """The most positions `lang`'s encoder reads, a shared model's language tag included (a learned
        position table ends somewhere); None where it reads any length. Sentences are cut well below it
        (`preprocess.max_len`); this bounds what longer inputs, whole documents, may keep."""
        return self._network.encoder_for(lang).max_length

    @property
    def bridge_attention(self) -> bool:
        """Whether the bridge attends over the source, so `attention_maps` has its weights A to show."""
        return self._network.bridge.attention_available

    def check_attention(self) -> None:
        """Raise `InterlinguaError` where the model shows no attention at all: neither an attention
        bridge nor an encoder with self-attention (a BiLSTM without a bridge)."""
        if not self.bridge_attention and not self.self_attention_layers:
            kinds = self.kinds
            raise InterlinguaError(f"this model shows no attention: its bridge ({kinds.bridge}) does not attend "
                                   f"over the source and its encoder ({kinds.encoder}) has no self-attention")

    # --- translation -------------------------------------------------------------------------

    @torch.inference_mode()
    def translate(self, texts: Sequence[str], src: str, tgt: str, beam: int = 1, pivot: str | None = None,
                  length_penalty: float = 1.0, max_len: int | None = None, batch_size: int = 64,
                  progress: bool = False, beam_stop: str = "all", workers: int = 1,
                  no_repeat_ngram: int = 0) -> list[str]:
        """Translate `texts` from `src` to `tgt`; one output line per input line, in order (an
        empty input line gives an empty output line): `represent`, then `generate`.

        With `pivot`, translate src -> pivot, then the pivot text -> tgt with the same settings.
        A pivot equal to `src` or `tgt` leaves nothing to go through: the translation is the
        direct src -> tgt one, and a note says so in the log.
        `beam` 1 is greedy search; `length_penalty` (beam search only) divides each hypothesis'
        log-probability by its length**length_penalty (see `modules.search.beam_search_nbest`).
        `max_len` caps the output subwords (default: twice each sentence's own source length + 10).
        `beam_stop`: when beam search is done with a sentence: `all` (default), once it has `beam`
        finished hypotheses; `top`, also once the best candidate of a step is finished (OpenNMT-py's
        rule: faster, and on Multi30k dev 0.2-0.4 BLEU lower with length_penalty 1).
        `workers`: the batches are split into that many streams decoded side by side, each in its own thread,
        torch's threads shared out among them while it runs (`interlingua.inference.representation.in_threads`);
        each stream decodes the tails of its batches together (`modules.search`). The output is the same. On 2
        cores, two workers ran greedy 0.97-1.12x as fast as one (two runs), beam 5 about as fast
        (docs/results/speed.md).
        `no_repeat_ngram` n > 0: no n-gram appears twice in an output (the token that would repeat one is never
        chosen: fairseq's `--no-repeat-ngram-size`, CTranslate2's `no_repeat_ngram_size`), which ends the loops a
        decoder falls into (zero-shot directions most); 0 (default): off.
        """
        check_search(beam, length_penalty, max_len, batch_size, beam_stop)
        COUNT.check("workers", workers)
        NON_NEGATIVE_INT.check("no_repeat_ngram", no_repeat_ngram)
        for name, lang in (("src", src), ("tgt", tgt), *((("pivot", pivot),) if pivot is not None else ())):
            check_language(name, lang)
        settings: dict[str, Any] = dict(beam=beam, length_penalty=length_penalty, max_len=max_len,
                                        batch_size=batch_size, progress=progress, beam_stop=beam_stop,
                                        workers=workers, no_repeat_ngram=no_repeat_ngram)
        if pivot is not None:
            if pivot not in (src, tgt):
                self._check(src, pivot)
                self._check(pivot, tgt)
                return self.translate(self.translate(texts, src, pivot, **settings), pivot, tgt, **settings)
            log.info("pivot '%s' is the %s language: translating %s->%s directly", pivot,
                     "source" if pivot == src else "target", src, tgt)
        self._check(src, tgt)
        if self._engine is not None and self._shortlist is None:
            return self._engine_translate(self._engine, texts, src, tgt, beam, length_penalty, max_len, batch_size,
                                          no_repeat_ngram)
        return self.generate(self.represent(texts, src, batch_size, tgt=tgt), tgt, **settings)

    @property
    def target_in_source(self) -> bool:
        """Whether the encoder reads the target language (a shared model with `model.tag_position:
        source_prefix` puts its <2xx> tag before the source): then a representation serves one target."""
        return self._network.cfg.shared and self._network.cfg.tag_position == "source_prefix"

    @torch.inference_mode()
    def represent(self, texts: Sequence[str], lang: str, batch_size: int = 64, *,
                  tgt: str | None = None) -> Representation:
        """What the decoders read for each of `texts` (in `lang`), to write it out in any target with
        `generate` without encoding it again: the bridge's output (the attention bridge's M, NTDV's
        memory; the encoder states without a bridge) and its mask, per text, on the model's device.

        A model whose source carries the target's tag (`target_in_source`) encodes for one target:
        give it as `tgt` (the representation then refuses any other). Elsewhere `tgt` is optional and
        the representation serves every target. An empty text gets an empty memory (and "" from
        `generate`)."""
        COUNT.check("batch_size", batch_size)
        self.check_source(lang)
        if tgt is not None:
            self.check_target(tgt)
        elif self.target_in_source:
            raise LanguageError("this model puts the target language's tag before the source (model.tag_position: "
                                "source_prefix), so what it encodes depends on the target: give represent(..., "
                                "tgt=...)")
        seqs = tokenize_inputs(texts, self._vocabs[lang], self._pre, empty_output="their representation and "
                                                                                "translation are empty")
        with self._runtime.autocast():
            return represent_ids(self._network, self._vocabs, seqs, lang, tgt if self.target_in_source else None,
                                 batch_size, self.fingerprint)

    @torch.inference_mode()
    def generate(self, representation: Representation, tgt: str, beam: int = 1, length_penalty: float = 1.0,
                 max_len: int | None = None, batch_size: int = 64, beam_stop: str = "all",
                 progress: bool = False, workers: int = 1, no_repeat_ngram: int = 0) -> list[str]:
        """`representation` (from `represent`) written out in `tgt`, one line per text, in order, with
        the same search and settings as `translate` (which is `represent` then this): the same output,
        byte for byte, where `batch_size` is the one `represent` ran with. A representation of a
        `target_in_source` model made for another target raises `TargetMismatchError`; anything else than
        this model's own representation (a tensor, another model's, memory of another width, dtype or device,
        NaN memory) raises `ArgumentTypeError` / `ArgumentError` saying what is wrong, before any search.
        `workers`: batches decoded at once, each in its own thread with a share of torch's threads, and
        `no_repeat_ngram`: as in `translate`."""
        check_representation(representation, self._network, self.fingerprint, self._memory_dtypes())
        check_search(beam, length_penalty, max_len, batch_size, beam_stop)
        COUNT.check("workers", workers)
        NON_NEGATIVE_INT.check("no_repeat_ngram", no_repeat_ngram)
        check_language("tgt", tgt)
        self.check_target(tgt)
        with self._runtime.autocast():
            return generate_text(self._network, self._vocabs, representation, tgt, batch_size=batch_size, beam=beam,
                                 length_penalty=length_penalty, max_len=max_len, max_len_cap=4 * self._pre.max_len,
                                 beam_stop=beam_stop, progress=progress,
                                 shortlist=self._shortlist_for(representation, tgt), workers=workers,
                                 no_repeat_ngram=no_repeat_ngram, context=self._runtime.autocast)

    def _memory_dtypes(self) -> tuple[torch.dtype, ...]:
        """What memory the decoders read: float32, and under bf16 / fp16 autocast what the encoder gives there."""
        precision = self._runtime.precision
        return (torch.float32,) + ((torch.bfloat16,) if precision == "bf16" else
                                   (torch.float16,) if precision == "fp16" else ())

    # --- lexical shortlist -------------------------------------------------------------------

    @property
    def shortlist(self) -> Shortlist | None:
        """The lexical shortlist translation uses (`use_shortlist`), or None: the whole vocabulary."""
        return self._shortlist

    def use_shortlist(self, shortlist: Shortlist | str | Path | None) -> Model:
        """Translate with a lexical shortlist (`interlingua.data.shortlist`; a file from `interlingua shortlist`
        or `build_shortlist`) from now on, or with the whole vocabulary again (None). Each sentence's output
        layer is then restricted to the target subwords its source subwords make likely plus the frequent
        ones: faster, and its output can differ from the full vocabulary's. Directions the shortlist has no
        table for decode over the whole vocabulary. Returns the model."""
        if shortlist is not None and not isinstance(shortlist, Shortlist):
            shortlist = Shortlist.load(shortlist)
        if shortlist is not None:
            if type(self._network.decoder_for(self._network.decoder_langs[0])).step_states is Decoder.step_states:
                raise ConfigError(f"decoder kind '{self.kinds.decoder}' cannot decode with a shortlist "
                                  "(it has no step_states)")
            for (src, tgt), table in shortlist.tables.items():
                if src in self._vocabs and tgt in self._vocabs and (
                        table.table.shape[0] != len(self._vocabs[src])
                        or (table.frequent.size and int(table.frequent.max()) >= len(self._vocabs[tgt]))):
                    raise ConfigError(f"the shortlist's {src}->{tgt} table does not fit this model's vocabularies "
                                      f"({table.table.shape[0]} source ids, the model has {len(self._vocabs[src])}): "
                                      "it was built for another model")
        self._shortlist = shortlist
        return self

    def _shortlist_for(self, representation: Representation, tgt: str) -> DirectionTable | None:
        if self._shortlist is None:
            return None
        return self._shortlist.direction(representation.src, tgt)

    def _check(self, src: str, tgt: str) -> None:
        self.check_source(src)
        self.check_target(tgt)

    # --- sentence vectors and attention ---------------------------------------------------------

    @torch.inference_mode()
    def encode(self, texts: Sequence[str], lang: str, pooling: str = "mean", batch_size: int = 64) -> np.ndarray:
        """Sentence vectors, one row per text, in order: `mean` (n, d) float32, the mean of the
        bridge's k columns (what the papers use downstream; a model without a bridge mean-pools H),
        or `heads` (n, k, d), the k columns themselves.

        An empty sentence (nothing left after normalisation, e.g. a blank line) gets a vector of
        zeros, the way `translate` gives it an empty translation, and a warning is logged; a zero
        vector has no direction, so drop such rows before cosine similarities."""
        COUNT.check("batch_size", batch_size)
        check_choice("pooling", pooling, POOLINGS)
        bridge = self._network.bridge
        if pooling == "heads" and bridge.heads is None:
            raise InterlinguaError("pooling='heads' needs an attention-bridge model; "
                                   f"this one has bridge: {bridge.kind}")
        self.check_source(lang)
        seqs = tokenize_inputs(texts, self._vocabs[lang], self._pre, empty_output="their vectors are zeros")
        return self.encode_ids(seqs, lang, batch_size, pooling)

    @torch.inference_mode()
    def encode_ids(self, seqs: Sequence[np.ndarray], lang: str, batch_size: int = 64, pooling: str = "mean",
                   max_tokens: int | None = None) -> np.ndarray:
        """`encode` for texts already turned into subword ids (no language tag; any length the
        encoder takes): documents, sentences cut at another length. Empty sequences get zeros.
        `max_tokens` caps a batch's padded size (long documents go in smaller batches)."""
        bridge = self._network.bridge
        shape: tuple[int, ...] = (len(seqs), self.dim)
        if pooling == "heads":
            assert bridge.heads is not None  # `encode` accepts pooling 'heads' only from a bridge with heads
            shape = (len(seqs), bridge.heads, self.dim)
        out = np.zeros(shape, dtype=np.float32)
        with self._runtime.autocast():
            for idx, _, bridged in self._bridged(list(seqs), lang, batch_size, max_tokens):
                vecs = bridge.head_vectors(bridged) if pooling == "heads" else bridge.pooled(bridged)
                out[idx] = vecs.float().cpu().numpy()
        return out

    # --- inside the encoder ------------------------------------------------------------------

    def truncated(self, texts: Sequence[str], lang: str) -> list[int]:
        """The indices of `texts` longer than the model reads (`preprocess.max_len` subwords): `translate`,
        `represent` and `encode` take only their first `max_len` subwords (and log it); split such texts into
        sentences first. For callers that must tell their own users (the service's `truncated`)."""
        self.check_source(lang)
        return overlong_inputs(texts, self._vocabs[lang], self._pre)

    def token_ids(self, texts: Sequence[str], lang: str) -> list[np.ndarray]:
        """The subword ids each text becomes (normalised and truncated as in training), without the
        language tag a shared model prepends: the tokens whose states `encoder_layers` returns."""
        self.check_source(lang)
        return tokenize_inputs(texts, self._vocabs[lang], self._pre, empty_output="they have no token states")

    @torch.inference_mode()
    def encoder_layers(self, texts: Sequence[str], lang: str, batch_size: int = 64) -> list[np.ndarray]:
        """Per-layer token states of each text, in order: (layers + 1, n_tokens, d) float32 arrays, row 0
        the embeddings as the first layer sees them and the last row the encoder output H (what the
        bridge reads). Only the text's own tokens (`token_ids`): a shared model's language tag is dropped.
        d is the widest layer's width; a narrower layer (a BiLSTM's embeddings) is zero-padded, which
        changes no linear probe, correlation or cosine. An empty text gets (layers + 1, 0, d)."""
        COUNT.check("batch_size", batch_size)
        encoder = self._network.encoder_for(lang)
        seqs = self.token_ids(texts, lang)
        prefix = self._source_prefix(lang)
        skip = 0 if prefix is None else 1
        out: list[np.ndarray | None] = [None] * len(seqs)
        device = self.device
        for idx, ids, lengths in length_sorted_batches(seqs, batch_size, prefix):
            states = self._layer_states(encoder, ids.to(device), lengths.to(device))
            for row, i in enumerate(idx):
                out[i] = states[:, row, skip:int(lengths[row])].copy()
        if any(x is None for x in out):
            one = torch.ones(1, 1, dtype=torch.long, device=device)
            empty = self._layer_states(encoder, one, torch.ones(1, dtype=torch.long, device=device))[:, 0, :0]
            out = [empty.copy() if x is None else x for x in out]
        return out  # type: ignore[return-value]

    @staticmethod
    def _layer_states(encoder: Encoder, ids: torch.Tensor, lengths: torch.Tensor) -> np.ndarray:
        """(layers + 1, batch, n, d) float32 on the CPU."""
        try:
            states, _ = encoder.layer_states(ids, lengths)
        except NotImplementedError as err:
            raise InterlinguaError(str(err)) from None
        widths = {s.size(-1) for s in states}
        if len(widths) > 1:
            d = max(widths)
            states = [torch.nn.functional.pad(s, (0, d - s.size(-1))) for s in states]
        return torch.stack([s.float() for s in states]).cpu().numpy()

    @property
    def self_attention_layers(self) -> int:
        """Encoder layers whose self-attention `attention_maps` shows (0 for a BiLSTM encoder)."""
        return self._network.encoder_for(self.languages.sources[0]).self_attention_layers

    def attention_maps(self, texts: Sequence[str], lang: str, batch_size: int = 64, *,
                       self_attention: bool = True) -> list[AttentionMaps]:
        """Everything attention shows of each text, in order: the bridge's heads over its tokens where the
        model has an attention bridge (`bridge_attention`), and every encoder layer's self-attention where
        the encoder has one (a Transformer). An empty text gets no tokens (and a (k, 0) `bridge`). A model
        with neither (a BiLSTM without a bridge) raises `InterlinguaError`.

        `self_attention=False` leaves the encoder's maps out (`self_attention` None): the bridge's heads
        alone, for many texts, as layers x heads x n x n per text adds up; then a model without an
        attention bridge has nothing to show and raises `InterlinguaError`."""
        COUNT.check("batch_size", batch_size)
        self.check_source(lang)
        if self_attention:
            self.check_attention()
        elif not self.bridge_attention:
            raise InterlinguaError(f"this model has no attention bridge (bridge: {self._network.bridge.kind})")
        bridge, layers = self.bridge_attention, self.self_attention_layers if self_attention else 0
        seqs = tokenize_inputs(texts, self._vocabs[lang], self._pre, empty_output="they have no attention")
        heads = self._attentions(seqs, lang, batch_size) if bridge else [None] * len(seqs)
        selfs = self._self_attentions(seqs, lang, batch_size) if layers else [None] * len(seqs)
        return [AttentionMaps(self._column_pieces(seq, lang) if len(seq) else [], a, s)
                for seq, a, s in zip(seqs, heads, selfs)]

    def _column_pieces(self, seq: np.ndarray, lang: str) -> list[str]:
        """The piece of every position the encoder reads for `seq`: the source prefix (a shared model's
        <2xx> tag, as `_bridged` adds it) and then the sentence's subwords."""
        vocab = self._vocabs[lang]
        prefix = self._source_prefix(lang)
        ids = ([] if prefix is None else [prefix]) + [int(i) for i in seq]
        return [vocab.id_to_piece(i) for i in ids]

    @torch.inference_mode()
    def _self_attentions(self, seqs: list[np.ndarray], lang: str, batch_size: int) -> list[np.ndarray]:
        """(layers, heads, n_i, n_i) per sequence, n_i counting the source prefix; empty: (layers, heads, 0, 0)."""
        encoder = self._network.encoder_for(lang)
        prefix = self._source_prefix(lang)
        device = self.device
        out: list[np.ndarray | None] = [None] * len(seqs)
        for idx, ids, lengths in length_sorted_batches(seqs, batch_size, prefix):
            weights, _ = encoder.self_attention(ids.to(device), lengths.to(device))
            stacked = torch.stack(weights, dim=1).cpu().numpy()          # (batch, layers, heads, n, n)
            for row, i in enumerate(idx):
                n = int(lengths[row])
                out[i] = stacked[row, :, :, :n, :n].copy()
        if any(x is None for x in out):
            one = torch.ones(1, 1, dtype=torch.long, device=device)
            weights, _ = encoder.self_attention(one, torch.ones(1, dtype=torch.long, device=device))
            empty = torch.stack(weights, dim=1)[0, :, :, :0, :0].cpu().numpy()
            out = [empty.copy() if x is None else x for x in out]
        return out  # type: ignore[return-value]

    @torch.inference_mode()
    def _attentions(self, seqs: list[np.ndarray], lang: str, batch_size: int) -> list[np.ndarray]:
        heads = self.heads
        assert heads is not None  # a bridge with attention (checked by the callers) has k heads
        out = [np.zeros((heads, 0), dtype=np.float32) for _ in seqs]
        for idx, lengths, bridged in self._bridged(seqs, lang, batch_size):
            assert bridged.attention is not None  # as above: the bridge attends
            att = bridged.attention.float().cpu().numpy()
            for row, i in enumerate(idx):
                out[i] = att[row, :, : int(lengths[row])]
        return out

    def _source_prefix(self, lang: str) -> int | None:
        """The id put before `lang` text as a `lang` -> `lang` translation's source (a shared model's <2xx>
        tag), or None."""
        return source_prefix(self._vocabs[lang], lang, self._network.cfg.shared, self._network.cfg.tag_position)

    def _bridged(self, seqs: list[np.ndarray], lang: str, batch_size: int, max_tokens: int | None = None
                 ) -> Iterator[tuple[list[int], torch.Tensor, BridgeOutput]]:
        """(indices, lengths, encoder + bridge output) per length-sorted batch of the non-empty
        sequences, each source prefixed as a `lang` -> `lang` translation's would be."""
        prefix = self._source_prefix(lang)
        device = self.device
        for idx, ids, lengths in length_sorted_batches(seqs, batch_size, prefix, max_tokens):
            yield idx, lengths, self._network.run_encoder(ids.to(device), lengths.to(device), lang)
