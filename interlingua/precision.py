"""Numeric precision on the CPU: bf16 autocast only where it is measured to be faster here.

bf16 needs dot-product instructions to be fast: AMX (Intel Sapphire Rapids and later) or
AVX512-BF16 (e.g. AMD Zen 4). Without either PyTorch emulates bf16, hundreds of times slower,
so `auto` is fp32 there without further ado. With them the outcome depends on the chip: on
an AMD EPYC with AVX512-BF16 bf16 training steps run faster than fp32, on an Intel Xeon with
AVX512-BF16 but no AMX slower; and it differs by model (on one AMD EPYC a recurrent model
trained faster in bf16, a Transformer slower, while a single synthetic Transformer layer claimed
bf16 was faster). So where the flags allow bf16, `auto` times a few training steps (forward and
backward) in both precisions, interleaved: of the model about to be trained where there is one
(`training.precision_probe`), else of a small LSTM + output layer; it keeps bf16 only when it
wins clearly. The answer is cached per CPU model, flags, torch version, thread count and
workload (the model's configuration) in precision.json in the cache folder (`interlingua.cache`).
Master weights and the loss stay fp32 either way.
"""
from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import json
import logging
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from interlingua.atomic_files import write_text_atomic
from interlingua.cache import cache_dir

log = logging.getLogger(__name__)

NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")
"""/proc/cpuinfo flags of the instructions that make bf16 matrix products fast."""

MIN_BF16_SPEEDUP = 1.1
"""`auto` keeps bf16 only when its probe steps are at least this much faster than fp32 ones."""

INT8_FLAGS = ("amx_int8", "avx512_vnni", "avx_vnni")
"""/proc/cpuinfo flags of int8 dot-product instructions (part of the cache key of int8's measurements)."""


def parse_cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The feature flags of the first CPU listed in a /proc/cpuinfo text ('flags' on x86)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def parse_cpu_model(cpuinfo: str) -> str:
    """The 'model name' of the first CPU in a /proc/cpuinfo text ('' when absent)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value.strip()
    return ""


@functools.lru_cache(maxsize=1)
def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def cpu_flags() -> frozenset[str]:
    """This machine's CPU flags (empty where /proc/cpuinfo cannot be read)."""
    return parse_cpu_flags(_cpuinfo())


def cpu_model() -> str:
    """This machine's CPU model name, or the platform's processor string."""
    import platform
    return parse_cpu_model(_cpuinfo()) or platform.processor() or platform.machine()


def _torch_probe(name: str) -> bool:
    probe = getattr(torch.cpu, name, None)  # private helpers of torch.cpu (x86 builds)
    try:
        return bool(probe()) if probe is not None else False
    except Exception:  # noqa: BLE001 - no answer means no such instructions
        return False


def native_bf16_features() -> list[str]:
    """AMX-BF16 / AVX512-BF16 as found in /proc/cpuinfo, or where it is missing from torch's own probes."""
    flags = cpu_flags()
    if flags:
        return [f for f in NATIVE_BF16_FLAGS if f in flags]
    found = []
    if _torch_probe("_is_amx_tile_supported"):
        found.append("amx_bf16")
    if _torch_probe("_is_avx512_bf16_supported"):
        found.append("avx512_bf16")
    return found


def int8_features() -> list[str]:
    """The int8 dot-product instructions of this CPU (`INT8_FLAGS` found in /proc/cpuinfo)."""
    flags = cpu_flags()
    return [f for f in INT8_FLAGS if f in flags]


def cpu_has_native_bf16() -> bool:
    return bool(native_bf16_features())


def lstm_needs_fp32(device: torch.device) -> bool:
    """Whether an LSTM on `device` has to leave bf16 autocast: the CPU's bf16 autocast is on and this machine's
    oneDNN has no bf16 LSTM (CPUs without native bf16; `modules.lstm.LSTM`)."""
    return (device.type == "cpu" and torch.is_autocast_enabled("cpu")
            and torch.get_autocast_dtype("cpu") == torch.bfloat16 and not _cpu_bf16_lstm_works())


@functools.cache
def _cpu_bf16_lstm_works() -> bool:
    """One tiny LSTM call under bf16 autocast, tried once: the machine answers, not its flags."""
    try:
        with torch.inference_mode(False), torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            torch.nn.LSTM(4, 4, batch_first=True)(torch.zeros(1, 2, 4))
        return True
    except RuntimeError:
        return False


def measure_bf16_speedup(steps: int = 4, batch: int = 32, length: int = 16, hidden: int = 256,
                         vocab: int = 4000) -> float:
    """fp32 step time / bf16 step time of a small LSTM + output layer, forward and backward: the
    probe where no model is at hand."""
    gen = torch.Generator().manual_seed(0)
    lstm = torch.nn.LSTM(hidden, hidden, batch_first=True)
    out = torch.nn.Linear(hidden, vocab)
    x = torch.randn(batch, length, hidden, generator=gen)
    y = torch.randint(vocab, (batch * length,), generator=gen)

    def step(precision: str) -> None:
        with autocast(precision):
            # no bf16 LSTM kernel on this CPU: the LSTM in fp32, as `modules.lstm.LSTM` runs it
            with torch.autocast("cpu", enabled=False) if lstm_needs_fp32(x.device) else contextlib.nullcontext():
                h, _ = lstm(x)
            loss = torch.nn.functional.cross_entropy(out(h).reshape(-1, vocab).float(), y)
        loss.backward()
        lstm.zero_grad(set_to_none=True)
        out.zero_grad(set_to_none=True)

    return measure_speedup(step, steps)


def measure_speedup(step: Callable[[str], object], steps: int = 4, pair: tuple[str, str] = ("fp32", "bf16")) -> float:
    """fp32 time / bf16 time of `step(precision)`, run `steps` times in each precision (`pair`: the
    precisions compared, the first's time over the second's).

    The two precisions alternate step by step (after one warm-up step each), so a machine that
    slows down during the probe slows both alike; medians resist single slow steps."""
    times: dict[str, list[float]] = {name: [] for name in pair}
    for i in range(steps + 1):
        for precision in pair:
            t0 = time.perf_counter()
            step(precision)
            if i:
                times[precision].append(time.perf_counter() - t0)
    return statistics.median(times[pair[0]]) / statistics.median(times[pair[1]])


def model_workload(model_config: dict[str, Any], vocab_sizes: dict[str, int], batch_size: int) -> str:
    """The cache name of a model's bf16 speed-up: what decides its step time (kinds, sizes, batch)."""
    text = json.dumps({"model": model_config, "vocab": vocab_sizes, "batch": batch_size}, sort_keys=True)
    kinds = f"{model_config['encoder']['type']}-{model_config['bridge']['type']}-{model_config['decoder']['type']}"
    return f"model {kinds} {hashlib.sha1(text.encode()).hexdigest()[:12]}"


def cache_path() -> Path:
    return cache_dir() / "precision.json"


DEFAULT_WORKLOAD = "lstm probe"
"""The cache entry of `measure_bf16_speedup`."""


def machine_key(features: list[str], workload: str) -> str:
    """The cache key of a measurement: CPU model, the features it depends on, torch version, threads, workload
    (what int8 and the packed output layer key their kernel timings by too)."""
    return (f"{cpu_model()} | {'+'.join(features)} | torch {torch.__version__} | threads {torch.get_num_threads()}"
            f" | {workload}")


def read_cache(path: Path) -> dict:
    """The measurement cache (precision.json); empty where it is missing or unreadable."""
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def write_cache(path: Path, data: dict) -> None:
    """Write the measurement cache atomically; a folder that cannot be written is a warning, not an error."""
    try:
        write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True))
    except OSError as err:  # a read-only home must not stop training
        log.warning("could not cache the precision probe in %s: %s", path, err)


def cached_speedup(workload: str, measure: Callable[[], float], features: list[str] | None = None,
                   what: str = "bf16") -> float:
    """A speed-up measured by `measure` once per machine (CPU model, `features`, torch version, threads)
    and `workload`, then read from the cache; `what` names it in the log."""
    key = machine_key(features or [], workload)
    path = cache_path()
    cached = read_cache(path)
    entry = cached.get(key)
    if isinstance(entry, dict) and isinstance(entry.get("speedup"), (int, float)):
        return float(entry["speedup"])
    log.info("measuring whether %s is faster here for %s (once per machine)", what, workload)
    speedup = measure()
    cached[key] = {"speedup": round(speedup, 3), "measured": datetime.datetime.now().isoformat(timespec="seconds")}
    write_cache(path, cached)
    return speedup


def bf16_speedup(probe: Callable[[], float] | None = None, workload: str = DEFAULT_WORKLOAD) -> float:
    """This machine's measured bf16 speed-up for `workload`, from the cache or from `probe` run now
    (a few seconds; the LSTM probe by default)."""
    return cached_speedup(workload, probe or measure_bf16_speedup, native_bf16_features(), "bf16 (against fp32)")


def resolve_precision(requested: str, probe: Callable[[], float] | None = None,
                      workload: str = DEFAULT_WORKLOAD) -> str:
    """'auto' -> 'bf16' where the CPU has native bf16 and bf16 steps of `workload` (timed by
    `probe`) measure faster here, else 'fp32'.

    An explicit 'bf16' on a CPU without native bf16 is kept but warned about."""
    if requested == "auto":
        features = native_bf16_features()
        if not features:
            return "fp32"
        speedup = bf16_speedup(probe, workload)
        choice = "bf16" if speedup >= MIN_BF16_SPEEDUP else "fp32"
        log.info("precision auto -> %s (%s; bf16 steps of %s %.2fx the speed of fp32 here, cached in %s)",
                 choice, "+".join(features), workload, speedup, cache_path())
        return choice
    if requested == "bf16" and not cpu_has_native_bf16():
        log.warning("precision bf16 requested but this CPU has no native bf16 (no AMX / AVX512-BF16): "
                    "it is emulated, expect training to be far slower than fp32")
    return requested


def autocast(precision: str) -> contextlib.AbstractContextManager:
    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()
