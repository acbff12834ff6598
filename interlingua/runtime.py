"""Where and how a model runs: device, autocast precision, CPU threads and seed, in one object.

Everything that depends on the hardware is decided here, once, from what the user asked for
(`auto` by default) and what the machine has, so that no other module probes devices or sets
global torch state as a side effect:

- device `auto` is CUDA when a GPU is visible, else Apple's MPS, else the CPU;
- precision `auto` is bf16 autocast on CUDA GPUs that support it, fp16 autocast with a
  gradient scaler on older CUDA GPUs, fp32 on MPS, and on the CPU bf16 only where the CPU has
  native bf16 and timing the model's own training steps measures it faster
  (`interlingua.precision`, `training.precision_probe`);
- precision `int8` (inference on the CPU only; `interlingua.modules.int8`) runs a quantized network
  without autocast; `auto` chooses it for a loaded model only where it measures faster and keeps dev
  BLEU in a check recorded beside the model (`interlingua.inference.int8_probe`);
- threads and the seed are applied by `Runtime.apply()`, which the entry point calls.

Besides `Runtime`, torch's thread count is set in three places, each for a reason: `cli.py`
(`--threads` of a command that runs no trainer), `experiment.py` (one thread per recipe beside other
jobs) and `evaluation/sentence/compute.py` / `protocol.py` (one thread inside each probe worker, the
embedder's own count restored after it).
"""
from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import torch

from interlingua.arguments import PRECISIONS
from interlingua.errors import ConfigError
from interlingua.precision import DEFAULT_WORKLOAD, resolve_precision

log = logging.getLogger(__name__)

DEVICES = ("auto", "cpu", "cuda", "mps")


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """torch's intra-op threads set to `threads` (None: left as they are) inside the block, and given back after
    it: the setting is process-wide, so whoever narrows it for a while restores it."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def resolve_device(requested: str = "auto") -> torch.device:
    """`auto` -> cuda, mps or cpu (first available); `cuda:1` picks a GPU; unavailable devices are an error."""
    name = (requested or "auto").strip().lower()
    kind = name.split(":", 1)[0]
    if kind not in DEVICES:
        raise ConfigError(f"unknown device '{requested}': use one of {', '.join(DEVICES)} (or cuda:N)")
    if kind == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps") if _mps_available() else torch.device("cpu")
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device '{requested}' requested but no CUDA GPU is available to this torch build")
        index = int(name.split(":", 1)[1]) if ":" in name and name.split(":", 1)[1].isdigit() else None
        if index is not None and index >= torch.cuda.device_count():
            raise ConfigError(f"device '{requested}': only {torch.cuda.device_count()} CUDA GPU(s) visible")
    if kind == "mps" and not _mps_available():
        raise ConfigError(f"device '{requested}' requested but MPS is not available")
    return torch.device(name)


def resolve_device_precision(requested: str, device: torch.device, probe: Callable[[], float] | None = None,
                             workload: str = DEFAULT_WORKLOAD) -> str:
    """The autocast precision for `device`: `auto` picks what is fast there (on a CPU with native
    bf16, by timing `probe`, the bf16 speed-up of `workload`); impossible choices are errors."""
    if requested not in PRECISIONS:
        raise ConfigError(f"unknown precision '{requested}': use one of {', '.join(PRECISIONS)}")
    if requested == "int8" and device.type != "cpu":
        raise ConfigError(f"precision int8 runs on the CPU only (device is {device.type}); "
                          "use fp32, bf16 or fp16 there, or --device cpu")
    if device.type == "cuda":
        if requested == "auto":
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        return requested
    if requested == "fp16":
        raise ConfigError(f"precision fp16 needs a CUDA GPU (device is {device.type}); use bf16 or fp32")
    if device.type == "mps":
        return "fp32" if requested == "auto" else requested
    return resolve_precision(requested, probe, workload)


@dataclass(frozen=True)
class Runtime:
    """The resolved device and precision, plus the thread count and seed to apply."""

    device: torch.device
    precision: str
    threads: int | None = None
    seed: int | None = None

    @classmethod
    def create(cls, device: str = "auto", precision: str = "auto", threads: int | None = None,
               seed: int | None = None) -> Runtime:
        dev = resolve_device(device)
        return cls(dev, resolve_device_precision(precision, dev), threads, seed)

    def with_precision(self, precision: str) -> Runtime:
        """The same runtime with `precision` (already resolved) instead."""
        return replace(self, precision=precision)

    def apply(self) -> Runtime:
        """Set torch's CPU thread count (when given) and seed every generator (when given)."""
        if self.threads:
            torch.set_num_threads(self.threads)
        if self.seed is not None:
            torch.manual_seed(self.seed)  # seeds CUDA and MPS generators too
        return self

    def autocast(self) -> contextlib.AbstractContextManager:
        """Mixed-precision context for forward passes (a no-op for fp32 and int8: an int8 network computes
        in its own precisions, `interlingua.modules.int8`)."""
        if self.precision in ("fp32", "int8"):
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(self.device.type, dtype=dtype)

    def grad_scaler(self) -> torch.amp.GradScaler | None:
        """fp16 gradients underflow without loss scaling; bf16 and fp32 need none."""
        return torch.amp.GradScaler(self.device.type) if self.precision == "fp16" else None

    def rng_state(self) -> dict:
        """Every random generator a training step draws from, for exact resume."""
        state: dict[str, torch.Tensor | list[torch.Tensor]] = {"cpu": torch.get_rng_state()}
        if self.device.type == "cuda":
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def set_rng_state(self, state: dict | torch.Tensor) -> None:
        """Restore `rng_state()` (a bare CPU state from older checkpoints is accepted)."""
        if isinstance(state, torch.Tensor):
            torch.set_rng_state(state)
            return
        torch.set_rng_state(state["cpu"])
        if self.device.type == "cuda" and "cuda" in state:
            torch.cuda.set_rng_state_all(state["cuda"])

    def describe(self) -> str:
        threads = f", {self.threads} threads" if self.threads else f", {torch.get_num_threads()} threads"
        return f"{self.device} {self.precision}{threads if self.device.type == 'cpu' else ''}"
