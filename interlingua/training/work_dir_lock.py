"""One run per work_dir: `<work_dir>/run.lock`, held for a whole training run (data preparation included).

Why: two runs on one work_dir overwrite each other's checkpoints, write every step twice into
metrics.jsonl and rebuild the same prepared corpus at once. The lock is an exclusive `flock` on
the file (POSIX; over NFS Linux maps it to an fcntl lock the server keeps), which the kernel
drops when the holding process ends however it ends, so a lock file left behind by a killed run
is stale: the next run takes it over and says so. The file holds the holder's pid, host, start
time and command, which a refused run names.

A process that holds the lock may take it again (nested holders share it, counted): the lock keeps
processes apart, not objects of one process.
"""
from __future__ import annotations

import json
import logging
import os
import shlex
import socket
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from interlingua.atomic_files import stale_temporaries
from interlingua.errors import InterlinguaError

try:
    import fcntl
except ImportError:  # not POSIX (Windows): runs are not kept apart
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

LOCK_NAME = "run.lock"

RUN_FOLDERS = (".", "data", "best_loss")
"""The folders of a work_dir that a run's own writers write into (checkpoints, config.json, metrics,
the prepared corpus, the lowest-dev-loss checkpoints)."""

_held: dict[Path, _Held] = {}
"""The locks this process holds, by lock file path."""
_held_guard = threading.Lock()


class WorkDirBusy(InterlinguaError):
    """Another process is running in this work_dir."""


class _Held:
    def __init__(self, fd: int, pid: int):
        self.fd, self.pid, self.count = fd, pid, 1


def lock_info(command: str | None = None) -> dict[str, Any]:
    """What the lock file says about its holder: this process."""
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "since": datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": command if command is not None else shlex.join(sys.orig_argv)}


def describe(info: dict[str, Any] | None) -> str:
    """The holder named in words: `process 123 on host, running since ... (command)`."""
    if not info:
        return "a process that is still writing its details"
    text = f"process {info.get('pid', '?')} on {info.get('host', '?')}, running since {info.get('since', '?')}"
    return text + (f" ({info['command']})" if info.get("command") else "")


def _read_info(fd: int) -> dict[str, Any] | None:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = b""
    while chunk := os.read(fd, 65536):
        raw += chunk
    try:
        info = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def _write_info(fd: int, info: dict[str, Any]) -> None:
    data = (json.dumps(info) + "\n").encode("utf-8")
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, data)
    os.fsync(fd)


def _same_file(fd: int, path: Path) -> bool:
    """Whether `path` still names the file `fd` is open on (a releasing holder removes it)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


class WorkDirLock:
    """The lock of one work_dir; `with WorkDirLock(work_dir):` or `acquire()` ... `release()`."""

    def __init__(self, work_dir: str | Path, command: str | None = None):
        self.path = Path(work_dir).resolve() / LOCK_NAME
        self.command = command
        self._acquired = False

    def acquire(self) -> WorkDirLock:
        """Take the lock at once, or raise `WorkDirBusy` naming the process that holds it."""
        if self._acquired:
            return self
        with _held_guard:
            held = _held.get(self.path)
            if held is not None and held.pid == os.getpid():
                held.count += 1
                self._acquired = True
                return self
            if fcntl is None:
                log.warning("cannot lock %s on this system (no flock): make sure no other run uses this work_dir",
                            self.path.parent)
            else:
                _held[self.path] = _Held(self._lock_file(), os.getpid())
            self._acquired = True
        return self

    def _lock_file(self) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(20):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                info = self._holder(fd)
                os.close(fd)
                raise WorkDirBusy(f"{self.path.parent} is in use by another run: {describe(info)}; wait for it to end "
                                  f"or stop it, or give this run another work_dir") from None
            except BaseException:
                os.close(fd)
                raise
            if not _same_file(fd, self.path):  # its holder removed it as we opened it: try the new one
                os.close(fd)
                continue
            try:
                stale = _read_info(fd)
                if stale is not None:
                    log.warning("taking over the stale lock of %s: %s has ended without removing it",
                                self.path.parent, describe(stale).replace(", running since", ", which started"))
                _write_info(fd, lock_info(self.command))
            except BaseException:
                os.close(fd)
                raise
            return fd
        raise WorkDirBusy(f"could not lock {self.path}: other processes keep taking and removing it")

    @staticmethod
    def _holder(fd: int) -> dict[str, Any] | None:
        """The holder's details; it writes them right after locking, so a moment may pass first."""
        for _ in range(10):
            info = _read_info(fd)
            if info is not None:
                return info
            time.sleep(0.05)
        return None

    def release(self) -> None:
        """Give the lock back (the last nested holder removes the file). A no-op when not held."""
        if not self._acquired:
            return
        self._acquired = False
        with _held_guard:
            held = _held.get(self.path)
            if held is None or held.pid != os.getpid():  # not ours (a forked child): leave it to the owner
                return
            held.count -= 1
            if held.count > 0:
                return
            del _held[self.path]
            try:
                if _same_file(held.fd, self.path):
                    self.path.unlink()
            finally:
                os.close(held.fd)  # closing drops the flock

    def __enter__(self) -> WorkDirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_holder(work_dir: str | Path) -> dict[str, Any] | None:
    """The details in a work_dir's lock file (None when there is none or it is unreadable); says
    nothing about whether the holder still runs."""
    try:
        return json.loads((Path(work_dir) / LOCK_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def remove_stale_temporaries(work_dir: str | Path) -> list[Path]:
    """Remove, with one warning naming them, the temporary files a writer killed mid-write (kill -9, a
    power cut) left in the run's folders of `work_dir`: nothing else ever removes them, and a partial
    checkpoint takes as much room as a whole one. Only names `atomic_output` writes under are touched,
    and only by the lock's holder, so no live writer's file is among them."""
    work_dir = Path(work_dir)
    removed = []
    for path in (p for folder in RUN_FOLDERS for p in stale_temporaries(work_dir / folder)):
        try:
            path.unlink()
        except OSError:  # gone already, or not ours to remove: left as it is
            continue
        removed.append(path)
    if removed:
        log.warning("removed %d temporary file(s) left in %s by a writer stopped mid-write: %s", len(removed),
                    work_dir, ", ".join(str(p.relative_to(work_dir)) for p in removed))
    return removed
