"""`interlingua.tune_allocator`: with glibc's thresholds fixed, memory freed and allocated again is reused instead
of being written afresh page by page (counted in page faults, not timed); `INTERLINGUA_ALLOCATOR=default` leaves
malloc alone; a bad value is one clear error, also from the command line, which tunes before any command."""
from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

import interlingua
from interlingua.cli import main
from interlingua.errors import ConfigError

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

# what a decoding or training step does: a few large blocks allocated, written, and freed together, again and again
CHURN = """
import resource
import interlingua
tuned = interlingua.tune_allocator()
def step():
    blocks = [bytearray(12 << 20) for _ in range(3)]  # zeroed: every page written
    del blocks
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    step()
print(tuned, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _churn(setting: str) -> tuple[str, int]:
    env = {**os.environ, "INTERLINGUA_ALLOCATOR": setting}
    out = subprocess.run([sys.executable, "-c", CHURN], env=env, capture_output=True, text=True, check=True).stdout
    tuned, faults = out.split()
    return tuned, int(faults)


@pytest.mark.skipif(not GLIBC, reason="the thresholds are glibc's")
def test_tuned_memory_is_reused_instead_of_faulted_in_again():
    tuned, tuned_faults = _churn("tuned")
    plain, plain_faults = _churn("default")
    assert (tuned, plain) == ("True", "False")
    pages = 20 * 3 * (12 << 20) // 4096  # every page of every step
    assert plain_faults > pages // 2  # glibc's own thresholds: given back and faulted in again
    assert tuned_faults < pages // 50


def test_a_bad_setting_is_one_clear_error(monkeypatch, capsys):
    monkeypatch.setenv("INTERLINGUA_ALLOCATOR", "jemalloc")
    with pytest.raises(ConfigError, match="INTERLINGUA_ALLOCATOR='jemalloc': use one of tuned, default"):
        interlingua.tune_allocator()
    status = main(["translate", "--model", "missing.pt", "--src", "en", "--tgt", "de"])
    err = capsys.readouterr().err
    assert status != 0 and "INTERLINGUA_ALLOCATOR='jemalloc'" in err and "Traceback" not in err
