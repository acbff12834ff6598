"""Public data sets: download (or copy from a local mirror) with SHA-256 checks."""
from __future__ import annotations

import hashlib
import logging
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

from tqdm import tqdm

from interlingua.atomic_files import write_bytes_atomic
from interlingua.data.corpus import write_multiway_corpus_yaml
from interlingua.errors import DataError

log = logging.getLogger(__name__)

MULTI30K_URL = "https://github.com/multi30k/dataset/raw/master/data/task1/raw/{name}"
MULTI30K_LANGS = ["en", "de", "fr", "cs"]
MULTI30K_SPLITS = ["train", "val", "test_2016_flickr"]
MULTI30K_SHA256 = {
    "test_2016_flickr.cs.gz": "200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "train.cs.gz": "a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "val.cs.gz": "b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
}


def fetch(url: str, dest: Path, *, timeout: float = 60.0,
          hint: str = "offline? use --from DIR with a local copy") -> None:
    """Download `url` to `dest` through `dest.part`: the final name appears only once the whole file
    is there. An interrupted download leaves the `.part`, and the next call resumes it (an HTTP range
    request; a server that ignores ranges sends it whole again). A failure raises `DataError`
    naming the URL, the reason and `hint`."""
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.is_file() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            resumed = have > 0 and resp.status == 206
            size = int(resp.headers.get("Content-Length") or 0)
            total = (have if resumed else 0) + size or None
            with open(part, "ab" if resumed else "wb") as out, \
                    tqdm(total=total, initial=have if resumed else 0, unit="B", unit_scale=True, desc=dest.name,
                         leave=False) as bar:
                for chunk in iter(lambda: resp.read(1 << 16), b""):
                    out.write(chunk)
                    bar.update(len(chunk))
            if size and part.stat().st_size != total:
                raise OSError(f"the connection closed after {part.stat().st_size} of {total} bytes")
    except urllib.error.HTTPError as err:
        if err.code == 416 and have:  # nothing left to send: the part was already whole
            part.replace(dest)
            return
        raise DataError(f"cannot download {url}: {err} ({hint})") from None
    except (urllib.error.URLError, OSError) as err:
        kept = f"; {part.name} is kept and the next run resumes it" if part.is_file() and part.stat().st_size else ""
        raise DataError(f"cannot download {url}: {err}{kept} ({hint})") from None
    part.replace(dest)


def file_digest(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_of(path: Path) -> str:
    return file_digest(path, "sha256")


def _obtain(target: Path, name: str, url: str, source_dir: str | Path | None, desc: str) -> None:
    """Put `name` at `target`: copied from `source_dir/name` (through a temporary name) when a local
    mirror is given, else downloaded from `url`."""
    if source_dir is None:
        fetch(url, target)
        return
    src = Path(source_dir) / name
    if not src.is_file():
        raise DataError(f"{src} not found: --from must be a folder holding the {desc} files ({name}, ...)")
    tmp = target.with_name(target.name + ".part")
    shutil.copyfile(src, tmp)
    tmp.replace(target)


def install_files(dest: Path, checksums: Mapping[str, str], *, url_for: Callable[[str], str],
                  source_dir: str | Path | None, desc: str, digest: Callable[[Path], str] = sha256_of,
                  convert: Callable[[str, bytes], bytes] | None = None) -> None:
    """Make `dest/<name>` hold every file of `checksums` ({relative name: SHA-256}).

    Files already in place with the right digest are kept. Others are copied from
    `source_dir` (a local mirror with the same layout) or downloaded from `url_for(name)`;
    `convert` turns downloaded bytes into the stored form (line endings, gzip). Each file is
    checked after it lands; a mismatch removes it and raises `DataError` naming it.
    """
    dest = Path(dest)
    for name, expected in tqdm(sorted(checksums.items()), desc=desc, unit="file"):
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_file() and digest(target) == expected:
            continue
        _obtain(target, name, url_for(name), source_dir, desc)
        if source_dir is None and convert is not None:
            write_bytes_atomic(target, convert(name, target.read_bytes()))
        actual = digest(target)
        if actual != expected:
            target.unlink()
            raise DataError(f"checksum mismatch for {name} (in {dest}): expected {expected}, got {actual}")


def install_archive(dest: Path, name: str, url: str, expected: str | None, *, source_dir: str | Path | None,
                    desc: str) -> Path:
    """`dest/name`: an archive downloaded from `url` (or copied from `source_dir/name`), checked by
    `install_files` against its published digest (SHA-256, or MD5 where only that is published:
    told apart by length). With no published digest (`expected` None) a file already in place is
    kept, and its SHA-256 is logged and written to `dest/name.sha256`, so later copies can be
    compared with the first one."""
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / name
    if expected is not None:
        algorithm = "md5" if len(expected) == 32 else "sha256"
        install_files(dest, {name: expected}, url_for=lambda _: url, source_dir=source_dir, desc=desc,
                      digest=lambda path: file_digest(path, algorithm))
        return target
    if not target.is_file():
        _obtain(target, name, url, source_dir, desc)
    actual = sha256_of(target)
    record = dest / f"{name}.sha256"
    if record.is_file() and record.read_text().split()[0] != actual:
        raise DataError(f"{name} (in {dest}) differs from the copy first installed there (SHA-256 "
                        f"{record.read_text().split()[0]}, now {actual}); remove {record} to accept it")
    record.write_text(f"{actual}  {name}\n")
    log.info("%s has no published checksum; its SHA-256 is %s (kept in %s)", name, actual, record)
    return target


def get_multi30k(dest: str | Path, source_dir: str | Path | None = None) -> Path:
    """Put Multi30k task-1 raw files (train, val, test_2016_flickr; en de fr cs) into `dest`.

    Files come from `source_dir` when given (a local mirror), else from the public
    repository. Every file is checked against its published SHA-256; a corpus YAML is
    written beside them and its path returned.
    """
    dest = Path(dest)
    install_files(dest, MULTI30K_SHA256, url_for=lambda name: MULTI30K_URL.format(name=name),
                  source_dir=source_dir, desc="multi30k")
    splits = {s: {lang: f"{s}.{lang}.gz" for lang in MULTI30K_LANGS} for s in MULTI30K_SPLITS}
    return write_multiway_corpus_yaml(dest, "multi30k", MULTI30K_LANGS, splits)
