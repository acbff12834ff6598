"""The training state between the live run and its checkpoints: what a checkpoint stores of a run and its
`Progress` (`capture_state`), and going on from one (`resume`) or starting
from another run's weights (`read_init_checkpoint`, `load_init_weights`).

Every source of randomness is either derived from the seed and a counter (direction order, batch
order) or saved here (torch's RNG for dropout), so a run resumed from `last.pt` continues exactly
as an uninterrupted one with the same seed. The file layout is `interlingua.model_files.checkpoint`'s.
"""
from __future__ import annotations

import logging
from pathlib import Path

from interlingua.config import ExperimentConfig
from interlingua.data.directions import direction_name
from interlingua.errors import CheckpointError, ConfigError, one_line
from interlingua.model_files.checkpoint import Checkpoint, TrainingState
from interlingua.modules.model import TranslationNetwork
from interlingua.records import Validation
from interlingua.training.metrics import empty_window
from interlingua.training.run import Progress, Run
from interlingua.training.validation import rescored

log = logging.getLogger(__name__)

SAME_SECTIONS = ("model", "directions", "preprocess")
"""The config sections a resumed run must share with its checkpoint (the others may change, e.g. the budget)."""


def capture_state(run: Run, progress: Progress, history: list[Validation] | None = None,
                  best_bleu: float | None = None) -> TrainingState:
    """The run's state now, for a checkpoint; `history` and `best_bleu` in place of the progress's
    (a validation saves its files before the progress takes its record)."""
    return TrainingState(
        step=progress.step,
        max_steps=run.max_steps,
        elapsed=progress.elapsed,
        best_bleu=progress.best_bleu if best_bleu is None else best_bleu,
        history=progress.history if history is None else history,
        optimizer=run.optimizer.state_dict(),
        direction_scheduler=run.direction_scheduler.state_dict(),
        lr_scheduler=run.lr_scheduler.state_dict(),
        batches={direction_name(d): b.state_dict() for d, b in run.batches.items()},
        torch_rng=run.runtime.rng_state(),
        grad_scaler=run.scaler.state_dict() if run.scaler else None,
        log_window=dict(progress.window),
        init=run.init,
    )


def read_resume_checkpoint(work_dir: Path) -> Checkpoint:
    """work_dir/last.pt, which must hold a training state."""
    path = work_dir / "last.pt"
    if not path.exists():
        raise CheckpointError(f"nothing to resume: {path} does not exist (start the run without --resume)")
    try:
        ckpt = Checkpoint.read(path)
    except CheckpointError as err:
        raise CheckpointError(f"{err}{_earlier_state(work_dir)}") from None
    if ckpt.training is None:
        raise CheckpointError(f"{path} holds no training state to resume from (a checkpoint for translation only?)")
    return ckpt


def _earlier_state(work_dir: Path) -> str:
    """Where a run whose last.pt is damaged can go on from: best.pt, when it is readable and holds a training state
    (said, not done: going back to an earlier step is the user's choice)."""
    best = work_dir / "best.pt"
    try:
        state = Checkpoint.read(best).training if best.is_file() else None
    except CheckpointError:
        return ""
    if state is None:
        return ""
    return (f"; {best} holds the training state of step {state.step}: copy it over last.pt to resume from that step "
            f"(`cp {best} {work_dir / 'last.pt'}`)")


def resume_run(run: Run, ckpt: Checkpoint) -> Progress:
    """Put the run where `ckpt` (its last.pt) left it: weights, optimizer, schedules, batch positions,
    RNG; drop the metrics.jsonl lines written after it. Returns the progress it had."""
    path = run.work_dir / "last.pt"
    stored = ckpt.experiment_config().model_dump(mode="json")
    wanted = run.cfg.model_dump(mode="json")
    for section in SAME_SECTIONS:
        if stored[section] != wanted[section]:
            raise ConfigError(f"cannot resume {path}: config section '{section}' differs from the one it was "
                              f"trained with")
    st = ckpt.training
    assert st is not None  # read_resume_checkpoint's check
    optimizer, direction_scheduler = st.optimizer, st.direction_scheduler
    try:
        if optimizer is None or direction_scheduler is None:
            raise KeyError("optimizer" if optimizer is None else "scheduler")  # the checkpoint's key
        run.network.load_state_dict(ckpt.weights)
        run.optimizer.load_state_dict(optimizer)
        run.direction_scheduler.load_state_dict(direction_scheduler)
        if st.lr_scheduler is not None:  # checkpoints written before the schedule existed: constant lr
            run.lr_scheduler.load_state_dict(st.lr_scheduler)
        for d, b in run.batches.items():
            b.load_state_dict(st.batches[direction_name(d)])
        run.runtime.set_rng_state(st.torch_rng)
        if run.scaler and st.grad_scaler:
            run.scaler.load_state_dict(st.grad_scaler)
    except (AttributeError, KeyError, RuntimeError, TypeError, ValueError) as err:
        raise CheckpointError(f"cannot resume {path}: its training state does not fit this run "
                              f"(corrupt checkpoint?): {one_line(err)}") from None
    history, best_bleu = rescored_history(run, st.history, st.best_bleu)
    progress = Progress(st.step, st.elapsed, best_bleu, history, {**empty_window(), **st.log_window})
    if run.dist.is_main:
        run.metrics.reconcile(progress.step, progress.validated, window_open=progress.window["n"] > 0)
    log.info("resumed from %s at step %d", path, progress.step)
    return progress


def rescored_history(run: Run, history: list[Validation],
                     best_bleu: float | None) -> tuple[list[Validation], float | None]:
    """The stored validations scored as this run scores its own (`validation.rescored`), and the score of the
    one best.pt holds (the first to reach the stored best) on that scale. Logs where the scale changed."""
    wanted = run.cfg.train.synthetic.selection == "with_made"
    now = [rescored(v, run.zero_resource, wanted) for v in history]
    if best_bleu is None:
        return now, None
    held = next((i for i, v in enumerate(history) if v.mean_bleu == best_bleu), None)
    if held is None:  # a state written before its history held the best's record: keep it as stored
        return now, best_bleu
    best_now = now[held].mean_bleu
    if best_now != best_bleu:
        log.info("the dev mean that selects best.pt changed since it was chosen (train.synthetic: selection %s, "
                 "directions trained on made pairs: %d): best.pt (step %d) now scores %s instead of %.2f, and "
                 "later validations are compared with that", run.cfg.train.synthetic.selection,
                 len(run.zero_resource), history[held].step,
                 "n/a" if best_now is None else f"{best_now:.2f}", best_bleu)
    return now, best_now


def read_init_checkpoint(cfg: ExperimentConfig, init: str | Path) -> Checkpoint:
    """The checkpoint to fine-tune from; its model section must be the config's (but for the
    bridge, where only a new bridge is trained on top of it)."""
    ckpt = Checkpoint.read(init)
    stored = ckpt.experiment_config().model_dump(mode="json")["model"]
    wanted = cfg.model_dump(mode="json")["model"]
    if cfg.train.trainable == "bridge":
        stored.pop("bridge"), wanted.pop("bridge")
    if stored != wanted:
        diff = next(k for k in sorted(set(stored) | set(wanted)) if stored.get(k) != wanted.get(k))
        raise ConfigError(f"cannot start from {init}: the config's model section differs from the checkpoint's "
                          f"(model.{diff}: {wanted.get(diff)!r} here, {stored.get(diff)!r} in the checkpoint)")
    return ckpt


def load_init_weights(network: TranslationNetwork, ckpt: Checkpoint, trainable: str, path: Path) -> None:
    """The checkpoint's weights; with `trainable: bridge` its encoders and decoders only (those of
    languages this run does not use are left out) and the bridge stays new."""
    weights = ckpt.weights
    if trainable == "bridge":
        wanted = {k for k in network.state_dict() if not k.startswith("bridge.")}
        missing = sorted(wanted - set(weights))
        if missing:
            raise CheckpointError(f"cannot start from {path}: it lacks {len(missing)} weights this run's encoders "
                                  f"and decoders need (languages or directions it was not trained on?), "
                                  f"e.g. {missing[0]}")
        weights = {k: v for k, v in weights.items() if k in wanted}
        weights.update({k: v for k, v in network.state_dict().items() if k.startswith("bridge.")})
    try:
        network.load_state_dict(weights)
    except (KeyError, RuntimeError) as err:
        raise CheckpointError(f"cannot start from {path}: its weights do not fit this run's model "
                              f"(directions or languages?): {one_line(err)}") from None
    log.info("starting from the weights of %s", path)

