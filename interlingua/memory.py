"""An allocation that fails because the machine has too little memory, as one error naming the bytes asked
for and the memory that ran out.

Why: torch reports a model too large for the CPU's memory as a C++ assertion inside a RuntimeError
(`[enforce fail at alloc_cpu.cpp:127] ... you tried to allocate N bytes`), and the GPU's as an
OutOfMemoryError; the command line would show either as a traceback. Both are the machine's limit, not
a bug: what a user needs is the size asked for and which memory it was asked of.
"""
from __future__ import annotations

import errno
import re
from collections.abc import Iterator
from contextlib import contextmanager

import torch

_CPU_REQUEST = re.compile(r"tried to allocate (\d+) bytes", re.IGNORECASE)
_GPU_REQUEST = re.compile(r"tried to allocate ([\d.]+) ?(B|KiB|MiB|GiB|TiB|bytes)", re.IGNORECASE)
_UNITS = {"b": 1, "bytes": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
_OUT_OF_MEMORY = ("can't allocate memory", "not enough memory", "out of memory")


def requested_bytes(err: BaseException) -> int | None:
    """The size of the allocation a torch out-of-memory error names (None where it names none)."""
    text = str(err)
    found = _CPU_REQUEST.search(text)
    if found:
        return int(found[1])
    found = _GPU_REQUEST.search(text)
    return int(float(found[1]) * _UNITS[found[2].lower()]) if found else None


def memory_name(device: str | torch.device) -> str:
    """The memory an allocation on `device` takes: `CPU memory`, `GPU memory (cuda:0)`."""
    device = torch.device(device)
    if device.type == "cpu":
        return "CPU memory"
    return f"{'GPU' if device.type == 'cuda' else device.type.upper()} memory ({device})"


def out_of_memory(err: BaseException) -> bool:
    """Whether `err` is an allocation the machine refused (not a shape error or another RuntimeError)."""
    if isinstance(err, (MemoryError, torch.OutOfMemoryError)):
        return True
    return isinstance(err, RuntimeError) and any(s in str(err) for s in _OUT_OF_MEMORY)


@contextmanager
def memory_for(what: str, device: str | torch.device = "cpu") -> Iterator[None]:
    """Turn an allocation refused while the block builds or moves `what` onto `device` into one
    `OSError(ENOMEM)`: `not enough memory for N bytes (x GiB) of CPU memory to build the model`."""
    try:
        yield
    except (MemoryError, RuntimeError) as err:
        if not out_of_memory(err):
            raise
        n = requested_bytes(err)
        size = f"{n:,} bytes ({n / (1 << 30):,.1f} GiB)" if n is not None else "it"
        raise OSError(errno.ENOMEM, f"not enough memory for {size} of {memory_name(device)} to build {what}: "
                                    f"make it smaller or use a machine with more memory") from None
