"""Timing kernels against each other on this machine, and keeping the answer: what the choice of the int8
kernels (`int8`) and of the packed fp32 product (`packed_linear`) is measured with.

A variant is timed in interleaved rounds on the same input, the fastest block of calls kept (it resists other
processes' load); the times are cached in precision.json under a key naming the CPU model, its flags, the torch
version, the thread count and the workload (`precision.machine_key`), and a measurement taken while the machine
was busy is used but taken again once it is quieter.
"""
from __future__ import annotations

import datetime
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from interlingua.precision import cache_path, read_cache, write_cache

log = logging.getLogger(__name__)

_ROUNDS = 5
"""Interleaved rounds per shape and row count (the minimum per call is kept: it resists other processes' load)..."""
_MIN_ROUNDS = 3
_BUDGET_S = 0.1
"""...or `_MIN_ROUNDS` where those took more than this many seconds (big output layers)."""
_BLOCK_S = 2e-3
"""Seconds a round times each variant for, in whole calls (at least one)."""



def shape_label(n_in: int, n_out: int) -> str:
    """A layer shape as the measurements name it: 'in x out' weights."""
    return f"{n_in}x{n_out}"


@dataclass
class KernelTimes:
    """Seconds per call of fp32 and of each other variant, per layer shape (`shape_label`): int8's kernels added up
    over `int8.MEASURE_ROWS`, the packed fp32 product (`packed_linear`) per shape and row count; None for a variant
    not timed at that shape, with why in `given_up`."""

    seconds: dict[str, dict[str, float | None]]
    given_up: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "given_up": self.given_up}

    @classmethod
    def from_json(cls, data: Any) -> KernelTimes | None:
        """The times of a cache entry; None for an entry of another form."""
        if not isinstance(data, dict) or not isinstance(data.get("seconds"), dict):
            return None
        seconds: dict[str, dict[str, float | None]] = {}
        for label, row in data["seconds"].items():
            if not isinstance(row, dict) or not isinstance(row.get("fp32"), (int, float)):
                return None
            seconds[label] = {k: None if v is None else float(v) for k, v in row.items()}
        given_up = data.get("given_up") or {}
        return cls(seconds, {str(k): str(v) for k, v in given_up.items()} if isinstance(given_up, dict) else {})


def time_block(fn: Callable[[torch.Tensor], object], x: torch.Tensor, calls: int) -> float:
    """Seconds per call of `calls` calls of fn(x)."""
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(x)
    return (time.perf_counter() - t0) / calls


def first_calls(variants: Mapping[str, Callable[[torch.Tensor], object]], x: torch.Tensor) -> dict[str, float]:
    """Seconds of one call of each variant on `x`, after a warm-up call (allocations, oneDNN's primitive for
    this shape): the estimate `fastest_calls` sizes its blocks by."""
    return {name: min(time_block(fn, x, 1), time_block(fn, x, 1)) for name, fn in variants.items()}


def fastest_calls(variants: Mapping[str, Callable[[torch.Tensor], object]], x: torch.Tensor,
                  estimate: Mapping[str, float]) -> dict[str, float]:
    """Seconds per call of each variant on `x`: `_ROUNDS` interleaved rounds (`_MIN_ROUNDS` where they take
    over `_BUDGET_S`), each timing every variant for about `_BLOCK_S` in whole calls (sized by `estimate`,
    from `first_calls`), the fastest block kept (it resists other processes' load)."""
    calls = {name: max(1, min(100, int(_BLOCK_S / max(estimate[name], 1e-7)))) for name in variants}
    best = {name: float("inf") for name in variants}
    started = time.perf_counter()
    for i in range(_ROUNDS):
        if i >= _MIN_ROUNDS and time.perf_counter() - started > _BUDGET_S:
            break
        for name, fn in variants.items():
            best[name] = min(best[name], time_block(fn, x, calls[name]))
    return best


def ms_text(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.3g} ms" if ms < 100 else f"{ms:,.0f} ms"


def random_linear(n_in: int, n_out: int, gen: torch.Generator) -> nn.Linear:
    """An `nn.Linear` (in, out) with random weights drawn from `gen`, of a trained layer's scale: what is timed."""
    linear = nn.Linear(n_in, n_out)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(n_out, n_in, generator=gen) / n_in ** 0.5)
    return linear


def cached_times(key: str, labels: Iterable[str], measure: Callable[[], KernelTimes], what: str,
                 summary: Callable[[KernelTimes], dict[str, Any]] | None = None) -> tuple[KernelTimes, bool]:
    """The kernel times cached in precision.json under `key` (from `precision.machine_key`: CPU model, flags,
    torch version, thread count, workload) where they cover `labels`, else `measure()`d now and cached (with
    `summary(times)`'s fields beside them, how long it took and when); True where they came from the cache. A
    measurement taken while the machine was busy (`_busy`) is used, marked, and taken again (`what` in the
    log) once the machine is quieter."""
    path = cache_path()
    cached = read_cache(path)
    entry = cached.get(key)
    times = KernelTimes.from_json(entry)
    load = load_average()
    if times is not None and set(times.seconds) == set(labels):
        assert isinstance(entry, dict)
        if not (entry.get("busy_load") and load is not None and not _busy(load)):
            return times, True
        log.info("timing %s again: the last time the machine was busy (load %s)", what, entry["busy_load"])
    t0 = time.perf_counter()
    times = measure()
    cached[key] = {**times.to_json(), **(summary(times) if summary is not None else {}),
                   "took_s": round(time.perf_counter() - t0, 2),
                   "measured": datetime.datetime.now().isoformat(timespec="seconds"),
                   **({"busy_load": round(load, 2)} if load is not None and _busy(load) else {})}
    write_cache(path, cached)
    return times, False


def load_average() -> float | None:
    """The 1-minute load average (None where the platform has none)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _busy(load: float) -> bool:
    """Whether other processes compete for the CPUs: then timings mislead (with threads waiting on each other,
    fp32 and int8 alike ran 10-20x slower here), so such a measurement is used but taken again once the
    machine is quieter."""
    return load > (os.cpu_count() or 1)
