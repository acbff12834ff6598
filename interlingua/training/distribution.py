"""What the training processes of a torchrun launch agree on before they train as one: the work_dir's
lock, the batch split, the vocabularies and their random streams (`interlingua.distributed` does the
communication; with one process every check here passes at once)."""
from __future__ import annotations

import zlib
from pathlib import Path

import torch

from interlingua.config import TrainConfig
from interlingua.data.prepare import PreparedData
from interlingua.distributed import Distributed
from interlingua.errors import ConfigError, DataError, InterlinguaError
from interlingua.training.work_dir_lock import WorkDirLock, remove_stale_temporaries


def check_batch_split(tc: TrainConfig, dist: Distributed) -> None:
    """Every process x accumulation part gets at least one sentence of a step's batch (token batches
    are not checked: a part that comes out empty is trained as a filler of weight 0)."""
    parts = dist.world_size * tc.accumulate
    if tc.batch_tokens is None and tc.batch_size < parts:
        raise ConfigError(f"train.batch_size {tc.batch_size} is split into {dist.world_size} process(es) x "
                          f"train.accumulate {tc.accumulate} = {parts} parts: it must be at least {parts}")


def lock_work_dir(work_dir: Path, dist: Distributed) -> WorkDirLock | None:
    """Rank 0 locks the work_dir for the run (the other processes share its files, on a filesystem
    every node sees); its success or refusal is every process's, so none waits for a partner that stopped.
    Holding it, rank 0 removes the temporary files earlier runs' killed writers left there."""
    lock, refused = None, None
    if dist.is_main:
        lock = WorkDirLock(work_dir)
        try:
            lock.acquire()
        except (InterlinguaError, OSError) as err:
            refused = err
    refused = dist.broadcast(refused)
    if refused is not None:
        raise refused
    if dist.is_main:
        remove_stale_temporaries(work_dir)
    return lock


def check_same_vocabs(data: PreparedData, dist: Distributed, work_dir: Path) -> None:
    """Every process must have prepared the same vocabularies: a node that cannot see rank 0's
    prepared corpus trains its own sentencepiece models, which may differ."""
    digest = zlib.crc32(b"".join(v.proto for _, v in sorted(data.vocabs.items())))
    if len(set(dist.gather(digest))) > 1:
        raise DataError(f"the training processes prepared different vocabularies: put work_dir "
                        f"({work_dir}) on a filesystem every node shares")


def seed_dropout(dist: Distributed, seed: int, step: int) -> None:
    """Dropout masks differ between processes: each but rank 0 (which keeps the run's own stream)
    draws from a stream of its own, fixed by the seed, its rank and the step it starts at."""
    if dist.rank > 0:
        torch.manual_seed(seed * 1_000_003 + dist.rank * 7919 + step)
