"""What the benchmark scripts share: appending a result line, describing the machine."""
from __future__ import annotations

import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path


def append_result(path: str | Path | None, record: dict) -> None:
    """Print `record` as one JSON line and, when `path` is given, append it there (folders created).

    Every line carries the date, the machine (with its CPU model) and the command that wrote it:
    fields of `record` with those names are kept, missing ones are filled in."""
    record = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(), **record}
    record.setdefault("command", shlex.join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]))
    if "environment" not in record and (settings := speed_settings()):
        record["environment"] = settings
    line = json.dumps(record)
    print(line, flush=True)
    if path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


SPEED_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "ATEN_CPU_CAPABILITY", "ONEDNN_", "DNNL_", "TORCHINDUCTOR_",
                   "INTERLINGUA_ALLOCATOR", "INTERLINGUA_OUTPUT_KERNEL", "MALLOC_")
"""Environment variables (names, or prefixes ending in `_`) that change what a timing measures."""


def speed_settings() -> dict[str, str]:
    """The environment's speed-relevant settings that are set (e.g. oneDNN's kernel cache size, which
    `bench/train_speed.py` lines were once compared by without recording it)."""
    return {name: value for name, value in sorted(os.environ.items())
            if any(name == var or (var.endswith("_") and name.startswith(var)) for var in SPEED_VARIABLES)}


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (platform's guess where that file is missing)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    """Host, OS, architecture and CPU model, e.g. 'box Linux-6.1.0-x86_64 / Intel(R) Xeon(R) ...'."""
    return f"{platform.node()} {platform.system()}-{platform.release()}-{platform.machine()} / {cpu_model()}"
