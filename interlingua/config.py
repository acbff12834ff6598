"""Typed experiment configuration: YAML in, validated, with the exact key path in every error.

One YAML file describes a whole run (corpus, preprocessing, directions, model, training).
The validated config is stored inside every checkpoint, so a checkpoint explains itself.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from interlingua.errors import ConfigError
from interlingua.textio import read_text


class _Strict(BaseModel):
    """Unknown keys are errors: a typo in a config must never be silently ignored."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


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

    @model_validator(mode="after")
    def _pairs_needed(self) -> "DirectionsConfig":
        if self.mode == "bilingual" and len(self.pairs) != 1:
            raise ValueError("mode 'bilingual' needs exactly one entry in 'pairs', e.g. pairs: [[en, de]]")
        if self.mode == "explicit" and not self.pairs:
            raise ValueError("mode 'explicit' needs a non-empty 'pairs' list")
        return self


class EncoderConfig(_Strict):
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


class BridgeConfig(_Strict):
    type: Literal["attention", "none"] = "attention"
    heads: int = Field(10, ge=1, le=1024)
    """k, the number of attention heads (columns of M)."""
    hidden: int = Field(1024, ge=1)
    """d_w, the inner size of the bridge's two-layer scorer."""


class DecoderConfig(_Strict):
    layers: int = Field(2, ge=1, le=16)
    hidden: int = Field(512, ge=2)
    input_feed: bool = False
    """Luong input feeding: slower on CPU (one step at a time in training)."""


class ModelConfig(_Strict):
    embed_dim: int = Field(512, ge=2)
    encoder: EncoderConfig = Field(default_factory=EncoderConfig)
    bridge: BridgeConfig = Field(default_factory=BridgeConfig)
    decoder: DecoderConfig = Field(default_factory=DecoderConfig)
    dropout: float = Field(0.3, ge=0.0, lt=1.0)
    shared: bool = False
    """One encoder and one decoder for all languages with a target-language tag (Johnson et al.)."""
    param_init: float | None = Field(None, gt=0)
    """Initialise every weight uniformly in [-x, x] (OpenNMT-py's default, 0.1); None keeps PyTorch's."""


class TrainConfig(_Strict):
    optimizer: Literal["sgd", "adam"] = "adam"
    lr: float = Field(4e-4, gt=0)
    batch_size: int = Field(64, ge=1)
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
    log_every: int = Field(50, ge=1)
    valid_beam: int = Field(1, ge=1)
    seed: int = 1234
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """bf16 autocast with fp32 master weights; `auto` uses it only where the CPU has native bf16."""
    threads: int | None = Field(None, ge=1)
    bucket_pool: int = Field(50, ge=1)
    """Batches per length-sorting pool: larger pools waste less padding, shuffle less."""


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
        path = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        lines.append(f"{path}: {msg}")
    return f"invalid config {source}: " + "; ".join(lines)


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


def config_to_dict(cfg: ExperimentConfig) -> dict[str, Any]:
    return cfg.model_dump(mode="json")
