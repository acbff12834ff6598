"""Numeric precision on the CPU: bf16 autocast only where the hardware does bf16 natively.

On CPUs with AMX or AVX512-BF16, bf16 matrix products run several times faster than fp32;
elsewhere PyTorch emulates bf16 and it is hundreds of times *slower*, so `auto` falls back
to fp32. Master weights and the loss stay fp32 either way.
"""
from __future__ import annotations

import contextlib
import functools
import logging
from pathlib import Path

import torch

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def cpu_has_native_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(f in flags for f in ("amx_bf16", "avx512_bf16"))


def resolve_precision(requested: str) -> str:
    """'auto' -> 'bf16' or 'fp32' for this CPU; an explicit 'bf16' on a CPU without it warns."""
    if requested == "auto":
        return "bf16" if cpu_has_native_bf16() else "fp32"
    if requested == "bf16" and not cpu_has_native_bf16():
        log.warning("precision bf16 requested but this CPU has no native bf16 (no AMX/AVX512-BF16): expect it to be slow")
    return requested


def autocast(precision: str) -> contextlib.AbstractContextManager:
    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()
