"""Several training processes as one (torch.distributed, launched by torchrun): the one place that
knows about process groups.

`torchrun` starts one process per device and tells each its place through the environment
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR / MASTER_PORT); `Distributed.from_environment` reads
it, joins the process group (`gloo` on CPUs, `nccl` on CUDA GPUs) and picks the process's
device (its local rank's GPU). Started without torchrun, it is the one-process context, whose
every operation is a no-op, so the trainer has one code path.

What the trainer relies on: rank 0 (`is_main`) alone writes files and logs; `broadcast` hands
rank 0's decisions (validation record, precision) to the others; `sum` adds small per-step
statistics; `wrap` puts the model into DistributedDataParallel, which averages the gradients.
"""
from __future__ import annotations

import contextlib
import datetime
import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import torch
import torch.distributed as dist

from interlingua.errors import ConfigError

T = TypeVar("T")

# Rank 0 validates while the others wait in a collective: allow long validations (gloo's and
# nccl's defaults, 30 and 10 minutes, are shorter than a paper-size dev set can take).
COLLECTIVE_TIMEOUT = datetime.timedelta(hours=2)


@dataclass(frozen=True)
class Distributed:
    """This process's place among the training processes (one process: rank 0 of 1)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None
    """`gloo` or `nccl` while a process group is joined; None for one process."""

    @property
    def active(self) -> bool:
        return self.backend is not None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_environment(cls, device: str) -> tuple[Distributed, str]:
        """The context torchrun's environment describes, with its process group joined, and the
        device this process trains on (`device` as configured; a GPU request becomes the local
        rank's GPU). Without torchrun, or with one process: the one-process context, `device`."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls(), device
        rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
        kind = (device or "auto").split(":", 1)[0]
        gpu = kind == "cuda" or (kind == "auto" and torch.cuda.is_available())
        if gpu:
            if torch.cuda.device_count() <= local:
                raise ConfigError(f"process {rank} has local rank {local} but this node has "
                                  f"{torch.cuda.device_count()} CUDA GPU(s): start at most that many per node "
                                  "(--nproc-per-node)")
            torch.cuda.set_device(local)
            device, backend = f"cuda:{local}", "nccl"
        elif kind in ("auto", "cpu"):
            device, backend = "cpu", "gloo"
        else:
            raise ConfigError(f"distributed training runs on CPUs (gloo) or CUDA GPUs (nccl), not on '{device}'")
        if not dist.is_initialized():
            dist.init_process_group(backend, timeout=COLLECTIVE_TIMEOUT)
        return cls(rank, world, local, backend), device

    def close(self, finished: bool = True) -> None:
        """Leave the process group. `finished` (every process got here normally): first wait for the
        others, so that none tears its connections down while another still uses them."""
        if self.active and dist.is_initialized():
            if finished:
                dist.barrier()
            dist.destroy_process_group()

    def _device(self) -> torch.device:
        return torch.device("cuda", self.local_rank) if self.backend == "nccl" else torch.device("cpu")

    def barrier(self) -> None:
        if self.active:
            dist.barrier()

    def broadcast(self, value: T) -> T:
        """Rank 0's `value` on every rank (any picklable object)."""
        if not self.active:
            return value
        box = [value if self.is_main else None]
        dist.broadcast_object_list(box, src=0, device=self._device())
        return cast(T, box[0])  # rank 0's value, on every rank

    def gather(self, value: T) -> list[T]:
        """Every rank's `value`, in rank order, on every rank."""
        if not self.active:
            return [value]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, value)
        return out

    def sum(self, values: list[float]) -> list[float]:
        """The element-wise sums over all ranks (float64, in one collective)."""
        if not self.active:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self._device())
        dist.all_reduce(t)
        return t.tolist()

    def in_turn(self, work: Callable[[], T]) -> T:
        """Run `work` first on rank 0, then on each node's first process, then everywhere else, so
        that a cache it writes (the prepared corpus) is written once and read by the rest."""
        result: Any = None
        for turn in (self.is_main, self.local_rank == 0 and not self.is_main, self.local_rank != 0):
            if turn:
                result = work()
            self.barrier()
        return result

    def wrap(self, network: torch.nn.Module, some_unused: bool = True) -> torch.nn.Module:
        """The module to train through: `network` itself, or DistributedDataParallel around it.
        `some_unused`: a step leaves some weights without gradient (with several directions, the
        other languages' encoders and decoders; the same ones on every rank), which DDP must then
        look for after each forward pass."""
        if not self.active:
            return network
        ids = [self.local_rank] if self.backend == "nccl" else None
        return torch.nn.parallel.DistributedDataParallel(network, device_ids=ids, find_unused_parameters=some_unused)

    def same_weights(self, network: torch.nn.Module) -> bool:
        """Whether every rank holds bit-identical weights (a digest of them, compared)."""
        if not self.active:
            return True
        h = hashlib.sha256()
        for name, tensor in sorted(network.state_dict().items()):
            h.update(name.encode())
            h.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
        return len(set(self.gather(h.hexdigest()))) == 1


def no_sync(module: torch.nn.Module, skip: bool) -> contextlib.AbstractContextManager:
    """DDP's `no_sync` when `skip` (a micro-batch whose gradients only accumulate locally), else nothing."""
    if skip and isinstance(module, torch.nn.parallel.DistributedDataParallel):
        return module.no_sync()
    return contextlib.nullcontext()


@contextlib.contextmanager
def process_group(device: str) -> Iterator[tuple[Distributed, str]]:
    """`Distributed.from_environment` for the length of a training run, leaving the group at its end."""
    ctx, device = Distributed.from_environment(device)
    try:
        yield ctx, device
    except BaseException:
        ctx.close(finished=False)  # the others may never arrive: no barrier
        raise
    ctx.close()
