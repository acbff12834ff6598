"""`interlingua train`: rotate over directions, optimise, validate, keep the best, resume exactly.

Every source of randomness is either derived from the seed and a counter (direction order,
batch order) or saved in the checkpoint (torch's RNG for dropout), so a run killed and
resumed from `last.pt` continues exactly as an uninterrupted one with the same seed.

Ctrl-C and SIGTERM stop training at once: a step in flight is rolled back to where it
started (or, while the weights are being updated, finished first), `last.pt` is written with
the state of that step boundary, and no extra validation or `best.pt` is made. The log lines
and validations a step owes (every `log_every` / `valid_every` steps) are worked out from
that state, so after `--resume` whatever the stop cut short is redone exactly once, and the
final weights, `best.pt`, history and metrics.jsonl equal those of an uninterrupted run.

Under torchrun every process runs this loop (`interlingua.distributed`): the direction
scheduler and the batch plans are seeded alike, so all processes draw the same step batch and
each trains on its own part of it (`shard`); DDP adds the parts' gradients, which are scaled so
that they equal the whole batch's. The training state is therefore the same for any number of
processes: a run resumes with more or fewer of them. Rank 0 alone prepares the corpus first,
validates, writes checkpoints, metrics and the progress bar.

A run holds the work_dir's lock (`work_dir_lock`, rank 0's) from before the data preparation until
`train()` ends, so a second run on the same work_dir is refused instead of overwriting this one's files.
"""
from __future__ import annotations

import functools
import json
import logging
import math
import signal
import time
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import torch
from tqdm import tqdm

from interlingua.atomic_files import write_text_atomic
from interlingua.config import ExperimentConfig
from interlingua.data.batching import Batch, DirectionBatches, shard
from interlingua.data.directions import (Direction, DirectionScheduler, build_directions, pair_shares,
                                         zero_shot_directions)
from interlingua.data.prepare import PreparedData, direction_pairs, prepare
from interlingua.data.vocab import decoder_start, source_prefix
from interlingua.distributed import Distributed, no_sync, process_group
from interlingua.errors import CheckpointError, ConfigError, DataError, InterlinguaError
from interlingua.modules.checkpoint import (average_checkpoints, build_payload, checkpoint_vocabs, read_checkpoint,
                                            restrict_to_vocabs, save_atomic, stored_config)
from interlingua.modules.model import TranslationModel
from interlingua.precision import model_workload
from interlingua.runtime import Runtime, resolve_device_precision
from interlingua.training.metrics import MetricsLog, add_step, empty_window, train_record
from interlingua.training.precision_probe import model_bf16_probe
from interlingua.training.tensorboard_log import TensorBoardLog, require_tensorboard
from interlingua.training.validation import build_devsets, check_dev_files, validate
from interlingua.training.work_dir_lock import WorkDirLock

log = logging.getLogger(__name__)


def direction_name(d: Direction) -> str:
    return f"{d[0]}-{d[1]}"


@dataclass
class TrainResult:
    work_dir: Path
    steps: int
    best_bleu: float | None
    best_checkpoint: Path | None
    last_checkpoint: Path
    history: list[dict[str, Any]] = field(default_factory=list)
    tokens_per_second: float = 0.0
    main_process: bool = True
    """False on the processes other than rank 0 of a torchrun launch (which reports the run)."""


@dataclass
class MicroBatch:
    """One forward + backward pass of a step: a part of the step's batch on this process."""

    batch: Batch
    scale: float
    """What the batch's loss (a mean over its target tokens) is multiplied by, so that the parts'
    gradients add up to those of the whole batch's mean loss: the part's share of the batch's
    target tokens, times the number of processes (DDP averages over them); 1 for a whole batch,
    0 for a filler (a process whose part came out empty still joins the gradient exchange)."""


class TrainingInterrupted(KeyboardInterrupt):
    """Training was stopped by Ctrl-C or SIGTERM; `last.pt` holds the state to resume from."""

    def __init__(self, message: str, signum: int = signal.SIGINT):
        super().__init__(message)
        self.signum = int(signum)


class Trainer:
    def __init__(self, cfg: ExperimentConfig, resume: bool = False, data: PreparedData | None = None,
                 init: str | Path | None = None, dist: Distributed | None = None, device: str | None = None):
        """`init`: start from that checkpoint's weights and vocabularies (fine-tuning, e.g. after
        `interlingua extend`), with a fresh optimizer and step count. `dist`: this process's place
        among several (see `train`); `device`: the process's device in place of `train.device`."""
        self.cfg = cfg
        self.dist = dist or Distributed()
        self.init = str(init) if init is not None else None
        self.work_dir = Path(cfg.work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.tensorboard: TensorBoardLog | None = None
        if cfg.train.tensorboard:
            require_tensorboard()
        self._lock = self._lock_work_dir()
        try:
            self._setup(resume, data, init, device)
        except BaseException:
            self.close()
            raise

    def _setup(self, resume: bool, data: PreparedData | None, init: str | Path | None, device: str | None) -> None:
        """Everything but the work_dir lock: config checks, data, model, optimizer, resumed state."""
        cfg = self.cfg
        tc = cfg.train
        parts = self.dist.world_size * tc.accumulate
        if tc.batch_size < parts:
            raise ConfigError(f"train.batch_size {tc.batch_size} is split into {self.dist.world_size} process(es) x "
                              f"train.accumulate {tc.accumulate} = {parts} parts: it must be at least {parts}")
        # precision `auto` is settled below by timing this model (a placeholder until then)
        self.runtime = Runtime.create(device or tc.device, "fp32" if tc.precision == "auto" else tc.precision,
                                      tc.threads, tc.seed).apply()
        if tc.trainable == "bridge" and init is None and not resume:
            raise ConfigError("train.trainable: bridge trains new shared layers on top of a trained translation "
                              "model: give that model with --init CHECKPOINT")
        # Read the checkpoint before the (possibly long) data preparation: a bad one fails at once.
        resume_from = self._read_resume_checkpoint() if resume else None
        init_from = self._read_init_checkpoint(init) if init is not None and resume_from is None else None
        if resume_from is not None and resume_from["training"].get("init"):  # a fine-tuning run: its vocabularies
            self.init = resume_from["training"]["init"]
            init_from = resume_from
        given_vocabs = checkpoint_vocabs(init_from) if init_from is not None else None
        self.data = data or self.dist.in_turn(lambda: prepare(cfg, vocabs=given_vocabs))
        self._check_same_data()
        check_dev_files(self.data, cfg.corpus)
        self.directions = build_directions(cfg.directions, self.data.languages)
        self.encoder_langs = sorted({s for s, _ in self.directions})
        self.decoder_langs = sorted({t for _, t in self.directions})
        self.zero_shot = zero_shot_directions(self.directions, self.data.languages)
        self.model = TranslationModel(cfg.model, {lang: len(v) for lang, v in self.data.vocabs.items()},
                                      self.encoder_langs, self.decoder_langs)
        if init_from is not None and resume_from is None:
            self._load_init_weights(init_from, Path(init))
        if tc.trainable == "bridge":
            self.model.freeze_translation()
        self.model.check_agreement(tc.agreement, self.directions)
        restrict_to_vocabs(self.model, self.data.vocabs)
        self.model.to(self.runtime.device)
        trained = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = (torch.optim.SGD(trained, lr=tc.lr) if tc.optimizer == "sgd"
                          else torch.optim.Adam(trained, lr=tc.lr, fused=True))
        self.lr_factor = lr_factor(tc.lr_schedule, tc.warmup_steps)
        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self.lr_factor)
        self.step_directions = self._step_directions()
        """The directions the scheduler rotates over: all, or with `both_directions` one per pair."""
        self.scheduler = DirectionScheduler(self.step_directions, tc.seed)
        self.batches = {d: self._direction_batches(d) for d in self.step_directions}
        self.max_steps = tc.max_steps if tc.epochs is None else tc.epochs * sum(len(b) for b in self.batches.values())
        """The step to stop at: `train.max_steps`, or `train.epochs` passes over every direction (the
        rotation gives each direction one batch per cycle, so directions of equal size end together)."""
        if tc.precision == "auto":
            self.runtime = self.runtime.with_precision(self.dist.broadcast(self._auto_precision() if self.dist.is_main
                                                                           else None))
        self.precision = self.runtime.precision
        self.scaler = self.runtime.grad_scaler()  # after `auto` is settled: fp16 (older GPUs) needs one
        log.info("training on %s%s", self.runtime.describe(),
                 f"; process {self.dist.rank} of {self.dist.world_size} ({self.dist.backend})" if self.dist.active else "")
        self.devsets = build_devsets(self.data, self.directions, self.zero_shot,
                                     self.cfg.preprocess.max_valid_sentences, self.cfg.preprocess.max_len)
        self.metrics = MetricsLog(self.work_dir)
        """Written by rank 0 only (as are checkpoints and config.json)."""
        self.step = 0
        self.elapsed = 0.0
        self.best_bleu: float | None = None
        self.history: list[dict[str, Any]] = []
        self._window = empty_window()
        self._step_start: dict[str, Any] | None = None  # set while a step is in flight
        self._updating = False  # True while the optimizer changes the weights
        self._deferred_signal: int | None = None
        if resume_from is not None:
            self._resume(resume_from)
        elif (self.work_dir / "last.pt").exists():
            raise ConfigError(f"{self.work_dir} already holds a run (last.pt); use --resume to continue it or choose another work_dir")
        if self.dist.rank > 0:  # dropout masks differ between processes (rank 0 keeps the run's own stream)
            torch.manual_seed(tc.seed * 1_000_003 + self.dist.rank * 7919 + self.step)
        self.trained = self.dist.wrap(self.model, some_unused=len(self.step_directions) > 1)
        """The module the steps run through: the model, or DDP around it (which shares its weights)."""

    def _lock_work_dir(self) -> WorkDirLock | None:
        """Rank 0 locks the work_dir for the run (the other processes share its files, on a filesystem
        every node sees); its success or refusal is every process's, so none waits for a partner that stopped."""
        lock, refused = None, None
        if self.dist.is_main:
            lock = WorkDirLock(self.work_dir)
            try:
                lock.acquire()
            except (InterlinguaError, OSError) as err:
                refused = err
        refused = self.dist.broadcast(refused)
        if refused is not None:
            raise refused
        return lock

    def close(self) -> None:
        """Give back the work_dir lock and close the TensorBoard writer (`train` does it when it ends)."""
        if self.tensorboard is not None:
            self.tensorboard.close()
            self.tensorboard = None
        if self._lock is not None:
            self._lock.release()

    def _check_same_data(self) -> None:
        """Every process must have prepared the same vocabularies: a node that cannot see rank 0's
        prepared corpus trains its own sentencepiece models, which may differ."""
        digest = zlib.crc32(b"".join(v.proto for _, v in sorted(self.data.vocabs.items())))
        if len(set(self.dist.gather(digest))) > 1:
            raise DataError(f"the training processes prepared different vocabularies: put work_dir "
                            f"({self.work_dir}) on a filesystem every node shares")

    # -- setup ---------------------------------------------------------------------------
    def _step_directions(self) -> list[Direction]:
        if not self.cfg.train.both_directions:
            return list(self.directions)
        missing = [f"{t}->{s}" for s, t in self.directions if (t, s) not in self.directions]
        if missing:
            raise ConfigError("train.both_directions trains every pair both ways in one step, but these reverse "
                              f"directions are not trained: {', '.join(missing)}")
        return [(s, t) for s, t in self.directions if s < t]

    def _auto_precision(self) -> str:
        """`precision: auto` here: bf16 only where this model's own steps measure faster in it."""
        tc = self.cfg.train
        probe = model_bf16_probe(self.model, next(iter(self.batches.values())), self.runtime.device,
                                 self._loss_terms(),
                                 self.runtime.rng_state, self.runtime.set_rng_state)
        workload = model_workload(self.cfg.model.model_dump(mode="json"),
                                  {lang: len(v) for lang, v in self.data.vocabs.items()}, tc.batch_size)
        return resolve_device_precision("auto", self.runtime.device, probe, workload)

    def _loss_terms(self) -> dict[str, Any]:
        """What `model(batch, ...)` takes besides the batch: the loss's terms and their weights."""
        tc = self.cfg.train
        return {"penalty_weight": tc.penalty_weight, "label_smoothing": tc.label_smoothing,
                "softmax_sample": tc.softmax_sample, "agreement": tc.agreement if tc.agreement.weight > 0 else None}

    def _prefix(self, src: str, tgt: str) -> int | None:
        return source_prefix(self.data.vocabs[src], tgt, self.cfg.model.shared, self.cfg.model.tag_position)

    def _reverse_prefix(self, d: Direction) -> int | None:
        """The prefix of the target sentences encoded as sources (tgt->src) for the agreement loss."""
        if self.cfg.train.agreement.weight <= 0 or d[0] == d[1]:
            return None
        try:
            return self._prefix(d[1], d[0])
        except KeyError:
            raise ConfigError(f"train.agreement encodes {d[1]} sentences as sources for {d[0]}, but the vocabulary "
                              f"has no tag for {d[0]}") from None

    def _start(self, tgt: str) -> int:
        return decoder_start(self.data.vocabs[tgt], tgt, self.cfg.model.shared, self.cfg.model.tag_position)

    def _direction_batches(self, d: Direction) -> DirectionBatches:
        share = pair_shares(self.directions, self.cfg.directions.pair_lines).get(d)
        src, tgt = direction_pairs(self.data, "train", *d, share=share)
        if not src:
            raise DataError(f"no training sentence pairs for direction {d[0]}->{d[1]} in the corpus")
        seed = self.cfg.train.seed * 7919 + zlib.crc32(direction_name(d).encode())
        return DirectionBatches(src, tgt, d[0], d[1], self.cfg.train.batch_size, seed, self.cfg.train.bucket_pool,
                                self._prefix(*d), self._start(d[1]), self._reverse_prefix(d))

    # -- checkpoints ---------------------------------------------------------------------
    def _training_state(self, history: list[dict[str, Any]] | None = None,
                        best_bleu: float | None = None) -> dict[str, Any]:
        history = self.history if history is None else history
        return {
            "step": self.step,
            "max_steps": self.max_steps,
            "elapsed": self.elapsed,
            "best_bleu": self.best_bleu if best_bleu is None else best_bleu,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "lr_scheduler": self.lr_scheduler.state_dict(),
            "batches": {direction_name(d): b.state_dict() for d, b in self.batches.items()},
            "torch_rng": self.runtime.rng_state(),
            "grad_scaler": self.scaler.state_dict() if self.scaler else None,
            "history": json.dumps(history),
            "log_window": dict(self._window),
            **({"init": self.init} if self.init else {}),
        }

    def _save(self, name: str, history: list[dict[str, Any]] | None = None, best_bleu: float | None = None,
              weights_only: bool = False) -> Path:
        """Write a checkpoint; `weights_only` leaves out the training state (optimizer moments and
        all), for checkpoints that are only ever translated with or averaged."""
        path = self.work_dir / name
        if not self.dist.is_main:
            return path
        if self.tensorboard is not None:  # what is logged up to this state is on disk with it
            self.tensorboard.flush()
        state = None if weights_only else self._training_state(history, best_bleu)
        save_atomic(build_payload(self.cfg, self.model, self.data.vocabs, self.directions, state), path)
        return path

    def _read_resume_checkpoint(self) -> dict[str, Any]:
        path = self.work_dir / "last.pt"
        if not path.exists():
            raise CheckpointError(f"nothing to resume: {path} does not exist (start the run without --resume)")
        payload = read_checkpoint(path)
        if "training" not in payload:
            raise CheckpointError(f"{path} holds no training state to resume from (a checkpoint for translation only?)")
        return payload

    def _read_init_checkpoint(self, init: str | Path) -> dict[str, Any]:
        """The checkpoint to fine-tune from; its model section must be the config's (but for the
        bridge, where only a new bridge is trained on top of it)."""
        payload = read_checkpoint(init)
        stored = stored_config(payload, init).model_dump(mode="json")["model"]
        wanted = self.cfg.model_dump(mode="json")["model"]
        if self.cfg.train.trainable == "bridge":
            stored.pop("bridge"), wanted.pop("bridge")
        if stored != wanted:
            diff = next(k for k in sorted(set(stored) | set(wanted)) if stored.get(k) != wanted.get(k))
            raise ConfigError(f"cannot start from {init}: the config's model section differs from the checkpoint's "
                              f"(model.{diff}: {wanted.get(diff)!r} here, {stored.get(diff)!r} in the checkpoint)")
        return payload

    def _load_init_weights(self, payload: dict[str, Any], path: Path) -> None:
        """The checkpoint's weights; with `trainable: bridge` its encoders and decoders only (those of
        languages this run does not use are left out) and the bridge stays new."""
        weights = payload["model"]
        if self.cfg.train.trainable == "bridge":
            wanted = {k for k in self.model.state_dict() if not k.startswith("bridge.")}
            missing = sorted(wanted - set(weights))
            if missing:
                raise CheckpointError(f"cannot start from {path}: it lacks {len(missing)} weights this run's encoders "
                                      f"and decoders need (languages or directions it was not trained on?), "
                                      f"e.g. {missing[0]}")
            weights = {k: v for k, v in weights.items() if k in wanted}
            weights.update({k: v for k, v in self.model.state_dict().items() if k.startswith("bridge.")})
        try:
            self.model.load_state_dict(weights)
        except (KeyError, RuntimeError) as err:
            raise CheckpointError(f"cannot start from {path}: its weights do not fit this run's model "
                                  f"(directions or languages?): {_one_line(err)}") from None
        log.info("starting from the weights of %s", path)

    def _resume(self, payload: dict[str, Any]) -> None:
        path = self.work_dir / "last.pt"
        stored = stored_config(payload, path).model_dump(mode="json")
        for section in ("model", "directions", "preprocess"):
            if stored[section] != self.cfg.model_dump(mode="json")[section]:
                raise ConfigError(f"cannot resume {path}: config section '{section}' differs from the one it was trained with")
        st = payload["training"]
        try:
            self.model.load_state_dict(payload["model"])
            self.optimizer.load_state_dict(st["optimizer"])
            self.scheduler.load_state_dict(st["scheduler"])
            if "lr_scheduler" in st:  # checkpoints written before the schedule existed: constant lr
                self.lr_scheduler.load_state_dict(st["lr_scheduler"])
            for d, b in self.batches.items():
                b.load_state_dict(st["batches"][direction_name(d)])
            self.runtime.set_rng_state(st["torch_rng"])
            if self.scaler and st.get("grad_scaler"):
                self.scaler.load_state_dict(st["grad_scaler"])
            self.step, self.elapsed, self.best_bleu = st["step"], st["elapsed"], st["best_bleu"]
            self.history = json.loads(st["history"])
        except (KeyError, RuntimeError, TypeError, ValueError) as err:
            raise CheckpointError(f"cannot resume {path}: its training state does not fit this run "
                                  f"(corrupt checkpoint?): {_one_line(err)}") from None
        self._window = {**empty_window(), **st.get("log_window", {})}
        validated = bool(self.history) and self.history[-1]["step"] == self.step
        if self.dist.is_main:
            self.metrics.reconcile(self.step, validated, window_open=self._window["n"] > 0)
        log.info("resumed from %s at step %d", path, self.step)

    # -- loop ----------------------------------------------------------------------------
    def _log(self, record: dict[str, Any]) -> None:
        if self.dist.is_main:
            self.metrics.append(record)
            if self.tensorboard is not None:
                self.tensorboard.write(record)

    def _budget_spent(self) -> bool:
        mm = self.cfg.train.max_minutes
        return mm is not None and self.elapsed >= mm * 60

    def validate(self) -> dict[str, Any]:
        """One validation record: dev loss, BLEU and chrF per direction, mean BLEU of the trained ones."""
        return validate(self.model, self.devsets, self.data.vocabs, self.zero_shot, self.step, self.runtime.autocast,
                        beam=self.cfg.train.valid_beam, max_len=2 * self.cfg.preprocess.max_len)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if self._updating:  # let the weight update finish: the step is then whole
            self._deferred_signal = signum
            return
        raise TrainingInterrupted(signal.Signals(signum).name, signum)

    def _step_boundary(self) -> dict[str, Any]:
        """What a step changes before it updates the weights (cheap to copy every step)."""
        return {"scheduler": self.scheduler.state_dict(),
                "batches": {d: b.state_dict() for d, b in self.batches.items()},
                "torch_rng": self.runtime.rng_state()}

    def _rewind(self, start: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(start["scheduler"])
        for d, b in self.batches.items():
            if b.state_dict() != start["batches"][d]:
                b.load_state_dict(start["batches"][d])
        self.runtime.set_rng_state(start["torch_rng"])
        self.optimizer.zero_grad(set_to_none=True)

    def _save_on_interrupt(self, err: KeyboardInterrupt) -> TrainingInterrupted:
        """Write last.pt at the step boundary the interrupt fell on; never validate or touch best.pt."""
        signum = getattr(err, "signum", signal.SIGINT)
        how = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"
        if self._updating:  # raised from inside the weight update: whether it happened is unknown
            last = self.work_dir / "last.pt"
            then = ("last.pt left as it was (the last validation); --resume continues from there" if last.exists()
                    else "no checkpoint yet: start the run again")
            return TrainingInterrupted(f"{how} during the weight update of step {self.step + 1}: {then}", signum)
        if self._step_start is not None:
            self._rewind(self._step_start)
            self._step_start = None
        path = self._save("last.pt")
        if not self.dist.is_main:
            return TrainingInterrupted(f"{how} at step {self.step} (process {self.dist.rank}; process 0 saves last.pt)",
                                       signum)
        return TrainingInterrupted(f"{how} at step {self.step}: saved {path}; continue with --resume", signum)

    def train(self) -> TrainResult:
        tc = self.cfg.train
        try:
            if self.dist.is_main:
                write_text_atomic(self.work_dir / "config.json", json.dumps(self.cfg.model_dump(mode="json"), indent=1))
                if self.step == 0:
                    self.metrics.start_fresh()
                if tc.tensorboard:
                    self.tensorboard = TensorBoardLog(self.work_dir, self.step, self.metrics)
            return self._train()
        finally:
            self.close()

    def _train(self) -> TrainResult:
        tc = self.cfg.train
        self.model.train()
        trained_params = [p for p in self.model.parameters() if p.requires_grad]
        total_tokens, total_time = 0, 0.0
        # With a wall-clock budget the bar counts seconds of training, otherwise steps.
        by_time = tc.max_minutes is not None
        bar = tqdm(total=round(tc.max_minutes * 60) if by_time else self.max_steps,
                   initial=round(self.elapsed) if by_time else self.step,
                   desc="train", unit="s" if by_time else "step", dynamic_ncols=True, mininterval=2,
                   disable=not self.dist.is_main)
        old_handlers: dict[int, Any] = {}
        try:
            if _in_main_thread():
                for sig in (signal.SIGINT, signal.SIGTERM):
                    old_handlers[sig] = signal.signal(sig, self._on_signal)
            while True:
                self._after_step(bar)
                if self.step >= self.max_steps or self._budget_spent():
                    break
                t0 = time.perf_counter()
                self._step_start = self._step_boundary()
                direction = self.scheduler.next()
                self.optimizer.zero_grad(set_to_none=True)
                micro, ntok = self._micro_batches(direction)
                sums = self._forward_backward(micro)
                if self.scaler:  # fp16: gradients unscaled before clipping
                    self.scaler.unscale_(self.optimizer)
                torch.nn.utils.clip_grad_norm_(trained_params, tc.clip_norm)
                w = self._window
                self._updating = True  # signals wait until the step is committed
                if self.scaler:
                    self.scaler.step(self.optimizer)
                    self.scaler.update()
                else:
                    self.optimizer.step()
                self.lr_scheduler.step()
                dt = time.perf_counter() - t0
                # the whole step's loss terms, and the mean time of the processes (the same on each:
                # a time budget then ends every process at the same step)
                nll, n_tgt, penalty_sum, sentences, agreement_sum, agreed, dt = self.dist.sum([*sums, dt])
                dt /= self.dist.world_size
                window = add_step(w, nll, int(n_tgt), penalty_sum / max(sentences, 1), ntok, dt,
                                  agreement_sum, int(agreed))
                self.step, self.elapsed, self._window, self._step_start = self.step + 1, self.elapsed + dt, window, None
                self._updating = False
                if self._deferred_signal is not None:
                    signum, self._deferred_signal = self._deferred_signal, None
                    raise TrainingInterrupted(signal.Signals(signum).name, signum)
                total_tokens, total_time = total_tokens + ntok, total_time + dt
                if by_time:
                    bar.update(max(0, min(round(self.elapsed), bar.total) - bar.n))
                else:
                    bar.update(1)
            if not self.history or self.history[-1]["step"] != self.step:
                self._validate_and_save()
            self._average_lowest_loss()
            if not self.dist.same_weights(self.model):
                raise RuntimeError("the training processes ended with different weights")
        except KeyboardInterrupt as err:
            raise self._save_on_interrupt(err) from None
        finally:
            bar.close()
            for sig, handler in old_handlers.items():
                signal.signal(sig, handler)
        best = self.work_dir / "best.pt"
        return TrainResult(self.work_dir, self.step, self.best_bleu, best if best.exists() else None,
                           self.work_dir / "last.pt", self.history, total_tokens / max(total_time, 1e-9),
                           self.dist.is_main)

    def _micro_batches(self, direction: Direction) -> tuple[list[MicroBatch], int]:
        """This process's passes of one step, and the whole step's source + target tokens.

        The step's batch (the same on every process) is cut into processes x `train.accumulate`
        parts; this process takes parts rank, rank + processes, ... With `both_directions` each
        part is also trained the other way round (paper 003's cost(a->b) + cost(b->a))."""
        tc = self.cfg.train
        batches = self.batches[direction]
        idx = batches.next_indices()
        world, parts = self.dist.world_size, self.dist.world_size * tc.accumulate
        s, t = direction
        sides = (False, True) if tc.both_directions else (False,)
        whole = {rev: batches.target_tokens(idx, reverse=rev) for rev in sides}
        micro = []
        for m in range(tc.accumulate):
            part = shard(idx, parts, m * world + self.dist.rank)
            filler = len(part) == 0
            part = idx[:1] if filler else part
            made = (batches.batch_both_ways(part, self._prefix(t, s), self._start(s)) if tc.both_directions
                    else (batches.batch(part),))
            for rev, batch in zip(sides, made):
                batch = replace(batch, filler=True) if filler else batch
                scale = (0.0 if filler else 1.0 if parts == 1
                         else world * batches.target_tokens(part, reverse=rev) / whole[rev])
                micro.append(MicroBatch(batch, scale))
        return micro, batches.tokens(idx) * len(sides)

    def _forward_backward(self, micro: list[MicroBatch]) -> list[float]:
        """Gradients of the step's loss from this process's passes (DDP exchanges them after the
        last one only); returns this process's NLL sum, target tokens, penalty sum, sentences, agreement
        loss sum and the sentences it was computed for."""
        terms = self._loss_terms()
        nll = n_tgt = penalty = sentences = agreement = agreed = 0.0
        for i, mb in enumerate(micro):
            with no_sync(self.trained, skip=i < len(micro) - 1):
                with self.runtime.autocast():
                    out = self.trained(mb.batch.to(self.runtime.device), **terms)
                loss = out.loss if mb.scale == 1.0 else out.loss * mb.scale
                (self.scaler.scale(loss) if self.scaler else loss).backward()
            if mb.scale:
                n = mb.batch.src.size(0)
                nll, n_tgt, penalty, sentences = nll + out.nll_sum, n_tgt + out.n_tokens, penalty + out.penalty * n, sentences + n
                agreement, agreed = agreement + out.agreement, agreed + out.agreement_sentences
        return [nll, n_tgt, penalty, sentences, agreement, agreed]

    def _after_step(self, bar: tqdm) -> None:
        """The log line and validation owed at the current step, unless already done (state-driven,
        so a resumed run does exactly what an interrupt cut short)."""
        tc = self.cfg.train
        w = self._window
        if self.step and self.step % tc.log_every == 0 and w["n"] > 0:
            rec = train_record(self.step, w, tc.lr * self.lr_factor(self.step - 1),
                               self.elapsed)  # the lr of the window's last update
            self._log(rec)
            self._window = empty_window()
            bar.set_postfix(step=self.step, loss=f"{rec['loss']:.3f}", pen=f"{rec['penalty']:.2f}",
                            **({"agr": f"{rec['agreement']:.3f}"} if "agreement" in rec else {}),
                            tok_s=f"{rec['tokens_per_s']:.0f}")
        if self.step and self.step % tc.valid_every == 0 and (not self.history or self.history[-1]["step"] != self.step):
            self._validate_and_save()

    def _validate_and_save(self) -> None:
        """Rank 0 validates (once, however many processes) and hands its record to the others."""
        rec = None
        if self.dist.is_main:
            rec = (self.validate() if self.devsets
                   else {"type": "valid", "step": self.step, "mean_bleu": None, "directions": {}})
            rec["elapsed_s"] = round(self.elapsed, 2)
        rec = self.dist.broadcast(rec)
        score = _score(rec["mean_bleu"])
        improved = score is not None and (self.best_bleu is None or score > self.best_bleu)
        history, best_bleu = self.history + [rec], (score if improved else self.best_bleu)
        # The files first, the state last: stopped in between, the state still owes this
        # validation, and redoing it rewrites the same metrics line and best.pt.
        self._log(rec)
        if improved or score is None:  # nothing to select on: the last checkpoint is also the best
            self._save("best.pt", history, best_bleu)
        self._keep_lowest_loss(history, best_bleu)
        self._save("last.pt", history, best_bleu)
        self.history, self.best_bleu = history, best_bleu
        if not self.dist.is_main:
            return
        summary = " ".join(f"{n}={r['bleu']:.1f}{'*' if r['zero_shot'] else ''}" for n, r in rec["directions"].items())
        mean = "n/a" if score is None else f"{score:.2f}"
        tqdm.write(f"step {self.step}: dev mean BLEU {mean} {'(best)' if improved else ''} | {summary}")
        self.metrics.plot()


    def _keep_lowest_loss(self, history: list[dict[str, Any]], best_bleu: float | None) -> None:
        """With `train.average_best` n: this step's checkpoint joins best_loss/ if its mean dev loss is
        among the n lowest so far; files that fell out are removed. Decided from the history alone,
        so a resumed run keeps exactly the files an uninterrupted one would."""
        n = self.cfg.train.average_best
        if not n or not self.dist.is_main:
            return
        kept = lowest_loss_steps(history, n)
        folder = self.work_dir / "best_loss"
        folder.mkdir(exist_ok=True)
        if self.step in kept:
            self._save(f"best_loss/step{self.step}.pt", weights_only=True)
        for path in folder.glob("step*.pt"):
            if int(path.stem[4:]) not in kept:
                path.unlink()

    def _average_lowest_loss(self) -> Path | None:
        """`averaged.pt`: the mean of the kept lowest-dev-loss checkpoints (`train.average_best`)."""
        if not self.cfg.train.average_best or not self.dist.is_main:
            return None
        paths = [self.work_dir / "best_loss" / f"step{s}.pt" for s in lowest_loss_steps(self.history, self.cfg.train.average_best)]
        paths = [p for p in paths if p.exists()]
        if not paths:
            return None
        out = average_checkpoints(paths, self.work_dir / "averaged.pt")
        log.info("averaged %d lowest-dev-loss checkpoints (steps %s) into %s", len(paths),
                 ", ".join(p.stem[4:] for p in paths), out)
        return out


def lowest_loss_steps(history: list[dict[str, Any]], n: int) -> list[int]:
    """The steps of the `n` validations with the lowest mean dev loss (ties: the later step), lowest first."""
    scored = [(loss, -r["step"]) for r in history if (loss := _score(r.get("mean_loss"))) is not None]
    return [-neg for _, neg in sorted(scored)[:n]]


def _score(value: Any) -> float | None:
    """A validation mean as a number to compare, or None where there is none (logged as null; NaN in
    histories saved before null was used)."""
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def lr_factor(schedule: str, warmup: int) -> Callable[[int], float]:
    """LambdaLR's factor of `train.lr` for the update after `done` updates (update n = done + 1 uses
    lr * min(n / warmup, sqrt(warmup / n)) with `inverse_sqrt`, lr with `constant`)."""
    if schedule == "constant":
        return _constant
    if schedule == "inverse_sqrt":
        return functools.partial(_inverse_sqrt, warmup=warmup)
    raise ConfigError(f"unknown train.lr_schedule {schedule!r}")


def _constant(done: int) -> float:
    return 1.0


def _inverse_sqrt(done: int, warmup: int) -> float:
    n = done + 1
    return min(n / warmup, math.sqrt(warmup / n))


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())[:300]


def _in_main_thread() -> bool:
    import threading
    return threading.current_thread() is threading.main_thread()


def train(cfg: ExperimentConfig, resume: bool = False, init: str | Path | None = None) -> TrainResult:
    """Train from scratch, continue a run (`resume`), or fine-tune from a checkpoint's weights (`init`).

    Started by torchrun, this process joins the others (its device: the local rank's GPU, or the
    CPU) and the processes train as one; the process group is left when training ends."""
    with process_group(cfg.train.device) as (dist, device):
        if not dist.is_main:  # one log: rank 0's
            logging.getLogger("interlingua").setLevel(logging.WARNING)
        return Trainer(cfg, resume=resume, init=init, dist=dist, device=device).train()
