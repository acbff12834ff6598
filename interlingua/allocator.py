"""The C allocator set to keep freed tensor memory for the next tensor, not hand it back to the system.

Why: PyTorch's CPU tensors come from the C library's `malloc`. glibc serves a block above its mmap threshold
(128 KiB at first, raised as large blocks are freed) with a fresh mapping that it unmaps when the block is freed,
and gives the free top of its heap back above a trim threshold; each page of such memory then costs a page
fault when it is first written, every time. Decoding and training allocate and free the same large tensors at
every step (a beam-5 step's 320 x 8,000 log-probabilities, a training step's activations and gradients), so they
fault on the same memory again and again: on a 2-core Intel Xeon VM a beam-5 pass over 1,000 sentences took
about 290,000 page faults (1.1 GiB written afresh) and a 150-step training run about 4 million. With both
thresholds fixed high the memory is reused instead (the figures with and without: docs/results/speed.md,
"The C allocator").

`tune_allocator` sets them with glibc's `mallopt`: the mmap threshold to its largest value (32 MiB; blocks above
it are still mapped and unmapped) and the trim threshold to 1 GiB (up to that much freed memory at the heap's
top stays with the process). It does nothing where the C library is not glibc (musl, macOS, Windows), and
nothing where `INTERLINGUA_ALLOCATOR=default`. The command line calls it before any command; a program that
uses the library calls it itself if it wants it (`interlingua.tune_allocator()`): changing how a whole process
allocates is not something importing a library should do.
"""
from __future__ import annotations

import ctypes
import logging
import os
import platform

from interlingua.errors import ConfigError

log = logging.getLogger(__name__)

ALLOCATOR_ENV = "INTERLINGUA_ALLOCATOR"
"""`tuned` (the default) or `default` (leave the C allocator's own settings)."""

ALLOCATOR_SETTINGS = ("tuned", "default")

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
"""glibc's `mallopt` parameter numbers (malloc.h)."""

MMAP_THRESHOLD = 32 * 1024 * 1024
"""glibc's largest mmap threshold on 64-bit systems (a larger value is refused)."""

TRIM_THRESHOLD = 1024 * 1024 * 1024


def allocator_setting() -> str:
    """`INTERLINGUA_ALLOCATOR` (default `tuned`), checked against `ALLOCATOR_SETTINGS`."""
    value = (os.environ.get(ALLOCATOR_ENV) or "tuned").strip().lower()
    if value not in ALLOCATOR_SETTINGS:
        raise ConfigError(f"{ALLOCATOR_ENV}={value!r}: use one of {', '.join(ALLOCATOR_SETTINGS)}")
    return value


def tune_allocator() -> bool:
    """Fix glibc's mmap and trim thresholds high (see the module's docstring); True where they were set."""
    if allocator_setting() == "default" or platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(None)  # the process's own symbols, glibc's among them: no library search at start-up
        done = (libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
                and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
    except (OSError, AttributeError) as err:  # no loadable C library, or one without mallopt
        log.debug("the C allocator is left as it is: %s", err)
        return False
    log.debug("C allocator: mmap threshold %d, trim threshold %d (%s)", MMAP_THRESHOLD, TRIM_THRESHOLD,
              "set" if done else "refused")
    return done
