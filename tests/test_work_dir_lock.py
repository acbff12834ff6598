"""One run per work_dir: a second `train` is refused naming the first; a lock left by a killed run is taken over.

The holders are real processes: an `interlingua train` run, or a small script that takes the lock
and waits (killed with SIGKILL, it leaves the lock file behind without a lock on it).
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO, tiny_config, torchrun

from interlingua.cli import main
from interlingua.config import parse_config
from interlingua.training.build import build_run
from interlingua.training.trainer import train
from interlingua.training.work_dir_lock import LOCK_NAME, WorkDirBusy, WorkDirLock, lock_holder

HOLD_SCRIPT = """
import sys, time
from interlingua.training.work_dir_lock import WorkDirLock
WorkDirLock(sys.argv[1], command="holder").acquire()
print("locked", flush=True)
time.sleep(600)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=60)


def _hold_lock(work: Path) -> subprocess.Popen:
    """A process that has taken the lock of `work` and waits (stop it with `_stop`)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD_SCRIPT, str(work)], stdout=subprocess.PIPE, text=True,
                            env=_env())
    try:
        assert proc.stdout.readline().strip() == "locked"
    except BaseException:
        _stop(proc)
        raise
    return proc


@pytest.fixture
def holder(tmp_path):
    """A process holding the lock of tmp_path/run (started from an empty work_dir)."""
    work = tmp_path / "run"
    proc = _hold_lock(work)
    try:
        yield proc, work
    finally:
        _stop(proc)


def _config(corpus: Path, work: Path, path: Path, **train) -> Path:
    path.write_text(yaml.safe_dump(tiny_config(corpus, work, train={"max_steps": 4, "valid_every": 2, **train})),
                    encoding="utf-8")
    return path


def test_a_running_train_refuses_a_second_one_on_its_work_dir(multi30k_corpus, tmp_path, capsys):
    """Two `interlingua train` processes on one work_dir: the second exits 2 naming the first."""
    work = tmp_path / "run"
    cfg = _config(multi30k_corpus, work, tmp_path / "cfg.yaml", max_steps=10_000_000, max_minutes=5, valid_every=20)
    first = subprocess.Popen([sys.executable, "-m", "interlingua.cli", "train", str(cfg)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, env=_env())
    try:
        deadline = time.monotonic() + 240
        while not (work / "last.pt").exists():  # it prepared the corpus, trained and saved: well under way
            assert first.poll() is None, first.stderr.read()[-2000:]
            assert time.monotonic() < deadline, "the first run saved no checkpoint in time"
            time.sleep(0.2)
        for argv in (["train", str(cfg)], ["train", str(cfg), "--resume"]):
            code = main(argv)
            err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
            assert code == 2, err
            assert len(err) == 1 and f"{work} is in use by another run: process {first.pid} on " \
                f"{socket.gethostname()}, running since " in err[0], err
            assert "interlingua.cli train" in err[0]
        assert first.poll() is None  # the first run goes on
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGTERM)  # it saves last.pt and ends
        first.communicate(timeout=120)
    assert not (work / LOCK_NAME).exists()  # the ended run gave it back


def test_the_lock_is_taken_before_the_corpus_is_prepared(multi30k_corpus, holder, tmp_path, capsys):
    proc, work = holder
    code = main(["train", str(_config(multi30k_corpus, work, tmp_path / "cfg.yaml"))])
    err = capsys.readouterr().err
    assert code == 2 and f"process {proc.pid} on {socket.gethostname()}" in err and "(holder)" in err
    assert not (work / "data").exists()  # no second preparation of the same files
    assert lock_holder(work)["pid"] == proc.pid  # the holder's details untouched


def test_prepare_takes_the_same_lock(multi30k_corpus, holder, tmp_path, capsys):
    proc, work = holder
    code = main(["prepare", str(_config(multi30k_corpus, work, tmp_path / "cfg.yaml"))])
    assert code == 2 and f"process {proc.pid}" in capsys.readouterr().err
    assert not (work / "data").exists()


def test_a_lock_left_by_a_killed_process_is_taken_over(multi30k_corpus, holder, tmp_path, caplog):
    proc, work = holder
    with pytest.raises(WorkDirBusy, match=f"process {proc.pid} "):
        WorkDirLock(work).acquire()
    proc.kill()  # no chance to clean up: the file stays, its flock goes with the process
    proc.wait(timeout=60)
    assert lock_holder(work)["pid"] == proc.pid
    with caplog.at_level(logging.WARNING, logger="interlingua"):
        result = train(parse_config(tiny_config(multi30k_corpus, work, train={"max_steps": 2})))
    assert result.steps == 2
    assert f"taking over the stale lock of {work.resolve()}: process {proc.pid} on " in caplog.text
    assert not (work / LOCK_NAME).exists()


def test_a_process_may_take_its_own_lock_again(tmp_path):
    """Nested holders in one process share the lock; the file goes when the last one gives it back."""
    outer = WorkDirLock(tmp_path).acquire()
    info = lock_holder(tmp_path)
    assert info["pid"] == os.getpid() and info["host"] == socket.gethostname() and info["since"]
    with WorkDirLock(tmp_path):
        assert lock_holder(tmp_path) == info
    assert (tmp_path / LOCK_NAME).exists()
    outer.release()
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_failed_setup_gives_the_lock_back(multi30k_corpus, tmp_path):
    from interlingua.errors import ConfigError
    cfg = parse_config(tiny_config(multi30k_corpus, tmp_path / "run", train={"trainable": "bridge"}))
    with pytest.raises(ConfigError, match="--init"):
        build_run(cfg)
    assert not (tmp_path / "run" / LOCK_NAME).exists()


def test_under_torchrun_process_0_locks_and_a_refusal_stops_every_process(multi30k_corpus, holder, tmp_path):
    """Both processes learn of process 0's refusal and exit 2 at once (none waits for the other). With the
    work_dir's lock stale, the two train as one run: test_distributed.py's torchrun command line."""
    proc, work = holder
    cfg = _config(multi30k_corpus, work, tmp_path / "cfg.yaml", threads=1, precision="fp32")
    refused = torchrun(["-m", "interlingua.cli", "train", str(cfg)], env=_env())
    assert refused.returncode != 0
    assert refused.stderr.count(f"is in use by another run: process {proc.pid} on") == 2, refused.stderr[-3000:]
    assert not (work / "data").exists()  # refused before preparing anything


def leave_a_stale_lock(work: Path) -> int:
    """A process takes the lock of `work` and is killed (SIGKILL): the lock file stays behind, naming it, with no
    lock on it. Returns the dead process's pid."""
    proc = _hold_lock(work)
    _stop(proc)
    assert lock_holder(work)["pid"] == proc.pid
    return proc.pid
