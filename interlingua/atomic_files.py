"""Files that appear whole or not at all: written under a temporary name in the same folder,
flushed to disk, then renamed over the target.

Why: a kill, a full disk or an exception halfway through must never leave a truncated output
or destroy the file that was there before (a translation, a checkpoint, a results table). The
rename is atomic on POSIX and Windows within one file system, which the same folder guarantees.
The name is used exactly as given: nothing appends `.npy` or `.npz` behind the caller's back.
"""
from __future__ import annotations

import errno
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from interlingua.errors import InterlinguaError


def disk_full(err: BaseException) -> bool:
    """Whether `err` (or what it wraps: `torch.save` hides ENOSPC in a RuntimeError) is a full disk."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(current) or "file write failed" in str(current):
            return True
        current = current.__cause__ or current.__context__
    return False


@contextmanager
def atomic_output(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file to write `path`'s new content into; on a clean exit it replaces `path`, on any
    error the temporary file is removed and `path` is left as it was. A full disk is raised as an
    `OSError(ENOSPC)` naming `path`, whatever wrapped it."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a folder, not a file", str(path))
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


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """`path` holds exactly `data`, or is unchanged."""
    with atomic_output(path) as f:
        f.write(data)


def write_text_atomic(path: str | Path, text: str) -> None:
    """`path` holds exactly `text` as UTF-8, or is unchanged."""
    write_bytes_atomic(path, text.encode("utf-8"))


def check_replaceable(out: Path, previous_export: Callable[[Path], set[str] | None], what: str) -> None:
    """Refuse an `out` an export must not replace: a file, or a folder that is neither empty nor a previous
    export of the same kind holding only that export's files. `previous_export(out)`: the names of the
    files such an export wrote there (read from its own record), or None where `out` is no such export;
    `what` ends the refusal of a folder that is not one."""
    if out.exists() and not out.is_dir():
        raise InterlinguaError(f"{out} exists and is not a folder: give a new or empty folder for the export")
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
    replaced is the caller's business."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        yield tmp
        _flush_folder(tmp)
        _replace_folder(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
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
