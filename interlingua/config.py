"""Typed experiment configuration: YAML in, validated, with the exact key path in every error.

One YAML file describes a whole run (corpus, preprocessing, directions, model, training).
The validated config is stored inside every checkpoint, so a checkpoint explains itself.
"""
from __future__ import annotations

import importlib
import pkgutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    SerializeAsAny,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from interlingua.errors import ConfigError
from interlingua.textio import read_text, yaml_problem


class _Strict(BaseModel):
    """Unknown keys are errors: a typo in a config must never be silently ignored. So are inf and nan
    wherever a number goes: they pass a `> 0` bound (`train.lr: inf`) and make every loss NaN."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class CleanConfig(_Strict):
    """Filters on the training split, as the papers' pipelines clean their corpora (Moses's
    clean-corpus-n and friends). Training lines with an empty side are always dropped; what each
    filter drops is counted and written to `<work_dir>/data/cleaning.json`."""

    drop_long: bool = False
    """Drop training lines longer than `max_len` subwords instead of truncating them."""
    max_ratio: float | None = Field(None, gt=1.0)
    """Drop lines whose longest side has more than this many times the subwords of the shortest."""
    dedup: bool = False
    """Keep only the first of identical lines (every language of the line the same)."""
    language_id: bool = False
    """Drop lines that the language identifier assigns to another of the corpus's languages."""


class PreprocessConfig(_Strict):
    lowercase: bool = True
    normalize: bool = True
    """Unicode NFKC and whitespace collapsing before sentencepiece."""
    vocab_size: int = Field(8000, ge=50, le=200_000)
    """Sentencepiece BPE vocabulary per language (the papers used 10k merges)."""
    joint_vocab: bool = False
    """One vocabulary over all languages (needed by the fully shared language-label model)."""
    max_len: int = Field(100, ge=2, le=4096)
    """Subword tokens per sentence; longer sentences are truncated with a warning."""
    max_train_sentences: int | None = Field(None, ge=1)
    """Use only the first N training lines (tiny tests and quick demos)."""
    max_valid_sentences: int | None = Field(None, ge=1)
    """Use only the first N validation lines for dev BLEU during training."""
    vocab_sample: int = Field(1_000_000, ge=1000)
    """Sentencepiece learns each vocabulary from at most this many training lines, drawn at
    random the same way every time (`vocab.reservoir_sample`): memory stays flat in corpus size, and
    the same corpus gives the same vocabulary."""
    workers: int | None = Field(None, ge=1)
    """Threads that encode each chunk of lines; default: every core of the machine."""
    clean: CleanConfig = Field(default_factory=CleanConfig)


class DirectionsConfig(_Strict):
    mode: Literal["bilingual", "pivot", "many2many", "explicit"] = "many2many"
    languages: list[str] | None = None
    """Languages to use; default: all languages of the corpus."""
    pivot: str = "en"
    pairs: list[tuple[str, str]] = Field(default_factory=list)
    """For `bilingual` (one pair) and `explicit` (any list of src->tgt pairs)."""
    monolingual: bool = False
    """Add A->A copy directions for every language (repairs zero-shot, paper 000 Sec. 3.1.2)."""
    held_out: list[tuple[str, str]] = Field(default_factory=list)
    """Directions removed from training, to study zero-shot translation on them."""
    pair_lines: Literal["all", "disjoint", "common"] = "all"
    """Which training lines of a multi-way corpus each language pair sees (paper 004, Table 3):
    `all` every line; `disjoint` its own share (line j goes to pair j mod the number of pairs, a
    pair's two directions share it), so no sentence is seen in two pairs; `common` the same
    share for every pair (as many lines per pair as `disjoint`, still multi-way: its control)."""

    @model_validator(mode="after")
    def _pairs_needed(self) -> DirectionsConfig:
        if self.mode == "bilingual" and len(self.pairs) != 1:
            raise ValueError("mode 'bilingual' needs exactly one entry in 'pairs', e.g. pairs: [[en, de]]")
        if self.mode == "explicit" and not self.pairs:
            raise ValueError("mode 'explicit' needs a non-empty 'pairs' list")
        return self


class KindConfig(_Strict):
    """The settings of one kind of model slot (encoder, bridge or decoder); `type` names the kind.

    A kind's config class lives beside its module and is registered with it
    (`@ENCODERS.register("bilstm", config=BiLSTMEncoderConfig)`, `interlingua.modules.registry`);
    it declares `type: Literal["bilstm"] = "bilstm"`. A missing `type` means the slot's default
    kind, so configs and checkpoints written before a slot had kinds still read."""

    type: str


KIND_PACKAGES: tuple[str, ...] = ("interlingua.modules",)
"""Packages whose modules are all imported before the first kind is looked up: a kind module
there registers itself, so no list of imports names it. The packages are named, not imported,
so that this base module depends on no layer above it when it is imported; kinds of a user's own
modules are found through `model.kind_modules`."""

_discovery_lock = threading.RLock()
_discovered = False
_discovering = False


def discover_kinds() -> None:
    """Import every module of `KIND_PACKAGES` once, so that every built-in kind has registered
    before a slot is read (a call from inside that import returns at once)."""
    global _discovered, _discovering
    with _discovery_lock:
        if _discovered or _discovering:
            return
        _discovering = True
        try:
            for name in KIND_PACKAGES:
                package = importlib.import_module(name)
                for info in pkgutil.iter_modules(package.__path__, f"{name}."):
                    importlib.import_module(info.name)
            _discovered = True
        finally:
            _discovering = False


class KindConfigs:
    """The config classes of one model slot's kinds, by kind name: what the slot's `type` chooses.

    Filled by the slot's registry as kinds register, so a config union is always the registered
    kinds; read lazily, after `discover_kinds`, so that importing this module imports no kind."""

    def __init__(self, slot: str, default: str | None = None) -> None:
        self.slot, self.default = slot, default
        self._configs: dict[str, type[KindConfig]] = {}

    def check(self, name: str, config: type[KindConfig]) -> None:
        """Raise where `config` cannot be kind `name`'s config; registries check before they change."""
        if not (isinstance(config, type) and issubclass(config, KindConfig)):
            raise TypeError(f"{self.slot} kind '{name}': its config must subclass KindConfig, got {config!r}")
        field = config.model_fields.get("type")
        if field is None or field.default != name:
            raise TypeError(f"{self.slot} kind '{name}': {config.__name__} must declare "
                            f"`type: Literal[{name!r}] = {name!r}`")
        if self._configs.get(name, config) is not config:
            raise ValueError(f"{self.slot} kind '{name}' already has the config class {self._configs[name].__name__}")

    def add(self, name: str, config: type[KindConfig]) -> None:
        self.check(name, config)
        self._configs[name] = config

    def names(self) -> list[str]:
        discover_kinds()
        return sorted(self._configs)

    def get(self, name: str) -> type[KindConfig] | None:
        discover_kinds()
        return self._configs.get(name)

    def validate(self, value: Any) -> KindConfig:
        """A mapping (or a config object) -> the config of the kind its `type` names (the slot's
        default where it has none); pydantic prefixes errors inside with the slot's key path."""
        name = value.get("type", self.default) if isinstance(value, dict) else getattr(value, "type", None)
        config = self.get(name) if isinstance(name, str) else None
        if config is None or not isinstance(value, (dict, KindConfig)):
            known = ", ".join(repr(n) for n in self.names())
            raise PydanticCustomError("unknown_kind", f"unknown type; known types: {known}")
        if isinstance(value, KindConfig):
            if isinstance(value, config):
                return value
            value = value.model_dump()
        return config.model_validate(value)

    def default_config(self) -> KindConfig:
        """The default kind's config with its defaults."""
        return self.validate({})


def _slot(kinds: KindConfigs) -> Any:
    """A slot's config type: the registered kinds' configs told apart by `type`."""
    return Annotated[SerializeAsAny[KindConfig], PlainValidator(kinds.validate)]


ENCODER_KINDS = KindConfigs("encoder", default="bilstm")
BRIDGE_KINDS = KindConfigs("bridge", default="attention")
DECODER_KINDS = KindConfigs("decoder", default="lstm")

if TYPE_CHECKING:  # each kind has its own fields: to a type checker a slot's config is any of them
    EncoderConfig: TypeAlias = Any
    BridgeConfig: TypeAlias = Any
    DecoderConfig: TypeAlias = Any
else:
    EncoderConfig = _slot(ENCODER_KINDS)
    BridgeConfig = _slot(BRIDGE_KINDS)
    DecoderConfig = _slot(DECODER_KINDS)


class ModelConfig(_Strict):
    kind_modules: list[str] = Field(default_factory=list)
    """Modules of your own to import before the slots are read (`mypackage.my_encoder`, importable
    from sys.path): each registers kinds that `encoder.type`, `bridge.type` or `decoder.type` may
    then name. Stored with the config, so a checkpoint of such a kind loads wherever its modules
    import. Validated first of the fields, before the slots that name its kinds."""
    embed_dim: int = Field(512, ge=2)
    encoder: EncoderConfig = Field(default_factory=ENCODER_KINDS.default_config)
    bridge: BridgeConfig = Field(default_factory=BRIDGE_KINDS.default_config)
    decoder: DecoderConfig = Field(default_factory=DECODER_KINDS.default_config)
    dropout: float = Field(0.3, ge=0.0, lt=1.0)
    shared: bool = False
    """One encoder and one decoder for all languages with a target-language tag (Johnson et al.)."""
    tag_position: Literal["source_prefix", "decoder_start"] = "source_prefix"
    """Where a shared model's target-language tag goes: prepended to the source (Johnson et al.), or
    as the decoder's first input in place of BOS (paper 004: the encoder never sees the target language)."""
    param_init: float | None = Field(None, gt=0)
    """Initialise every weight uniformly in [-x, x] (OpenNMT-py's default, 0.1); None keeps PyTorch's."""

    @field_validator("kind_modules")
    @classmethod
    def _import_kind_modules(cls, names: list[str]) -> list[str]:
        for name in names:
            try:
                importlib.import_module(name)
            except ImportError as err:
                raise ValueError(f"cannot import {name!r} ({err}): is its folder on PYTHONPATH?") from None
        return names

    @model_serializer(mode="wrap")
    def _without_empty_kind_modules(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Configs that use only built-in kinds are stored as before `kind_modules` existed, so that
        their checkpoints, `config.json` and cached workload names stay the same."""
        data = handler(self)
        if isinstance(data, dict) and not data.get("kind_modules"):
            data.pop("kind_modules", None)
        return data

    @model_validator(mode="after")
    def _tied_sizes(self) -> ModelConfig:
        dec = self.decoder
        if getattr(dec, "tie_embeddings", False) and dec.hidden is not None and dec.hidden != self.embed_dim:
            raise ValueError(f"decoder.tie_embeddings needs decoder.hidden ({dec.hidden}) equal to embed_dim "
                             f"({self.embed_dim}): the embeddings and the output projection share one matrix")
        return self


class AgreementConfig(_Strict):
    """`train.agreement`: an extra loss term that pulls the representation of a sentence and that of its
    translation together, so the shared layer becomes one meaning space (Arivazhagan et al. 2019; Pham
    et al. 2019; contrastive with in-batch negatives: Pan et al. 2021). In each cross-lingual step the
    batch's target sentences are also encoded (by the target language's encoder, or the shared one)
    and compared with the source side; copy directions (A->A) are left out. Like the penalty, the
    per-sentence loss is added to the sentence's summed cross-entropy and divided by the batch's
    target tokens, so `weight` 1 weighs it like one target token."""

    weight: float = Field(0.0, ge=0)
    """0 turns the term off."""
    loss: Literal["contrastive", "cosine", "mse"] = "contrastive"
    """contrastive: symmetric InfoNCE over a pass's batch (every other translation in it, on every
    process, is a negative; a pass is one direction's batch, or its part under `accumulate`, so with
    `batch_tokens` the negatives are those of one direction's batch_tokens / directions tokens);
    cosine: 1 - cos; mse: mean squared difference of the vectors."""
    temperature: float = Field(0.1, gt=0)
    """Of `contrastive`: cosines are divided by it before the softmax."""
    negatives: Literal["translations", "both"] = "translations"
    """Of `contrastive`: the other sentences a sentence's translation must beat. translations: the other
    translations of the batch (all in the other language, so a per-language offset costs nothing);
    both: also the other sentences of its own language (SimCLR's NT-Xent), which makes a sentence's
    own language no nearer than the translation, pushing the language out of the vectors."""
    pooling: Literal["mean", "heads"] = "mean"
    """mean: the sentence vector (the mean of M's rows for the attention bridge, the masked mean of the
    states without one, NTDV's document vector); heads: each of the bridge's k heads compared with the
    same head of the translation (bridges with a fixed number of heads only)."""
    layer: int | None = Field(None, ge=0)
    """Compare the masked mean of this encoder layer's output (0: the embeddings, L: the last layer)
    instead of what the decoders read; e.g. the residual-free layer of paper 004. None: the bridge's output."""
    detach_target: bool = False
    """Stop the gradient on the target side: only the source sentence's encoder is pulled."""
    start_step: int = Field(0, ge=0)
    """The term is off (and the targets are not encoded) for the steps before this one, so that the
    network first learns to translate before its states are pulled together."""
    ramp_steps: int = Field(0, ge=0)
    """From `start_step` on, the weight rises linearly to `weight` over this many steps (0: at once)."""
    sentences: int | None = Field(None, ge=2)
    """Compare only the first this many sentences of each pass's batch (batches are shuffled, so a random
    share; None: all), their sum scaled to the whole batch (so `weight` means what it does for all): the
    targets' extra encoder pass, what the term costs in time, shrinks with the share; a contrastive term
    then has fewer negatives."""
    every: int = Field(1, ge=1)
    """The term is computed in every `every`-th step from `start_step` on only, with its full weight there; the
    other steps skip the targets' extra encoder pass (what the term costs in time). `weight` x `every` keeps
    the average pull of `weight` in every step."""

    def weight_at(self, step: int) -> float:
        """The term's weight in the step after `step` completed steps."""
        if self.weight <= 0 or step < self.start_step or (step - self.start_step) % self.every:
            return 0.0
        if self.ramp_steps <= 0:
            return self.weight
        return self.weight * min(1.0, (step - self.start_step + 1) / self.ramp_steps)


class SyntheticConfig(_Strict):
    """`train.synthetic`: sentence pairs made during training for directions that have no parallel data,
    by the model being trained (greedy, or sampled; no gradient reaches the made side).

    `pivot` (pivot-based synthetic data, Chen et al. 2017; Lakew et al. 2017): a step's batch of a pair
    (x, e) with e in the `pivot` language (either way round) is, with probability `rate`, also given a
    batch x -> y', where y' is e translated into a language Y by the model's own supervised e -> Y and
    x -> Y is a direction that gets synthetic pairs; with `reverse`, also y' -> x. Only the pivot side is
    ever translated: the two real sides of one multi-way line are never paired.
    `backtranslation` (random online back-translation, Zhang et al. 2020): a batch of a pair (x -> y),
    y in language t, is also given a batch x' -> y, where x' is y translated into a language t' (neither
    x's nor t) such that t' -> t gets synthetic pairs. Made pairs train beside the step's real ones (as much
    as `weighting` says); they are made again every step,
    by the model as it is then (so a resumed run makes the same ones)."""

    modes: list[Literal["pivot", "backtranslation"]] = Field(default_factory=list)
    """Empty: off. Both modes may be combined."""
    rate: float = Field(0.5, ge=0, le=1)
    """Probability that a batch is given a synthetic batch (drawn per batch and mode, from the run's seed
    and the step, so every process and a resumed run draw the same)."""
    start_step: int = Field(0, ge=0)
    """No synthetic pairs before this step (the supervised directions must be good enough to make them)."""
    start_minutes: float | None = Field(None, ge=0)
    """No synthetic pairs before this many minutes of training either (for runs with `max_minutes`)."""
    pivot: str = "en"
    """The language `pivot` mode translates from."""
    directions: list[tuple[str, str]] | None = None
    """The directions that are given synthetic pairs; None: every zero-shot direction of the run. A
    direction with real parallel data is given them only when named here."""
    forward: bool = True
    """`pivot` mode: train x -> y' (the made sentence as the target) where that direction gets synthetic pairs."""
    reverse: bool = True
    """`pivot` mode: train y' -> x (the made sentence as the source: back-translation through the pivot)
    where that direction gets synthetic pairs. With `forward: false` the decoders only ever learn to
    write real text."""
    tag: bool = False
    """Start every made source sentence with the BOS id, which no real source sentence holds (sources carry no
    BOS): tagged back-translation (Caswell, Chelba and Grangier 2019). The model can then tell the made
    (translationese) sources it learns from apart from the real ones it is asked to translate; nothing is
    added to the vocabularies, so a trained model fine-tuned with `train --init` takes it as it is."""
    agreement: bool = False
    """Also compute `train.agreement` on the made pairs. Off by default: greedy output repeats itself across a
    batch (many made sentences alike), and a contrastive term asked to tell identical sentences apart pulls the
    shared layer every which way."""
    distill: bool = False
    """`pivot` mode with `forward`: train x -> y' towards the pivot direction's whole distribution at each
    position of y' (the supervised e -> Y teacher-forced on y', no gradient), not y''s one-hot subwords:
    word-level knowledge distillation of the pivot path into the direct one (Chen et al. 2017, "A
    Teacher-Student Framework for Zero-Resource NMT"). The decoder then learns the teacher's distributions,
    not its argmax, so it is not taught the loops of its own greedy output. Costs one forward pass of the
    teacher per made batch, and memory for one distribution per made target token (4 bytes per output
    type: 32 MiB for 1,000 tokens over 8k types). Round 22 of the zero-resource study: no better than
    the made sentence as the source (`reverse`)."""
    decoding: Literal["greedy", "sample", "beam"] = "greedy"
    """How the synthetic side is made: the most probable subword at each step, one drawn from the model's
    distribution (a seeded generator: the same draws after a resume), or the best hypothesis of a beam search
    of `beam` (the pivot's own search, at about `beam` times greedy's cost)."""
    beam: int = Field(4, ge=2)
    """The beam size of `decoding: beam`."""
    max_len: int | None = Field(None, ge=1)
    """The most subwords of a made sentence; None: twice its source's length + 10, at most preprocess.max_len."""
    no_repeat_ngram: int = Field(0, ge=0)
    """Make no sentence that holds an n-gram of this many subwords twice (`Model.translate`'s `no_repeat_ngram`:
    no repetition loops in the made side); 0: off."""
    language_filter: bool = False
    """Drop made sentences that a language identifier places in another of the run's languages (or that
    are empty); the off-target rate is logged either way."""
    weighting: Literal["token", "batch"] = "token"
    """How much the made pairs weigh in the step's loss. `token`: a made target token as much as a real
    one (a made batch weighs its target tokens over the step's real target tokens, so with
    `batch_tokens`, where a step holds a batch of every direction, the made pairs do not drown the real
    ones). `batch`: each made batch is a mean of its own with the weight of the step's whole real batch
    (the behaviour before `token`; with `batch_size`, one direction a step, the two nearly agree)."""
    max_time_share: float | None = Field(None, gt=0, le=1)
    """Make no synthetic pairs in a step while the current log window has spent more than this share of
    its time making them. The steps that get pairs then depend on timing, so a resumed run is not
    bit-identical to an uninterrupted one. None: no limit."""
    selection: Literal["supervised", "with_made"] = "supervised"
    """What the dev means that select `best.pt`, stop on patience and choose the averaged checkpoints are
    taken over: `supervised`, the directions with real pairs alone; `with_made`, those and the directions
    trained on made pairs that have dev sentences (else a run whose made pairs lift zero-shot while the
    supervised directions dip keeps its checkpoint from before them). A run resumed with other made pairs or
    another selection (a control fine-tuned with them) scores its stored validations again on the new scale."""

    @model_validator(mode="after")
    def _distill_needs_forward_pivot_pairs(self) -> SyntheticConfig:
        if self.distill and ("pivot" not in self.modes or not self.forward):
            raise ValueError("train.synthetic.distill trains the made target of `pivot` pairs: it needs "
                             "'pivot' in train.synthetic.modes and train.synthetic.forward: true")
        return self


class TrainConfig(_Strict):
    optimizer: Literal["sgd", "adam"] = "adam"
    lr: float = Field(4e-4, gt=0)
    adam_betas: tuple[float, float] = (0.9, 0.999)
    """Adam's (beta1, beta2), each in [0, 1): the decay of its gradient and squared-gradient averages
    (paper 004's Transformers, after Vaswani et al.: (0.9, 0.98)). Unused by `sgd`."""
    lr_schedule: Literal["constant", "inverse_sqrt"] = "constant"
    """constant: `lr` at every step. inverse_sqrt (Vaswani et al.; fairseq): linear warm-up to `lr`
    over `warmup_steps`, then decay with 1/sqrt(step): lr * min(step / warmup, sqrt(warmup / step))."""
    warmup_steps: int = Field(4000, ge=1)
    """Warm-up of `lr_schedule: inverse_sqrt` (unused by `constant`)."""
    lr_decay_from: float | None = Field(None, ge=0, lt=1)
    """Share of the budget after which the lr (of `lr_schedule`) falls linearly to 0 at the budget's end,
    the budget spent being the larger share of `max_steps` and `max_minutes` (Li et al. 2020, budget-aware
    schedules: a run stopped by its budget ends on small steps, not on the noisy ones of a constant lr).
    None: no such decay."""
    batch_size: int = Field(64, ge=1)
    """Sentence pairs per optimizer step, all processes and micro-batches together: under torchrun
    each process takes its share, so a run's steps are the same whatever the number of processes."""
    batch_tokens: int | None = Field(None, ge=1)
    """Batches by token count in place of `batch_size`: a step holds at most this many source + target
    tokens (padding excluded), all processes and micro-batches together, and mixes the directions:
    it takes one batch from each direction the scheduler rotates over, in the order of one cycle of
    its rotation, each of at most batch_tokens / directions tokens (so every direction weighs alike,
    as with sentence batches in rotation). None: `batch_size` sentence pairs of one direction a step."""
    accumulate: int = Field(1, ge=1)
    """Micro-batches per process and step (gradient accumulation): a step's batch is split into
    processes x accumulate parts whose gradients add up to the whole batch's."""
    max_steps: int = Field(10_000, ge=1)
    max_minutes: float | None = Field(None, gt=0)
    """Time budget; training stops (and saves) when it is spent (counted by `clock`)."""
    clock: Literal["wall", "cpu"] = "wall"
    """What a step's time is: wall-clock seconds, or this process's CPU seconds (all its threads), which
    keep runs compared at equal time comparable on a machine that other work slows down (a one-thread
    run on an idle core spends about as much of one as of the other). It counts for `max_minutes`, the
    logged tokens/s and elapsed time, and `synthetic.max_time_share`."""
    patience: int | None = Field(None, ge=1)
    """Stop once this many validations in a row have not lowered the lowest mean dev loss of the
    trained directions (training to convergence, with `max_steps` / `max_minutes` as the outer bound);
    `--resume` after such a stop refuses to go on unless `patience` is raised. None: no such stop."""
    clip_norm: float = Field(5.0, gt=0)
    max_nonfinite_steps: int = Field(5, ge=1)
    """A step whose loss or gradient is not finite (NaN, inf) makes no update and is counted as skipped
    (`skipped_steps` in metrics.jsonl); this many such steps in a row stop the run with an error, its
    checkpoints left as they were (the weights never took a non-finite update). With fp16's gradient
    scaler, which skips such steps itself while it settles its scale, the count is not kept."""
    penalty_weight: float = Field(1.0, ge=0)
    """lambda in CE + lambda * ||A A^T - I||_F^2; 0 turns the penalty off."""
    label_smoothing: float = Field(0.0, ge=0, lt=1)
    softmax_sample: int = Field(0, ge=0)
    """>0: train the softmax over each batch's target types plus this many random ones, not the
    whole vocabulary (faster steps; validation and translation use the full softmax). 0: full."""
    valid_every: int = Field(1000, ge=1)
    average_best: int = Field(0, ge=0)
    """n > 0: keep the n checkpoints with the lowest mean dev loss of the trained directions (in
    work_dir/best_loss/) and write their average, `averaged.pt`, when training ends (paper 004
    averages the 5 best). 0: off."""
    log_every: int = Field(50, ge=1)
    valid_beam: int = Field(1, ge=1)
    seed: int = 1234
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    """Autocast with fp32 master weights. `auto`: bf16 on CUDA GPUs that have it (fp16 with a
    gradient scaler on older ones); on the CPU bf16 only where it has native bf16 and a probe
    measures it faster (see `interlingua.runtime`)."""
    compile: bool | Literal["auto"] = False
    """Compile the training forward pass (the loss computation, and through autograd its backward) with
    torch.compile (inductor; on the CPU it needs a C++ compiler), dynamic shapes: one graph per trained
    direction (and per path a step takes, e.g. once the agreement term starts), compiled before the first
    step and logged with its time; validation and decoding stay eager. Where compiling fails the run trains
    eagerly after one warning. `auto`: compile only where a few of this model's own steps measure at least
    1.1x faster compiled (compile time excluded; cached per CPU model, torch version, threads and model
    configuration, as `precision: auto`'s probe). Measured on an AMD EPYC (AVX512-BF16, no AMX), 1 thread,
    fp32, compiled / eager steps/s: 1.00x for a d128 shared Transformer (74 s to compile its 6 directions),
    0.85x for the LSTM attention bridge (docs/results/speed.md), so the default is off."""
    device: str = "auto"
    """cpu, cuda, cuda:N, mps, or auto (CUDA when present, else MPS, else the CPU)."""
    threads: int | None = Field(None, ge=1)
    bucket_pool: int = Field(50, ge=1)
    """Batches per length-sorting pool: larger pools waste less padding, shuffle less."""
    epochs: int | None = Field(None, ge=1)
    """Train for this many passes over each direction's pairs (the steps are epochs x the batches of
    one pass, summed over the directions; with `batch_tokens`, where a step takes a batch of every
    direction, the batches of the largest direction's pass), in place of `max_steps`. None: `max_steps`."""
    both_directions: bool = False
    """Each step trains one batch of sentence pairs in both directions of its pair and sums the two
    losses (paper 003: cost(a->b) + cost(b->a)); every trained direction's reverse must be trained.
    An epoch is then one pass over each pair. False: one direction a step, in rotation."""
    agreement: AgreementConfig = Field(default_factory=AgreementConfig)
    synthetic: SyntheticConfig = Field(default_factory=SyntheticConfig)
    trainable: Literal["all", "bridge"] = "all"
    """`bridge`: train the bridge only, on top of the frozen translation model given with `train
    --init` (paper 003's NTDV layers): every encoder and decoder parameter keeps its value and its
    modules run without dropout; the bridge is new (the checkpoint's own bridge, if any, is dropped)."""
    curves: bool = True
    """Draw the training curves, `<work_dir>/curves.png`, at validations (at most every 30 s) and when training
    ends. A drawing takes 0.3-0.8 s of one core: turn it off for sweeps of many runs of a few seconds (the test
    suite's tiny runs spent about a fifth of their time drawing), where metrics.jsonl holds the same numbers."""
    tensorboard: bool = False
    """Also write metrics.jsonl's scalars as TensorBoard event files in `<work_dir>/tensorboard/`
    (needs the `tensorboard` extra: pip install "interlingua[tensorboard]")."""

    @field_validator("adam_betas")
    @classmethod
    def _betas_in_range(cls, betas: tuple[float, float]) -> tuple[float, float]:
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"each of Adam's betas must be in [0, 1), got {list(betas)}")
        return betas


class ExperimentConfig(_Strict):
    name: str = "experiment"
    corpus: Path
    """Corpus YAML (see `interlingua data`), relative to this config file (to the current directory for a config
    given as a dict) or absolute; kept absolute, so that a trained model finds its corpus from any folder."""
    work_dir: Path = Path("runs/experiment")
    """Relative paths are resolved against the current directory."""
    preprocess: PreprocessConfig = Field(default_factory=PreprocessConfig)
    directions: DirectionsConfig = Field(default_factory=DirectionsConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)


def _format_validation_error(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        path = _key_path(e["loc"]) or "(top level)"
        msg = e["msg"]
        if e["type"] == "unknown_kind":
            msg = (msg.replace("unknown type", f"unknown type {e['input'].get('type')!r}", 1)
                   if isinstance(e["input"], dict) else f"expected a mapping, got {type(e['input']).__name__}")
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        lines.append(f"{path}: {msg}")
    return f"invalid config {source}: " + "; ".join(lines)


def _key_path(loc: tuple[int | str, ...]) -> str:
    """The dotted key path of an error location (a slot's kind adds no step of its own:
    `model.decoder.hidden` whatever the decoder's kind)."""
    return ".".join(str(part) for part in loc)


def parse_config(data: object, source: str = "<dict>", base_dir: Path | None = None) -> ExperimentConfig:
    """Validate a config dict; a relative `corpus` is resolved against `base_dir` (the YAML's folder), or the current
    directory without one (a dict built in Python, the demo's): the checkpoint keeps the config, and `evaluate`,
    `shortlist`, `synthesize` and `check-int8` read the corpus from it, from whatever folder they are run."""
    if not isinstance(data, dict):
        raise ConfigError(f"invalid config {source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        cfg = ExperimentConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_validation_error(err, source)) from None
    if not cfg.corpus.is_absolute():
        cfg.corpus = ((base_dir or Path.cwd()) / cfg.corpus).resolve()
    return cfg


def load_config(path: str | Path, overrides: list[str] | None = None) -> ExperimentConfig:
    """Read a YAML experiment config; `overrides` are `dotted.key=value` strings (YAML values)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(read_text(path))
    except yaml.YAMLError as err:
        raise ConfigError(f"config {path} is not valid YAML: {yaml_problem(err)}") from None
    data = data or {}
    for item in overrides or []:
        apply_override(data, item)
    return parse_config(data, source=str(path), base_dir=path.resolve().parent)


def apply_override(data: dict[str, Any], item: str) -> None:
    """Set `a.b.c=value` inside a nested dict; the value is parsed as YAML (numbers, lists...)."""
    if "=" not in item:
        raise ConfigError(f"override '{item}' must look like key.path=value")
    key, raw = item.split("=", 1)
    node = data
    parts = key.strip().split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override '{item}': '{part}' is not a section")
    try:
        node[parts[-1]] = yaml.safe_load(raw)
    except yaml.YAMLError as err:
        raise ConfigError(f"override '{item}': the value is not valid YAML: {yaml_problem(err)}") from None
