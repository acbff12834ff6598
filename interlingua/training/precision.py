"""Numeric precision on the CPU: bf16 autocast only where the CPU computes bf16 natively.

With bf16 dot-product instructions, AMX (Intel Sapphire Rapids and later) or AVX512-BF16
(e.g. AMD Zen 4), bf16 training steps are faster than fp32 ones: on the project's AMD EPYC
VM (AVX512-BF16, no AMX) a paper-size step took 0.89 s against 1.37 s in fp32, 0.16 s against
0.28 s at the CPU recipes' size (one thread, the two interleaved in one process). Without
either, PyTorch emulates bf16, hundreds of times slower, so `auto` falls back to fp32 there.
Master weights and the loss stay fp32 either way.
"""
from __future__ import annotations

import contextlib
import functools
import logging
from pathlib import Path

import torch

log = logging.getLogger(__name__)

NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")
"""/proc/cpuinfo flags of the instructions that make bf16 matrix products fast."""


def parse_cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The feature flags of the first CPU listed in a /proc/cpuinfo text ('flags' on x86)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """This machine's CPU flags (empty where /proc/cpuinfo cannot be read)."""
    try:
        return parse_cpu_flags(Path("/proc/cpuinfo").read_text())
    except OSError:
        return frozenset()


def _torch_probe(name: str) -> bool:
    probe = getattr(torch.cpu, name, None)  # private helpers of torch.cpu (x86 builds)
    try:
        return bool(probe()) if probe is not None else False
    except Exception:  # noqa: BLE001 - no answer means no such instructions
        return False


def cpu_has_native_bf16() -> bool:
    """AMX-BF16 or AVX512-BF16: from /proc/cpuinfo, or where it is missing from torch's own probes."""
    flags = cpu_flags()
    if flags:
        return any(f in flags for f in NATIVE_BF16_FLAGS)
    return _torch_probe("_is_amx_tile_supported") or _torch_probe("_is_avx512_bf16_supported")


def resolve_precision(requested: str) -> str:
    """'auto' -> 'bf16' where the CPU has native bf16, else 'fp32'; an explicit 'bf16' on a CPU without it warns."""
    if requested == "auto":
        return "bf16" if cpu_has_native_bf16() else "fp32"
    if requested == "bf16" and not cpu_has_native_bf16():
        log.warning("precision bf16 requested but this CPU has no native bf16 (no AMX / AVX512-BF16): "
                    "it is emulated, expect training to be far slower than fp32")
    return requested


def autocast(precision: str) -> contextlib.AbstractContextManager:
    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()
