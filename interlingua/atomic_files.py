"""Files that appear whole or not at all: written under a temporary name in the same folder,
flushed to disk, then renamed over the target.

Why: a kill, a full disk or an exception halfway through must never leave a truncated output
or destroy the file that was there before (a translation, a checkpoint, a results table). The
rename is atomic on POSIX and Windows within one file system, which the same folder guarantees.
The name is used exactly as given: nothing appends `.npy` or `.npz` behind the caller's back.

Only a regular file (or a new name) is replaced. Every other target is written the way the shell's
`>` writes it: a symlink through to its target (that file replaced whole, beside it, and the link
kept), a device, a FIFO or /dev/stdout directly, as a stream, since replacing it would put a plain
file where the device, the pipe or the link was.
"""
from __future__ import annotations

import errno
import io
import os
import re
import shutil
import stat
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from interlingua.errors import InterlinguaError

_SHORT_WRITE = re.compile(r"\b\d+ requested and \d+ written\b")
"""numpy's `tofile` on a full disk: an OSError with no errno, only the byte counts."""


def disk_full(err: BaseException) -> bool:
    """Whether `err` (or what it wraps: `torch.save` hides ENOSPC in a RuntimeError) is a full disk."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(current)
        if "No space left on device" in text or "file write failed" in text or _SHORT_WRITE.search(text):
            return True
        current = current.__cause__ or current.__context__
    return False


TEMPORARY_NAME = re.compile(r"^\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp$")
"""The name `atomic_output` writes under before the rename: `.NAME.XXXXXXXX.tmp` beside NAME (mkstemp's
eight random characters). A kill -9 between the two leaves one behind."""


def stale_temporaries(folder: str | Path, names: set[str] | None = None) -> list[Path]:
    """The files of `folder` named as `atomic_output` names its temporary files (for the targets `names`
    only, where given), oldest name first: what a writer killed mid-write left behind."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.iterdir()):
        match = TEMPORARY_NAME.match(path.name)
        if match and (names is None or match["name"] in names) and path.is_file() and not path.is_symlink():
            found.append(path)
    return found


def _through_proc(path: Path) -> bool:
    """Whether `path` is, or leads by symlinks to, an entry of /proc: /dev/stdout, /dev/fd/N and
    /proc/self/fd/N name an open descriptor (a pipe, a terminal, the file the shell opened), which only
    writing to it reaches."""
    current = Path(os.path.abspath(path))
    for _ in range(40):  # the kernel's own limit on a chain of links
        if os.path.realpath(current.parent).startswith("/proc/"):
            return True
        if not current.is_symlink():
            return False
        current = Path(os.path.normpath(current.parent / os.readlink(current)))
    return False


def output_target(path: str | Path) -> tuple[Path, bool]:
    """Where writing `path` lands, and whether it is written as a stream (True) rather than replaced:
    a symlink resolves to its target (created if it does not exist yet); a device, a FIFO, a socket or a
    descriptor of /proc is a stream. A folder is refused."""
    path = Path(path)
    if _through_proc(path):
        return path, True
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a folder, not a file", str(path))
    if mode is not None and not stat.S_ISREG(mode):
        return path, True
    return (Path(os.path.realpath(path)) if path.is_symlink() else path), False


@contextmanager
def atomic_output(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file to write `path`'s new content into. For a regular file or a new name (through a
    symlink: its target) it is a temporary file beside it that replaces it on a clean exit; on any error
    the temporary file is removed and the file is left as it was. For a device, a FIFO or /dev/stdout it
    is the target itself, written directly. A full disk is raised as an `OSError(ENOSPC)` naming `path`,
    whatever wrapped it, and a reader gone from a pipe as an `OSError(EPIPE)` naming it."""
    target, streamed = output_target(path)
    if streamed:
        with _streamed_output(Path(path)) as f:
            yield f
        return
    path = target
    if path.exists() and not path.stat().st_mode & 0o222:  # a rename would replace it, even for root
        raise PermissionError(errno.EACCES, "is read-only: not replacing it", str(path))
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        if path.exists():  # keep the old file's permissions (mkstemp creates 0600)
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if disk_full(err) and not (isinstance(err, OSError) and err.filename):
            raise OSError(errno.ENOSPC, "no space left on device while writing it (the previous file, if any, "
                                        "is untouched)", str(path)) from None
        raise


class _Stream(io.BufferedWriter):
    """A written-through target, only ever written forward: it hands out no file number (numpy writes to
    a real file by its descriptor and asks where it is, which a pipe cannot say) and says it cannot seek
    (a device such as /dev/null claims it can, and a zip writer that seeks back writes garbage)."""

    def fileno(self) -> int:
        raise io.UnsupportedOperation("a stream: written through write(), not by its descriptor")

    def seekable(self) -> bool:
        return False

    def seek(self, offset: int, whence: int = 0) -> int:
        raise io.UnsupportedOperation("a stream cannot seek")

    def tell(self) -> int:
        raise io.UnsupportedOperation("a stream cannot tell its position")


@contextmanager
def _streamed_output(path: Path) -> Iterator[BinaryIO]:
    """`path` opened for writing as it is (appending: a descriptor of /proc may be a file the shell opened
    with `>>`; a device or a FIFO has no end to append to); a full device or a closed pipe is one OSError
    naming `path`."""
    try:
        with _Stream(io.FileIO(path, "a")) as f:
            yield f
    except OSError as err:
        if err.errno == errno.EPIPE:
            raise OSError(errno.EPIPE, "the reader closed it before the output was written (broken pipe)",
                          str(path)) from None
        if disk_full(err) and not err.filename:
            raise OSError(errno.ENOSPC, "no space left on device while writing to it", str(path)) from None
        raise
    except BaseException as err:
        if disk_full(err):
            raise OSError(errno.ENOSPC, "no space left on device while writing to it", str(path)) from None
        raise


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """`path` holds exactly `data`, or is unchanged."""
    with atomic_output(path) as f:
        f.write(data)


def write_text_atomic(path: str | Path, text: str) -> None:
    """`path` holds exactly `text` as UTF-8, or is unchanged."""
    write_bytes_atomic(path, text.encode("utf-8"))


def check_writable(target: str | Path) -> None:
    """Raise now the `OSError` that writing `target` (a file or a folder) would meet at the end of a command's
    work: a parent that is a file, or a folder (the nearest that exists) this process may not write into."""
    folder = Path(os.path.abspath(target)).parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "is a file, not a folder to write into", str(folder))
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, "cannot be written into (read-only or not yours)", str(folder))


def check_replaceable(out: Path, previous_export: Callable[[Path], set[str] | None], what: str) -> None:
    """Refuse an `out` an export must not replace: a file, or a folder that is neither empty nor a previous
    export of the same kind holding only that export's files. `previous_export(out)`: the names of the
    files such an export wrote there (read from its own record), or None where `out` is no such export;
    `what` ends the refusal of a folder that is not one."""
    if out.exists() and not out.is_dir():
        raise InterlinguaError(f"{out} exists and is not a folder: give a new or empty folder for the export")
    check_writable(out)
    if not out.is_dir() or not any(out.iterdir()):
        return
    ours = previous_export(out)
    if ours is None:
        raise InterlinguaError(f"{out} is not empty and is not {what}")
    others = sorted(p.name for p in out.iterdir() if p.name not in ours)
    if others:
        raise InterlinguaError(f"{out} is a previous export but also holds {', '.join(others[:5])}"
                               f"{' ...' if len(others) > 5 else ''}, which an export does not write: move "
                               f"{'it' if len(others) == 1 else 'them'} away or give another folder")


@contextmanager
def atomic_folder(out: str | Path) -> Iterator[Path]:
    """A temporary sibling folder to fill with `out`'s new files; on a clean exit every file is flushed
    to disk, made readable as the umask allows, and the folder replaces `out` whole (a previous `out` is
    moved aside first and removed once the new one is in place, put back if the rename fails); on any
    error the temporary folder is removed and `out` is left as it was. Checking that `out` may be
    replaced is the caller's business. A full disk is raised as an `OSError(ENOSPC)` naming `out`, whatever
    the writer raised."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        yield tmp
        _flush_folder(tmp)
        _replace_folder(tmp, out)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if disk_full(err) and not (isinstance(err, OSError) and err.filename):  # safetensors' own error, say
            raise OSError(errno.ENOSPC, "no space left on device while writing it (the previous folder, if "
                                        "any, is untouched)", str(out)) from None
        raise


def _flush_folder(folder: Path) -> None:
    """Every file of `folder` on disk, and all of it readable as the umask allows (mkdtemp makes the
    folder 0700, and some writers their files 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    for path in folder.iterdir():
        with open(path, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(path, 0o666 & ~umask)
    os.chmod(folder, 0o777 & ~umask)


def _replace_folder(new: Path, out: Path) -> None:
    """Put the finished folder `new` at `out` by renames (see `atomic_folder`)."""
    if not out.exists():
        os.rename(new, out)
        return
    aside = out.parent / f".{out.name}.{uuid.uuid4().hex[:8]}.old"
    os.rename(out, aside)
    try:
        os.rename(new, out)
    except BaseException:
        os.rename(aside, out)
        raise
    shutil.rmtree(aside, ignore_errors=True)
