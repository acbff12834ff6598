"""Where an output goes, like the shell's `>`: a regular file or a new name is replaced whole; a symlink is
written through (its target replaced whole, the link kept); a device, a FIFO or /dev/stdout is written
directly, never replaced. Devices and full disks are tried only in a private mount namespace (a bind-mounted
/dev/full or /dev/null, a small tmpfs), which vanishes with the test and never touches the machine's own /dev."""
from __future__ import annotations

import errno
import io
import os
import shlex
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO, missing
from test_decoding import random_checkpoint

from interlingua.atomic_files import atomic_output, write_text_atomic
from interlingua.cli import main

UNSHARE = ["unshare", "-m", "--map-root-user"]
CLI = f"{shlex.quote(sys.executable)} -m interlingua.cli"


def in_private_mounts(script: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`script` (sh) in a private mount namespace: what it mounts there is gone when it ends."""
    if shutil.which("unshare") is None:
        missing("unshare is not installed (util-linux)")
    if subprocess.run([*UNSHARE, "true"], capture_output=True).returncode != 0:
        missing("no private mount namespace here (unshare -m --map-root-user fails)")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([*UNSHARE, "sh", "-c", "set -e\n" + script], capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=timeout)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return random_checkpoint(tmp_path_factory.mktemp("targets") / "random.pt")


@pytest.fixture
def source(tmp_path) -> Path:
    src = tmp_path / "in.en"
    src.write_text("a dog runs .\nthe woman eats\n", encoding="utf-8")
    return src


def _translate(checkpoint, source, out) -> list[str]:
    return ["translate", "--model", str(checkpoint), "--src", "en", "--tgt", "de", "--beam", "1",
            "-i", str(source), "-o", str(out)]


def _temporaries(*folders: Path) -> list[str]:
    return [p.name for folder in folders for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_a_symlink_is_written_through_and_stays_a_link(checkpoint, source, tmp_path):
    real = tmp_path / "elsewhere" / "out.de"
    real.parent.mkdir()
    real.write_text("old\n", encoding="utf-8")
    real.chmod(0o640)
    link = tmp_path / "link.de"
    link.symlink_to(Path("elsewhere") / "out.de")
    assert main(_translate(checkpoint, source, link)) == 0
    assert link.is_symlink() and os.readlink(link) == str(Path("elsewhere") / "out.de")
    assert len(real.read_text(encoding="utf-8").splitlines()) == 2
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert not _temporaries(tmp_path, real.parent)


def test_a_dangling_symlink_gets_its_target_created(tmp_path):
    link = tmp_path / "link.txt"
    link.symlink_to(tmp_path / "target.txt")
    write_text_atomic(link, "text")
    assert link.is_symlink() and (tmp_path / "target.txt").read_text() == "text"


def test_a_fifo_is_streamed_into_not_replaced(checkpoint, source, tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as f:
            received.append(f.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    code = main(_translate(checkpoint, source, fifo))
    reader.join(30)  # it has had all the command wrote once the command closed the FIFO
    if reader.is_alive():  # still waiting in open(): nothing opened the FIFO to write. A writer that does not wait
        # for a reader ends its wait (a blocking open() here would wait for ever had the reader just ended: the
        # reader still alive after a busy machine's command had returned once held a CI run to its time limit)
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(30)
    assert code == 0
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert len(received[0].decode("utf-8").splitlines()) == 2
    assert not _temporaries(tmp_path)


def test_a_reader_that_closes_the_fifo_early_is_one_broken_pipe_error(tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)

    def read_a_little() -> None:
        with open(fifo, "rb") as f:
            f.read(10)

    reader = threading.Thread(target=read_a_little, daemon=True)
    reader.start()
    with pytest.raises(OSError) as info:
        with atomic_output(fifo) as f:
            for _ in range(64):
                f.write(b"x" * 65536)
    reader.join(30)
    assert info.value.errno == errno.EPIPE and info.value.filename == str(fifo)
    assert "broken pipe" in str(info.value) and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_null_device_is_written_to_not_replaced(checkpoint, source, tmp_path):
    null = tmp_path / "null"
    null.touch()
    done = in_private_mounts(f"""
mount --bind /dev/null {null}
{CLI} embed --model {checkpoint} --lang en -i {source} -o {null}
{CLI} {" ".join(_translate(checkpoint, source, null))}
test -c {null} && echo still-a-device
""")
    assert done.returncode == 0, done.stderr
    assert "still-a-device" in done.stdout and "Traceback" not in done.stderr
    assert null.read_bytes() == b"" and not _temporaries(tmp_path)


def test_dev_stdout_is_written_to_not_replaced(checkpoint, source, tmp_path):
    """/dev/stdout of a private /dev: the command's own standard output gets the translation."""
    done = in_private_mounts(f"""
for name in null urandom; do touch {tmp_path}/$name; mount --bind /dev/$name {tmp_path}/$name; done
mount -t tmpfs -o size=64k tmpfs /dev
for name in null urandom; do touch /dev/$name; mount --bind {tmp_path}/$name /dev/$name; done
ln -s /proc/self/fd /dev/fd
ln -s /proc/self/fd/1 /dev/stdout
ln -s /proc/self/fd/2 /dev/stderr
{CLI} {" ".join(_translate(checkpoint, source, "/dev/stdout"))}
test -L /dev/stdout && echo still-a-link
""")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and lines[-1] == "still-a-link"


@pytest.mark.parametrize("command", ["translate", "embed"])
def test_a_full_device_is_one_error_line_and_stays_a_device(checkpoint, source, tmp_path, command):
    full = tmp_path / "full"
    full.touch()
    argv = (_translate(checkpoint, source, full) if command == "translate" else
            ["embed", "--model", str(checkpoint), "--lang", "en", "-i", str(source), "-o", str(full)])
    done = in_private_mounts(f"""
mount --bind /dev/full {full}
{CLI} {" ".join(argv)} || echo "exit $?"
test -c {full} && echo still-a-device
""")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == ["exit 1", "still-a-device"]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "no space left on device" in errors[0] and str(full) in errors[0]
    assert full.read_bytes() == b"" and not _temporaries(tmp_path)


def test_a_full_disk_under_a_regular_file_is_one_error_line(checkpoint, tmp_path):
    """A real full file system (a 64 KiB tmpfs): the old output stays whole, no temporary is left."""
    src = tmp_path / "in.en"
    src.write_text("a dog runs .\n" * 400, encoding="utf-8")
    small = tmp_path / "small"
    small.mkdir()
    out = small / "vectors.npy"
    done = in_private_mounts(f"""
mount -t tmpfs -o size=64k tmpfs {small}
printf old > {out}
{CLI} embed --model {checkpoint} --lang en -i {src} -o {out} || echo "exit $?"
cat {out}; echo; ls -a {small}
""")
    assert done.returncode == 0, done.stderr
    assert "exit 1" in done.stdout and "\nold\n" in done.stdout and ".tmp" not in done.stdout
    err = done.stderr.strip()
    assert "no space left on device" in err.lower() and str(out) in err and len(err.splitlines()) == 1, err


WRITERS = {
    "npy": (lambda f: np.save(f, np.arange(6, dtype=np.float32)), lambda b: np.load(io.BytesIO(b)).tolist()),
    "npz": (lambda f: np.savez(f, a=np.arange(6)), lambda b: np.load(io.BytesIO(b))["a"].tolist()),
    "torch": (lambda f: torch.save({"a": torch.arange(6)}, f), lambda b: torch.load(io.BytesIO(b))["a"].tolist()),
}


@pytest.mark.parametrize("kind", WRITERS)
def test_every_writer_streams_into_a_fifo(tmp_path, kind):
    """numpy's and torch's writers (a zip for .npz and checkpoints) go through a FIFO whole: nothing seeks."""
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as f:
            received.append(f.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    write, read_back = WRITERS[kind]
    with atomic_output(fifo) as f:
        write(f)
    reader.join(30)
    assert read_back(received[0]) == [0, 1, 2, 3, 4, 5]
