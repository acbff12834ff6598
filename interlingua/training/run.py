"""A training run as the loop sees it (`Run`: the model, optimizer, learning-rate and direction schedules,
batch plans, dev sets and `Progress`), and the pieces its building (`build.build_run`) and its loop share:
the loss's terms, the learning-rate schedules, the batch plans of the directions.
"""
from __future__ import annotations

import functools
import logging
import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from interlingua.config import ExperimentConfig, TrainConfig
from interlingua.data.batching import DirectionBatches, PairTooLong
from interlingua.data.directions import (
    Direction,
    DirectionScheduler,
    direction_name,
    pair_shares,
    synthetic_directions,
)
from interlingua.data.prepare import PreparedData, direction_pairs
from interlingua.data.vocab import decoder_start, source_prefix
from interlingua.distributed import Distributed
from interlingua.errors import ConfigError, DataError
from interlingua.modules.model import TranslationNetwork
from interlingua.records import Validation
from interlingua.runtime import Runtime
from interlingua.training.compiled import CompiledForward
from interlingua.training.metrics import MetricsLog, empty_window
from interlingua.training.validation import DevSet, validate
from interlingua.training.work_dir_lock import WorkDirLock

log = logging.getLogger(__name__)


@dataclass
class Progress:
    """Where the loop stands: the counters a step and a validation advance."""

    step: int = 0
    elapsed: float = 0.0
    """Seconds of training (the steps' own time, the mean over the processes)."""
    best_bleu: float | None = None
    history: list[Validation] = field(default_factory=list)
    """The validation records so far."""
    window: dict[str, Any] = field(default_factory=empty_window)
    """The running sums of the next train log line."""

    @property
    def validated(self) -> bool:
        """Whether the validation of this step is done (a run stopped in between owes it)."""
        return bool(self.history) and self.history[-1].step == self.step


@dataclass
class Run:
    """A run ready to train: what `build_run` made, and `progress`, which the loop advances."""

    cfg: ExperimentConfig
    dist: Distributed
    """This process's place among several (one process: rank 0 of 1)."""
    runtime: Runtime
    data: PreparedData
    directions: list[Direction]
    zero_shot: list[Direction]
    network: TranslationNetwork
    optimizer: torch.optim.Optimizer
    lr_factor: Callable[[int], float]
    lr_scheduler: torch.optim.lr_scheduler.LambdaLR
    direction_scheduler: DirectionScheduler
    """Which direction each step trains."""
    batches: dict[Direction, DirectionBatches]
    """The batch plan of each direction `direction_scheduler` rotates over: all, or with `both_directions` one
    per pair."""
    max_steps: int
    """The step to stop at: `train.max_steps`, or `train.epochs` passes over every direction (the
    rotation gives each direction one batch per cycle, so directions of equal size end together)."""
    scaler: torch.amp.GradScaler | None
    """fp16 only (older GPUs): the loss scaling that keeps its gradients from underflowing."""
    devsets: dict[Direction, DevSet]
    metrics: MetricsLog
    """Written by rank 0 only (as are checkpoints and config.json)."""
    init: str | None = None
    """The checkpoint a fine-tuning run started from (`--init`), kept across resumes."""
    progress: Progress = field(default_factory=Progress)
    trained: torch.nn.Module | None = None
    """The module the steps run through: `network`, or DDP around it (which shares its weights)."""
    compiled: CompiledForward | None = None
    """`train.compile`: `trained`'s forward pass compiled, which the steps call in its place (None: eager)."""
    lock: WorkDirLock | None = None

    @property
    def work_dir(self) -> Path:
        return Path(self.cfg.work_dir)

    @property
    def precision(self) -> str:
        return self.runtime.precision

    def loss_terms(self) -> dict[str, Any]:
        """What `model(batch, ...)` takes besides the batch in the coming step: the loss's terms and
        their weights, the agreement's as its `start_step` and `ramp_steps` give it at this step."""
        terms = loss_terms(self.cfg)
        agreement = terms["agreement"]
        if agreement is not None:
            weight = agreement.weight_at(self.progress.step)
            terms["agreement"] = (None if weight <= 0 else agreement if weight == agreement.weight
                                  else agreement.model_copy(update={"weight": weight}))
        return terms

    def prefix(self, src: str, tgt: str) -> int | None:
        """The id put before a `src` sentence that is translated into `tgt` (None: no prefix)."""
        return source_prefix(self.data.vocabs[src], tgt, self.cfg.model.shared, self.cfg.model.tag_position)

    def start(self, tgt: str) -> int:
        """The id the decoder of `tgt` starts from."""
        return decoder_start(self.data.vocabs[tgt], tgt, self.cfg.model.shared, self.cfg.model.tag_position)

    def validate(self, step: int) -> Validation:
        """One validation record: dev loss, BLEU and chrF per direction, mean BLEU of the trained ones."""
        return validate(self.network, self.devsets, self.data.vocabs, self.zero_shot, step, self.runtime.autocast,
                        beam=self.cfg.train.valid_beam, max_len=2 * self.cfg.preprocess.max_len,
                        zero_resource=self.zero_resource,
                        select_zero_resource=self.cfg.train.synthetic.selection == "with_made")

    @property
    def zero_resource(self) -> list[Direction]:
        """The zero-shot directions this run trains on synthetic pairs (`train.synthetic`): no real parallel data."""
        syn = self.cfg.train.synthetic
        return ([d for d in synthetic_directions(syn.directions, self.zero_shot) if d in self.zero_shot]
                if syn.modes else [])

    def close(self) -> None:
        """Give back the work_dir lock (the loop does it when it ends)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None


def loss_terms(cfg: ExperimentConfig) -> dict[str, Any]:
    """What `model(batch, ...)` takes besides the batch: the loss's terms and their weights."""
    tc = cfg.train
    return {"penalty_weight": tc.penalty_weight, "label_smoothing": tc.label_smoothing,
            "softmax_sample": tc.softmax_sample, "agreement": tc.agreement if tc.agreement.weight > 0 else None}


def step_directions(cfg: ExperimentConfig, directions: list[Direction]) -> list[Direction]:
    """The directions the direction scheduler rotates over: all, or with `both_directions` one per pair (a
    step trains it both ways)."""
    if not cfg.train.both_directions:
        return list(directions)
    missing = [f"{t}->{s}" for s, t in directions if (t, s) not in directions]
    if missing:
        raise ConfigError("train.both_directions trains every pair both ways in one step, but these reverse "
                          f"directions are not trained: {', '.join(missing)}")
    return [(s, t) for s, t in directions if s < t]


def direction_tokens(batch_tokens: int | None, rotated: int) -> int | None:
    """Each direction's token budget within a step of `train.batch_tokens` (a step takes a batch of
    each rotated direction); None: sentence batches."""
    if batch_tokens is None:
        return None
    if batch_tokens < rotated:
        raise ConfigError(f"train.batch_tokens {batch_tokens} is shared by the {rotated} directions each step "
                          f"trains: it must be at least {rotated}")
    return batch_tokens // rotated


def steps_per_epoch(tc: TrainConfig, batches: list[DirectionBatches]) -> int:
    """Steps of one pass over every direction: one batch a step in rotation, or with `batch_tokens`
    (a batch of every direction a step) the largest direction's batches."""
    return max(len(b) for b in batches) if tc.batch_tokens is not None else sum(len(b) for b in batches)


def direction_batches(cfg: ExperimentConfig, data: PreparedData, directions: list[Direction],
                      d: Direction, max_tokens: int | None = None) -> DirectionBatches:
    """The batch plan of direction `d`, seeded from the run's seed and the direction's name;
    `max_tokens`: token batches of at most that many tokens."""
    def prefix(src: str, tgt: str) -> int | None:
        return source_prefix(data.vocabs[src], tgt, cfg.model.shared, cfg.model.tag_position)

    share = pair_shares(directions, cfg.directions.pair_lines).get(d)
    src, tgt = direction_pairs(data, "train", *d, share=share)
    if not src:
        raise DataError(f"no training sentence pairs for direction {d[0]}->{d[1]} in the corpus")
    forward, start = prefix(*d), decoder_start(data.vocabs[d[1]], d[1], cfg.model.shared, cfg.model.tag_position)
    reverse = None  # the prefix of the target sentences encoded as sources (tgt->src) for the agreement loss
    if cfg.train.agreement.weight > 0 and d[0] != d[1]:
        try:
            reverse = prefix(d[1], d[0])
        except KeyError:
            raise ConfigError(f"train.agreement encodes {d[1]} sentences as sources for {d[0]}, but the vocabulary "
                              f"has no tag for {d[0]}") from None
    seed = cfg.train.seed * 7919 + zlib.crc32(direction_name(d).encode())
    try:
        return DirectionBatches(src, tgt, d[0], d[1], cfg.train.batch_size, seed, cfg.train.bucket_pool,
                                forward, start, reverse, max_tokens)
    except PairTooLong as err:
        rotated = len(step_directions(cfg, directions))
        raise ConfigError(f"train.batch_tokens gives each of the {rotated} directions of a step {max_tokens} tokens, "
                          f"but a {d[0]}->{d[1]} training pair takes {err.tokens}: raise train.batch_tokens to at "
                          f"least {err.tokens * rotated} (or lower preprocess.max_len)") from None


def lr_factor(schedule: str, warmup: int) -> Callable[[int], float]:
    """LambdaLR's factor of `train.lr` for the update after `done` updates (update n = done + 1 uses
    lr * min(n / warmup, sqrt(warmup / n)) with `inverse_sqrt`, lr with `constant`)."""
    if schedule == "constant":
        return _constant
    if schedule == "inverse_sqrt":
        return functools.partial(_inverse_sqrt, warmup=warmup)
    raise ConfigError(f"unknown train.lr_schedule {schedule!r}")


def budget_lr_factor(decay_from: float | None, max_steps: int, max_minutes: float | None, step: int,
                     elapsed: float) -> float:
    """The factor `train.lr_decay_from` puts on the lr of the update at `step` after `elapsed` seconds of training:
    1 until that share of the budget is spent, then falling linearly to 0 at its end (the budget spent is the
    larger share of `max_steps` and of `max_minutes`, whichever ends the run first)."""
    if decay_from is None:
        return 1.0
    spent = step / max_steps
    if max_minutes is not None:
        spent = max(spent, elapsed / (max_minutes * 60))
    return min(1.0, max(0.0, (1.0 - spent) / (1.0 - decay_from)))


def _constant(done: int) -> float:
    return 1.0


def _inverse_sqrt(done: int, warmup: int) -> float:
    n = done + 1
    return min(n / warmup, math.sqrt(warmup / n))
