"""`interlingua train`: rotate over directions, optimise, validate, keep the best, resume exactly.

`train(cfg)` builds the run (`build.build_run`) and `Trainer` runs its loop, which reads top to
bottom: the log line and validation a step owes, then the step. The pieces it calls have one job
each: `step` (a step's passes and gradients), `state` (the training state and resuming),
`checkpoints` (best, last, lowest-loss and averaged files), `signals`, `progress_bar`,
`distribution` (what the processes of a torchrun launch agree on) and `precision_probe`.

Ctrl-C and SIGTERM stop training at once: a step in flight is rolled back to where it
started (or, while the weights are being updated, finished first), `last.pt` is written with
the state of that step boundary, and no extra validation or `best.pt` is made. The log lines
and validations a step owes (every `log_every` / `valid_every` steps) are worked out from
that state, so after `--resume` whatever the stop cut short is redone exactly once, and the
final weights, `best.pt`, history and metrics.jsonl equal those of an uninterrupted run.

Under torchrun every process runs this loop (`interlingua.distributed`, `step`); rank 0 alone
prepares the corpus first, validates, writes checkpoints, metrics and the progress bar. A run holds
the work_dir's lock (`work_dir_lock`, rank 0's) from before the data preparation until it ends, so
a second run on the same work_dir is refused instead of overwriting this one's files.
"""
from __future__ import annotations

import json
import logging
import math
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from interlingua.atomic_files import write_text_atomic
from interlingua.config import ExperimentConfig, TrainConfig
from interlingua.data.prepare import PreparedData, config_as_built
from interlingua.distributed import process_group
from interlingua.errors import ConfigError, TrainingDiverged, TrainingError
from interlingua.records import Validation
from interlingua.training.build import build_run
from interlingua.training.checkpoints import CheckpointFiles, score
from interlingua.training.compiled import counted, warm_up
from interlingua.training.metrics import add_step, empty_window, synthetic_time_share, train_record
from interlingua.training.patience import patience_spent
from interlingua.training.progress_bar import ProgressBar
from interlingua.training.run import Run, budget_lr_factor
from interlingua.training.signals import StopSignals, TrainingInterrupted
from interlingua.training.state import capture_state
from interlingua.training.step import StepStart, StepSums, forward_backward, micro_batches, step_parts
from interlingua.training.synthetic import SyntheticPairs
from interlingua.training.tensorboard_log import TensorBoardLog

log = logging.getLogger(__name__)


def lost_a_process(err: RuntimeError) -> bool:
    """Whether a collective failed because another process of the run is gone (torch raises these as a
    `DistError`, or, from inside the backward pass, as a RuntimeError carrying the backend's message)."""
    text = str(err)
    return isinstance(err, torch.distributed.DistError) or any(
        mark in text for mark in ("gloo", "NCCL", "Connection reset", "Connection closed", "Broken pipe"))


@dataclass
class TrainResult:
    work_dir: Path
    steps: int
    best_bleu: float | None
    best_checkpoint: Path | None
    last_checkpoint: Path
    history: list[Validation] = field(default_factory=list)
    tokens_per_second: float = 0.0
    main_process: bool = True
    """False on the processes other than rank 0 of a torchrun launch (which reports the run)."""


def train(cfg: ExperimentConfig, resume: bool = False, init: str | Path | None = None,
          data: PreparedData | None = None) -> TrainResult:
    """Train from scratch, continue a run (`resume`), or fine-tune from a checkpoint's weights (`init`);
    `data`: the corpus already prepared (else it is prepared, or found prepared, in work_dir).

    Started by torchrun, this process joins the others (its device: the local rank's GPU, or the
    CPU) and the processes train as one; the process group is left when training ends."""
    with process_group(cfg.train.device) as (dist, device):
        if not dist.is_main:  # one log: rank 0's
            logging.getLogger("interlingua").setLevel(logging.WARNING)
        return Trainer(build_run(cfg, resume=resume, init=init, data=data, dist=dist, device=device)).train()


def step_clock(clock: str) -> Callable[[], float]:
    """The clock a step's time is read from (`train.clock`): wall-clock, or this process's CPU time."""
    return time.process_time if clock == "cpu" else time.perf_counter


def budget_spent(tc: TrainConfig, max_steps: int, step: int, elapsed: float) -> bool:
    """Whether a run at `step` after `elapsed` seconds of training has reached its last step or its
    time budget (`train.max_minutes`)."""
    return step >= max_steps or (tc.max_minutes is not None and elapsed >= tc.max_minutes * 60)


class Trainer:
    """The training loop of one run (built by `build_run`), from its progress to its end."""

    def __init__(self, run: Run):
        self.run = run
        self.progress = run.progress
        self.tensorboard: TensorBoardLog | None = None
        self.files = CheckpointFiles(run, before_write=self._flush_tensorboard)
        self._step_start: StepStart | None = None  # set while a step is in flight
        self._tokens, self._time = 0, 0.0
        self._trained_params: list[torch.nn.Parameter] = []
        self._budget_factor = self._next_budget_factor()  # `train.lr_decay_from`'s, on the last update
        maker = SyntheticPairs(run)
        self.synthetic: SyntheticPairs | None = maker if maker.active else None

    def train(self) -> TrainResult:
        """Run the loop to `max_steps` or the time budget; the work_dir's lock is given back at the end."""
        run, p, tc = self.run, self.progress, self.run.cfg.train
        if patience_spent(p.history, tc.patience):
            self.close()
            raise ConfigError(f"this run stopped at step {p.step} because its dev loss had not improved for "
                              f"{tc.patience} validations (train.patience): it has converged; raise train.patience "
                              "to train it further")
        try:
            self._open_logs()
            run.network.train()
            self._trained_params = [w for w in run.network.parameters() if w.requires_grad]
            with StopSignals() as signals, ProgressBar(tc, run.max_steps, p.step, p.elapsed,
                                                       enabled=run.dist.is_main) as bar:
                try:
                    if run.compiled is not None and not budget_spent(tc, run.max_steps, p.step, p.elapsed):
                        # compile before the first step, outside its clock
                        warm_up(run.compiled, run.batches.values(), run.runtime, run.loss_terms(), run.optimizer)
                    while True:
                        self._log_and_validate_owed(bar)
                        if budget_spent(tc, run.max_steps, p.step, p.elapsed):
                            break
                        if patience_spent(p.history, tc.patience):
                            ProgressBar.write(f"step {p.step}: the dev loss has not improved for {tc.patience} "
                                              "validations (train.patience): stopping")
                            break
                        self._step(signals)
                        bar.advance(p.elapsed)
                    if not p.validated:
                        self.validate_and_save()
                    self.files.average_lowest_loss(p.history)
                    self._draw_final_curves()
                    if not run.dist.same_weights(run.network):
                        raise RuntimeError("the training processes ended with different weights")
                except KeyboardInterrupt as err:
                    with signals.held():
                        raise self._save_on_interrupt(err, signals) from None
                except RuntimeError as err:
                    if run.dist.world_size > 1 and lost_a_process(err):
                        with signals.held():
                            raise self._save_on_lost_process(err) from None
                    raise
        finally:
            self.close()
            if run.compiled is not None and run.compiled.active:
                log.info("the compiled training step made %s in this run (%.0f s in the compiler)",
                         counted(run.compiled.graphs, "graph"), run.compiled.compile_seconds)
        best = run.work_dir / "best.pt"
        return TrainResult(run.work_dir, p.step, p.best_bleu, best if best.exists() else None, run.work_dir / "last.pt",
                           p.history, self._tokens / max(self._time, 1e-9), run.dist.is_main)

    def _step(self, signals: StopSignals) -> None:
        """One optimizer step on the step's batch (`step_parts`) and its synthetic pairs (`train.synthetic`);
        the progress moves on only once it is whole. A step whose gradient is not finite makes no update."""
        run, p, tc = self.run, self.progress, self.run.cfg.train
        clock = step_clock(tc.clock)
        t0 = clock()
        self._step_start = StepStart.of(run)
        run.optimizer.zero_grad(set_to_none=True)
        self._apply_budget_decay()
        parts = step_parts(run)
        micro, ntok = micro_batches(run, parts)
        made = None
        jobs = self.synthetic.plan(parts, p.step, p.elapsed, synthetic_time_share(p.window)) if self.synthetic else []
        if self.synthetic is not None and jobs:
            extra, made = self.synthetic.make(parts, jobs, p.step)
            micro = micro + extra
        sums = forward_backward(run, micro)
        if run.scaler:  # fp16: gradients unscaled before clipping
            run.scaler.unscale_(run.optimizer)
        # the gradients are the same on every process after DDP's exchange: so is this decision
        norm = float(torch.nn.utils.clip_grad_norm_(self._trained_params, tc.clip_norm))
        skipped = run.scaler is None and not math.isfinite(norm)
        with signals.updating_weights():  # signals wait until the step is committed
            if run.scaler:
                run.scaler.step(run.optimizer)
                run.scaler.update()
            elif not skipped:
                run.optimizer.step()
            run.lr_scheduler.step()
            dt = clock() - t0
            # the whole step's loss terms, and the mean time of the processes (the same on each:
            # a time budget then ends every process at the same step)
            total = run.dist.sum([*sums.values(), dt])
            whole, dt = StepSums.of(total), total[-1] / run.dist.world_size
            if made is not None:
                made.nll, made.target_tokens = whole.synthetic_nll, int(whole.synthetic_tokens)
            window = add_step(p.window, whole.nll, int(whole.target_tokens), whole.penalty / max(whole.sentences, 1),
                              ntok, dt, whole.agreement, int(whole.agreed), made, skipped)
            p.step, p.elapsed, p.window, self._step_start = p.step + 1, p.elapsed + dt, window, None
        self._tokens, self._time = self._tokens + ntok, self._time + dt
        if window["streak"] >= tc.max_nonfinite_steps:
            self._diverged()

    def _next_budget_factor(self) -> float:
        """`train.lr_decay_from`'s factor on the lr of the next update (1 without it)."""
        run, p, tc = self.run, self.progress, self.run.cfg.train
        return budget_lr_factor(tc.lr_decay_from, run.max_steps, tc.max_minutes, p.step, p.elapsed)

    def _apply_budget_decay(self) -> None:
        """Scale the lr the schedule set for this update (its `get_last_lr()`) by the budget's factor (the
        schedule's own `step()` sets it afresh after the update, so nothing accumulates and resuming needs
        no state)."""
        if self.run.cfg.train.lr_decay_from is None:
            return
        factor = self._budget_factor = self._next_budget_factor()
        for group, scheduled in zip(self.run.optimizer.param_groups, self.run.lr_scheduler.get_last_lr()):
            group["lr"] = scheduled * factor

    def _diverged(self) -> None:
        """Stop a run whose loss stayed non-finite: a metrics.jsonl line says so, the checkpoints stay."""
        run, p, tc = self.run, self.progress, self.run.cfg.train
        self.log({"type": "stop", "step": p.step, "reason": "non-finite loss",
                  "nonfinite_steps": p.window["streak"]})
        last = run.work_dir / "last.pt"
        kept = (f"{last} and best.pt are kept as they were (step {p.history[-1].step})" if p.history
                and last.exists() else "no checkpoint was written before it")
        raise TrainingDiverged(f"the training loss was not finite (NaN or inf) for {p.window['streak']} steps in a "
                               f"row (train.max_nonfinite_steps {tc.max_nonfinite_steps}), up to step {p.step}: "
                               f"training stopped; {kept}. Lower train.lr, raise train.clip_norm or check the "
                               "data and precision")

    def _log_and_validate_owed(self, bar: ProgressBar) -> None:
        """The log line and validation owed at the current step, unless already done (state-driven,
        so a resumed run does exactly what an interrupt cut short)."""
        run, p, tc = self.run, self.progress, self.run.cfg.train
        if p.step and p.step % tc.log_every == 0 and p.window["n"] > 0:
            rec = train_record(p.step, p.window, tc.lr * run.lr_factor(p.step - 1) * self._budget_factor,
                               p.elapsed)  # the lr of the window's last update
            self.log(rec)
            p.window = empty_window(p.window["streak"])
            bar.show(rec)
        if p.step and p.step % tc.valid_every == 0 and not p.validated:
            self.validate_and_save()

    def validate_and_save(self) -> None:
        """Rank 0 validates (once, however many processes) and hands its record to the others."""
        run, p = self.run, self.progress
        mine: Validation | None = None
        if run.dist.is_main:
            scored = run.validate(p.step) if run.devsets else Validation(step=p.step)
            mine = replace(scored, elapsed_s=round(p.elapsed, 2))
        rec = run.dist.broadcast(mine)
        assert rec is not None  # rank 0's
        mean = score(rec.mean_bleu)
        improved = mean is not None and (p.best_bleu is None or mean > p.best_bleu)
        history, best_bleu = p.history + [rec], (mean if improved else p.best_bleu)
        # The files first, the state last: stopped in between, the state still owes this
        # validation, and redoing it rewrites the same metrics line and best.pt.
        self.log(rec.to_json())
        # nothing to select on: the last checkpoint is also the best
        self.files.after_validation(capture_state(run, p, history, best_bleu), best=improved or mean is None)
        p.history, p.best_bleu = history, best_bleu
        if not run.dist.is_main:
            return
        summary = " ".join(f"{n}={r.bleu:.1f}{r.mark}" for n, r in rec.directions.items())
        shown = "n/a" if mean is None else f"{mean:.2f}"
        ProgressBar.write(f"step {p.step}: dev mean BLEU {shown} {'(best)' if improved else ''} | {summary}")
        run.metrics.plot()

    def _draw_final_curves(self) -> None:
        """curves.png with every record of the run, at its end or its stop by a signal (validations draw at most
        every `PLOT_INTERVAL_S`); not after a failure, where the second it takes could outlast a launcher's patience.
        A drawing that cannot be written warns rather than hide how training ended."""
        if self.run.dist.is_main:
            try:
                self.run.metrics.plot(final=True)
            except OSError as err:
                log.warning("could not write %s: %s", self.run.metrics.curves, err)

    def log(self, record: dict[str, Any]) -> None:
        """A metrics.jsonl record (and its TensorBoard scalars), rank 0's."""
        if self.run.dist.is_main:
            self.run.metrics.append(record)
            if self.tensorboard is not None:
                self.tensorboard.write(record)

    def close(self) -> None:
        """Close the TensorBoard writer and give back the work_dir lock (`train` does it when it ends)."""
        if self.tensorboard is not None:
            self.tensorboard.close()
            self.tensorboard = None
        self.run.close()

    def _open_logs(self) -> None:
        """config.json, a fresh metrics.jsonl for a run from step 0, and the TensorBoard writer."""
        run = self.run
        if run.dist.is_main:
            write_text_atomic(run.work_dir / "config.json", json.dumps(config_as_built(run.cfg, run.data), indent=1))
            if self.progress.step == 0:
                run.metrics.start_fresh()
            if run.cfg.train.tensorboard:
                self.tensorboard = TensorBoardLog(run.work_dir, self.progress.step, run.metrics)

    def _flush_tensorboard(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.flush()

    def _save_on_lost_process(self, err: RuntimeError) -> TrainingError:
        """Another process of the run died inside a step: undo the step, save last.pt (process 0; it needs
        no other process) and say so in one line."""
        run, p = self.run, self.progress
        path = self._undo_step_and_save_last()
        where = f"process {run.dist.rank} of {run.dist.world_size}"
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        cause = re.sub(r"^\[[^\]]*\]\s*", "", first).split(". This is typically")[0][:160]  # gloo's source path off
        then = f"saved {path}; continue with --resume" if run.dist.is_main else "process 0 saves last.pt"
        return TrainingError(f"{where}: another training process stopped answering in step {p.step + 1} ({cause}): "
                             f"{then}")

    def _undo_step_and_save_last(self) -> Path:
        """Undo the step in flight (if any) and write last.pt at the step boundary (process 0 only)."""
        if self._step_start is not None:
            self._step_start.rewind(self.run)
            self._step_start = None
        return self.files.save("last.pt", capture_state(self.run, self.progress))

    def _save_on_interrupt(self, err: KeyboardInterrupt, signals: StopSignals) -> TrainingInterrupted:
        """Write last.pt at the step boundary the interrupt fell on; never validate or touch best.pt."""
        run, p = self.run, self.progress
        signum = getattr(err, "signum", signal.SIGINT)
        how = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"
        if signals.updating:  # raised from inside the weight update: whether it happened is unknown
            last = run.work_dir / "last.pt"
            then = ("last.pt left as it was (the last validation); --resume continues from there" if last.exists()
                    else "no checkpoint yet: start the run again")
            return TrainingInterrupted(f"{how} during the weight update of step {p.step + 1}: {then}", signum)
        path = self._undo_step_and_save_last()
        if not run.dist.is_main:
            return TrainingInterrupted(f"{how} at step {p.step} (process {run.dist.rank}; process 0 saves last.pt)",
                                       signum)
        self._draw_final_curves()
        return TrainingInterrupted(f"{how} at step {p.step}: saved {path}; continue with --resume", signum)
