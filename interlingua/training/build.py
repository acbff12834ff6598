"""Everything a training run is made of before its first step: `build_run` turns a config into the
model, optimizer, learning-rate and direction schedules, batch plans and dev sets (a `run.Run`), with the training
state of a resumed run (or the weights of an `--init` checkpoint) loaded into them.

The order of the building is part of the run: the model's initial weights and everything after
are drawn from the seeded RNG in this order, so it is kept as it is (a reordering changes every
number a run produces).
"""
from __future__ import annotations

import logging
from pathlib import Path

import torch

from interlingua.config import ExperimentConfig
from interlingua.data.directions import DirectionScheduler, build_directions, check_synthetic, zero_shot_directions
from interlingua.data.prepare import PreparedData, prepare
from interlingua.data.vocab import Vocab
from interlingua.distributed import Distributed
from interlingua.errors import ConfigError
from interlingua.memory import memory_for
from interlingua.modules.model import TranslationNetwork
from interlingua.runtime import Runtime
from interlingua.training.compiled import compiled_forward
from interlingua.training.distribution import check_batch_split, check_same_vocabs, lock_work_dir, seed_dropout
from interlingua.training.metrics import MetricsLog
from interlingua.training.precision_probe import auto_precision
from interlingua.training.run import (
    Run,
    direction_batches,
    direction_tokens,
    loss_terms,
    lr_factor,
    step_directions,
    steps_per_epoch,
)
from interlingua.training.state import load_init_weights, read_init_checkpoint, read_resume_checkpoint, resume_run
from interlingua.training.tensorboard_log import require_tensorboard
from interlingua.training.validation import build_devsets, check_dev_files

log = logging.getLogger(__name__)


def build_run(cfg: ExperimentConfig, resume: bool = False, init: str | Path | None = None,
              data: PreparedData | None = None, dist: Distributed | None = None, device: str | None = None) -> Run:
    """The run `cfg` describes, holding the work_dir's lock (given back by `Run.close`, or here if
    building fails). `resume`: go on from work_dir/last.pt. `init`: start from that checkpoint's
    weights and vocabularies (fine-tuning, e.g. after `interlingua extend`), with a fresh optimizer
    and step count. `data`: the corpus already prepared; `dist`: this process's place among several;
    `device`: the process's device in place of `train.device`."""
    dist = dist or Distributed()
    work_dir = Path(cfg.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    if cfg.train.tensorboard:
        require_tensorboard()
    lock = lock_work_dir(work_dir, dist)
    try:
        run = _build(cfg, resume, init, data, dist, device)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    run.lock = lock
    return run


def _build(cfg: ExperimentConfig, resume: bool, init: str | Path | None, data: PreparedData | None,
           dist: Distributed, device: str | None) -> Run:
    tc = cfg.train
    check_batch_split(tc, dist)
    # precision `auto` is settled below by timing this model (a placeholder until then)
    runtime = Runtime.create(device or tc.device, "fp32" if tc.precision == "auto" else tc.precision,
                             tc.threads, tc.seed).apply()
    if tc.trainable == "bridge" and init is None and not resume:
        raise ConfigError("train.trainable: bridge trains new shared layers on top of a trained translation "
                          "model: give that model with --init CHECKPOINT")
    # Read the checkpoint before the (possibly long) data preparation: a bad one fails at once.
    resume_from = read_resume_checkpoint(Path(cfg.work_dir)) if resume else None
    init_from = read_init_checkpoint(cfg, init) if init is not None and resume_from is None else None
    init_name = str(init) if init is not None else None
    if resume_from is not None and resume_from.training is not None and resume_from.training.init:
        init_name = resume_from.training.init  # a fine-tuning run: its vocabularies
        init_from = resume_from
    given_vocabs = init_from.load_vocabs() if init_from is not None else None
    data = data or dist.in_turn(lambda: prepare(cfg, vocabs=given_vocabs))
    if resume_from is not None and given_vocabs is None:
        stored = resume_from.load_vocabs()
        differ = _other_vocabularies(data.vocabs, stored)
        if differ:  # the corpus prepared again since (its files changed): ids would no longer mean the same
            log.warning("the prepared vocabularies of %s differ from those last.pt was trained with; encoding the "
                        "corpus again with the checkpoint's", ", ".join(differ))
            data = dist.in_turn(lambda: prepare(cfg, vocabs=stored))
    check_same_vocabs(data, dist, Path(cfg.work_dir))
    check_dev_files(data, cfg.corpus)

    directions = build_directions(cfg.directions, data.languages)
    zero_shot = zero_shot_directions(directions, data.languages)
    with memory_for("the model (the config's model section)"):
        network = TranslationNetwork(cfg.model, {lang: len(v) for lang, v in data.vocabs.items()},
                                   sorted({s for s, _ in directions}), sorted({t for _, t in directions}))
    if init_from is not None and resume_from is None:
        assert init is not None
        load_init_weights(network, init_from, tc.trainable, Path(init))
    if tc.trainable == "bridge":
        network.freeze_translation()
    network.check_agreement(tc.agreement, directions)
    check_synthetic(tc.synthetic, directions, zero_shot)
    network.restrict_to_vocabs(data.vocabs)
    with memory_for("the model (the config's model section)", runtime.device):
        network.to(runtime.device)

    trained = [p for p in network.parameters() if p.requires_grad]
    optimizer = (torch.optim.SGD(trained, lr=tc.lr) if tc.optimizer == "sgd"
                 else torch.optim.Adam(trained, lr=tc.lr, betas=tc.adam_betas, fused=True))
    factor = lr_factor(tc.lr_schedule, tc.warmup_steps)
    lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    rotated = step_directions(cfg, directions)
    direction_scheduler = DirectionScheduler(rotated, tc.seed)
    batches = {d: direction_batches(cfg, data, directions, d, direction_tokens(tc.batch_tokens, len(rotated)))
               for d in rotated}
    max_steps = tc.max_steps if tc.epochs is None else tc.epochs * steps_per_epoch(tc, list(batches.values()))

    if tc.precision == "auto":
        vocab_sizes = {lang: len(v) for lang, v in data.vocabs.items()}
        chosen = (auto_precision(cfg, network, next(iter(batches.values())), runtime, loss_terms(cfg), vocab_sizes)
                  if dist.is_main else None)
        decided = dist.broadcast(chosen)  # rank 0's
        assert decided is not None
        runtime = runtime.with_precision(decided)
    scaler = runtime.grad_scaler()  # after `auto` is settled: fp16 (older GPUs) needs one
    log.info("training on %s%s", runtime.describe(),
             f"; process {dist.rank} of {dist.world_size} ({dist.backend})" if dist.active else "")
    devsets = build_devsets(data, directions, zero_shot, cfg.preprocess.max_valid_sentences, cfg.preprocess.max_len)
    metrics = MetricsLog(Path(cfg.work_dir), draw=cfg.train.curves)
    run = Run(cfg, dist, runtime, data, directions, zero_shot, network, optimizer, factor, lr_scheduler,
              direction_scheduler, batches, max_steps, scaler, devsets, metrics, init=init_name)

    if resume_from is not None:
        run.progress = resume_run(run, resume_from)
    elif (run.work_dir / "last.pt").exists():
        raise ConfigError(f"{run.work_dir} already holds a run (last.pt); use --resume to continue it or choose "
                          f"another work_dir")
    seed_dropout(dist, tc.seed, run.progress.step)
    run.trained = dist.wrap(network, some_unused=len(rotated) > 1)
    if tc.compile is not False:
        run.compiled = compiled_forward(cfg, dist, network, run.trained, next(iter(batches.values())), runtime,
                                        run.loss_terms(), {lang: len(v) for lang, v in data.vocabs.items()})
    return run


def _other_vocabularies(prepared: dict[str, Vocab], stored: dict[str, Vocab]) -> list[str]:
    """The languages whose prepared vocabulary is not the one a checkpoint stores (its sentencepiece model or the
    offset of its ids): a run resumed on them would read every id as another subword."""
    return sorted(lang for lang in set(prepared) | set(stored)
                  if lang not in prepared or lang not in stored or prepared[lang].proto != stored[lang].proto
                  or prepared[lang].offset != stored[lang].offset)
