"""Typed experiment configuration: YAML in, validated, with the exact key path in every error.

One YAML file describes a whole run (corpus, preprocessing, directions, model, training).
The validated config is stored inside every checkpoint, so a checkpoint explains itself.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import (BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator,
                      model_validator)

from interlingua.errors import ConfigError
from interlingua.textio import read_text


class _Strict(BaseModel):
    """Unknown keys are errors: a typo in a config must never be silently ignored."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


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
    random (its `input_sentence_size` with shuffling): memory stays flat in corpus size."""
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
    def _pairs_needed(self) -> "DirectionsConfig":
        if self.mode == "bilingual" and len(self.pairs) != 1:
            raise ValueError("mode 'bilingual' needs exactly one entry in 'pairs', e.g. pairs: [[en, de]]")
        if self.mode == "explicit" and not self.pairs:
            raise ValueError("mode 'explicit' needs a non-empty 'pairs' list")
        return self


class KindConfig(_Strict):
    """The settings of one kind of model slot (encoder, bridge or decoder); `type` names the kind.

    Each slot's config is a union of its kinds' configs, told apart by `type` (the kind's
    name in the slot's registry, `interlingua.modules.registry`); a missing `type` means the
    slot's default kind, so configs and checkpoints written before a slot had kinds still read."""

    type: str


def _kinds(default: str, *members: type[KindConfig]) -> Any:
    """A slot's config type: `members` told apart by their `type`, `default` where it is missing."""

    def tag(value: Any) -> str | None:
        if isinstance(value, dict):
            return value.get("type", default)
        return getattr(value, "type", None)

    tagged = tuple(Annotated[m, Tag(m.model_fields["type"].default)] for m in members)
    return Annotated[Union[tagged], Discriminator(
        tag, custom_error_type="unknown_kind",
        custom_error_message=f"unknown type; known types: {', '.join(repr(m.model_fields['type'].default) for m in members)}")]


# -- encoders ---------------------------------------------------------------------------------
class BiLSTMEncoderConfig(KindConfig):
    type: Literal["bilstm"] = "bilstm"
    layers: int = Field(2, ge=1, le=16)
    hidden: int = Field(512, ge=2)
    """Output size d_h (split in two for the two directions)."""

    @field_validator("hidden")
    @classmethod
    def _even(cls, v: int) -> int:
        if v % 2:
            raise ValueError("must be even: a bidirectional encoder splits it between two directions")
        return v


class _TransformerConfig(KindConfig):
    """Settings shared by the Transformer encoder and decoder (paper 004: pre-norm Transformer)."""

    layers: int = Field(6, ge=1, le=64)
    hidden: int | None = Field(None, ge=2)
    """d_model, the width of every layer and of the output; None: the model's `embed_dim`
    (embeddings of another size are projected to it)."""
    heads: int = Field(8, ge=1, le=1024)
    """Attention heads; must divide d_model."""
    ff_dim: int | None = Field(None, ge=1)
    """Inner size of the feed-forward sub-layer; None: 4 * d_model."""
    norm: Literal["pre", "post"] = "pre"
    """Layer normalisation before each sub-layer (pre: x + F(LN(x)), a final LN on top) or after
    it (post: LN(x + F(x)), Vaswani et al.)."""
    positions: Literal["sinusoidal", "learned"] = "sinusoidal"
    max_positions: int = Field(1024, ge=1)
    """Longest sequence with `positions: learned` (the size of its table)."""
    variational_dropout: bool = False
    """One dropout mask per sequence, shared over time (embeddings, sub-layer outputs, feed-forward),
    instead of element-wise dropout."""

    @model_validator(mode="after")
    def _heads_divide(self) -> "_TransformerConfig":
        if self.hidden is not None and self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        return self


class TransformerEncoderConfig(_TransformerConfig):
    type: Literal["transformer"] = "transformer"
    residual_drop_layer: int | None = Field(None, ge=1)
    """1-based layer whose self-attention sub-layer drops its residual connection (SA(LN(x))
    instead of x + SA(LN(x))); the feed-forward residual stays. None: every layer keeps it."""
    position_query: bool = False
    """In `residual_drop_layer`, compute the self-attention query from sinusoidal position
    encodings of wavelength base `query_wavelength` alone (keys and values from the layer input)."""
    query_wavelength: float = Field(100.0, gt=1.0)

    @model_validator(mode="after")
    def _drop_layer(self) -> "TransformerEncoderConfig":
        if self.residual_drop_layer is not None and self.residual_drop_layer > self.layers:
            raise ValueError(f"residual_drop_layer ({self.residual_drop_layer}) is beyond the last layer ({self.layers})")
        if self.position_query and self.residual_drop_layer is None:
            raise ValueError("position_query needs residual_drop_layer (the layer whose query it replaces)")
        return self


EncoderConfig = _kinds("bilstm", BiLSTMEncoderConfig, TransformerEncoderConfig)


# -- bridges ----------------------------------------------------------------------------------
class AttentionBridgeConfig(KindConfig):
    type: Literal["attention"] = "attention"
    heads: int = Field(10, ge=1, le=1024)
    """k, the number of attention heads (columns of M)."""
    hidden: int = Field(1024, ge=1)
    """d_w, the inner size of the bridge's two-layer scorer."""


class NoBridgeConfig(KindConfig):
    type: Literal["none"] = "none"
    heads: int = Field(10, ge=1, le=1024)
    """Unused: kept so that `type` alone switches a config between `attention` and `none`."""
    hidden: int = Field(1024, ge=1)
    """Unused, as `heads`."""


class NTDVBridgeConfig(KindConfig):
    """Paper 003's shared layers (NTDV): a projection per source language, a self-attentive layer
    of `heads` heads of size `hidden` (no position attends to another), a GRU over the head
    outputs and a projection back to the encoder's size, which the decoder attends over."""

    type: Literal["ntdv"] = "ntdv"
    heads: int = Field(4, ge=1, le=64)
    """r, the self-attention heads (the paper: 4)."""
    hidden: int = Field(1024, ge=1)
    """d_h, the size of each head's query/key/value and of the GRU (the paper: 1024)."""


BridgeConfig = _kinds("attention", AttentionBridgeConfig, NoBridgeConfig, NTDVBridgeConfig)


# -- decoders ---------------------------------------------------------------------------------
class LSTMDecoderConfig(KindConfig):
    type: Literal["lstm"] = "lstm"
    layers: int = Field(2, ge=1, le=16)
    hidden: int = Field(512, ge=2)
    input_feed: bool = False
    """Luong input feeding: slower on CPU (one step at a time in training)."""


class TransformerDecoderConfig(_TransformerConfig):
    type: Literal["transformer"] = "transformer"
    tie_embeddings: bool = False
    """One weight matrix for the target embeddings and the output projection (Press & Wolf 2017);
    needs d_model (`hidden`) equal to `embed_dim`."""


DecoderConfig = _kinds("lstm", LSTMDecoderConfig, TransformerDecoderConfig)


class ModelConfig(_Strict):
    embed_dim: int = Field(512, ge=2)
    encoder: EncoderConfig = Field(default_factory=BiLSTMEncoderConfig)
    bridge: BridgeConfig = Field(default_factory=AttentionBridgeConfig)
    decoder: DecoderConfig = Field(default_factory=LSTMDecoderConfig)
    dropout: float = Field(0.3, ge=0.0, lt=1.0)
    shared: bool = False
    """One encoder and one decoder for all languages with a target-language tag (Johnson et al.)."""
    tag_position: Literal["source_prefix", "decoder_start"] = "source_prefix"
    """Where a shared model's target-language tag goes: prepended to the source (Johnson et al.), or
    as the decoder's first input in place of BOS (paper 004: the encoder never sees the target language)."""
    param_init: float | None = Field(None, gt=0)
    """Initialise every weight uniformly in [-x, x] (OpenNMT-py's default, 0.1); None keeps PyTorch's."""

    @model_validator(mode="after")
    def _tied_sizes(self) -> "ModelConfig":
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
    """contrastive: symmetric InfoNCE over the batch (every other translation in the step's batch, on
    every process, is a negative); cosine: 1 - cos; mse: mean squared difference of the vectors."""
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


class TrainConfig(_Strict):
    optimizer: Literal["sgd", "adam"] = "adam"
    lr: float = Field(4e-4, gt=0)
    lr_schedule: Literal["constant", "inverse_sqrt"] = "constant"
    """constant: `lr` at every step. inverse_sqrt (Vaswani et al.; fairseq): linear warm-up to `lr`
    over `warmup_steps`, then decay with 1/sqrt(step): lr * min(step / warmup, sqrt(warmup / step))."""
    warmup_steps: int = Field(4000, ge=1)
    """Warm-up of `lr_schedule: inverse_sqrt` (unused by `constant`)."""
    batch_size: int = Field(64, ge=1)
    """Sentence pairs per optimizer step, all processes and micro-batches together: under torchrun
    each process takes its share, so a run's steps are the same whatever the number of processes."""
    accumulate: int = Field(1, ge=1)
    """Micro-batches per process and step (gradient accumulation): a step's batch is split into
    processes x accumulate parts whose gradients add up to the whole batch's."""
    max_steps: int = Field(10_000, ge=1)
    max_minutes: float | None = Field(None, gt=0)
    """Wall-clock budget; training stops (and saves) when it is spent."""
    clip_norm: float = Field(5.0, gt=0)
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
    device: str = "auto"
    """cpu, cuda, cuda:N, mps, or auto (CUDA when present, else MPS, else the CPU)."""
    threads: int | None = Field(None, ge=1)
    bucket_pool: int = Field(50, ge=1)
    """Batches per length-sorting pool: larger pools waste less padding, shuffle less."""
    epochs: int | None = Field(None, ge=1)
    """Train for this many passes over each direction's pairs (the steps are epochs x the batches of
    one pass, summed over the directions), in place of `max_steps`. None: `max_steps`."""
    both_directions: bool = False
    """Each step trains one batch of sentence pairs in both directions of its pair and sums the two
    losses (paper 003: cost(a->b) + cost(b->a)); every trained direction's reverse must be trained.
    An epoch is then one pass over each pair. False: one direction a step, in rotation."""
    agreement: AgreementConfig = Field(default_factory=AgreementConfig)
    trainable: Literal["all", "bridge"] = "all"
    """`bridge`: train the bridge only, on top of the frozen translation model given with `train
    --init` (paper 003's NTDV layers): every encoder and decoder parameter keeps its value and its
    modules run without dropout; the bridge is new (the checkpoint's own bridge, if any, is dropped)."""
    tensorboard: bool = False
    """Also write metrics.jsonl's scalars as TensorBoard event files in `<work_dir>/tensorboard/`
    (needs the `tensorboard` extra: pip install "interlingua[tensorboard]")."""


class ExperimentConfig(_Strict):
    name: str = "experiment"
    corpus: Path
    """Corpus YAML (see `interlingua data`), relative to this config file or absolute."""
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
    """The dotted key path of an error location, without the kind tags pydantic puts after a
    slot (`model.decoder.lstm.hidden` is the key `model.decoder.hidden`)."""
    parts: list[str] = []
    node: Any = ExperimentConfig
    rest = list(loc)
    while rest:
        part = rest.pop(0)
        parts.append(str(part))
        field = node.model_fields.get(part) if isinstance(node, type) and issubclass(node, BaseModel) else None
        node = None
        if field is None:
            continue
        ann = field.annotation
        args = get_args(ann) if get_origin(ann) is Union else (ann,)
        args = tuple(get_args(a)[0] if get_origin(a) is Annotated else a for a in args)
        members = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        kinds = {m.model_fields["type"].default: m for m in members if issubclass(m, KindConfig)}
        if kinds and rest and rest[0] in kinds:
            node = kinds[rest.pop(0)]
        elif len(members) == 1:
            node = members[0]
    return ".".join(parts)


def parse_config(data: dict[str, Any], source: str = "<dict>", base_dir: Path | None = None) -> ExperimentConfig:
    """Validate a config dict; `corpus` is resolved relative to `base_dir` (the YAML's folder)."""
    if not isinstance(data, dict):
        raise ConfigError(f"invalid config {source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        cfg = ExperimentConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_validation_error(err, source)) from None
    if base_dir is not None and not cfg.corpus.is_absolute():
        cfg.corpus = (base_dir / cfg.corpus).resolve()
    return cfg


def load_config(path: str | Path, overrides: list[str] | None = None) -> ExperimentConfig:
    """Read a YAML experiment config; `overrides` are `dotted.key=value` strings (YAML values)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(read_text(path))
    except yaml.YAMLError as err:
        raise ConfigError(f"config {path} is not valid YAML: {err}") from None
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
    node[parts[-1]] = yaml.safe_load(raw)
