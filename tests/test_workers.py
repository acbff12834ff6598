"""Worker pools (`interlingua.workers.process_pool`): workers end when the process that started them is killed,
instead of waiting for ever on a task queue (as `interlingua experiment`'s did after its parent was killed), or
is interrupted."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

PARENT = textwrap.dedent("""
    import os, signal, sys, time
    from interlingua.workers import process_pool

    def work(folder):
        with open(os.path.join(folder, str(os.getpid())), "w") as f:  # what the fork server preloaded
            f.write(" ".join(m for m in ("torch", "torch._dynamo") if m in sys.modules))
        time.sleep(120)

    if __name__ == "__main__":
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C, even where SIGINT came in ignored
        with process_pool(2) as pool:
            futures = [pool.submit(work, sys.argv[1]) for _ in range(2)]
            [f.result() for f in futures]
""")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.is_file() and "State:\tZ" in status.read_text())


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGINT], ids=["killed", "interrupted"])
def test_workers_end_when_their_parent_is_killed_or_interrupted(tmp_path, stop):
    """Workers end when their parent is killed, or interrupted (Ctrl-C or SIGTERM sent to it alone: leaving the
    pool would else wait for their jobs), and start with torch and torch._dynamo imported (the fork server's
    preload: a worker's first torch optimizer would import torch._dynamo, 2-3 s, in every worker)."""
    script, started = tmp_path / "parent.py", tmp_path / "started"
    script.write_text(PARENT)
    started.mkdir()
    parent = subprocess.Popen([sys.executable, str(script), str(started)], cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while len(list(started.iterdir())) < 2:
            assert parent.poll() is None and time.monotonic() < deadline, "the workers did not start"
            time.sleep(0.1)
        workers = [int(p.name) for p in started.iterdir()]
        deadline = time.monotonic() + 10
        while not all(p.read_text() for p in started.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [p.read_text() for p in started.iterdir()] == ["torch torch._dynamo"] * 2
        assert all(alive(pid) for pid in workers)
        parent.send_signal(stop)
        parent.wait(10)  # an interrupted parent that waited for its workers' jobs would take 120 s
        deadline = time.monotonic() + 20
        while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(alive(pid) for pid in workers), "a worker outlived its killed parent"
    finally:
        parent.kill()
        for p in started.iterdir():
            try:
                os.kill(int(p.name), signal.SIGKILL)
            except ProcessLookupError:
                pass
