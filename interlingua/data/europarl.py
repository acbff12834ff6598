"""Europarl v7 ({de,es,fr}<->en) with the WMT 2007 development and test sets, as paper 000 uses them.

The x-y pairs between the non-English languages (paper 000's many-to-many set-up) are built by
joining the x-en files on identical English lines.

Training text comes from WMT13's `training-parallel-europarl-v7.tgz` (the v7 per-pair files of
cs/de/es/fr-en in one archive, SHA-256 pinned). The evaluation sets are WMT07's `devsets.tgz`:
dev2006 (validation), devtest2006 and test2006 (test), multi-way parallel across the languages,
as plain text or as WMT SGML (`<seg>` elements). Their older files are Latin-1, not UTF-8: each
is decoded as UTF-8 where it is, else as Windows-1252, and the fallback is logged.
"""
from __future__ import annotations

import gzip
import io
import logging
import re
import tarfile
from pathlib import Path

import numpy as np

from interlingua.data.cleaning import hash64
from interlingua.data.corpus import write_corpus_yaml, write_lines_gz
from interlingua.data.download import install_archive
from interlingua.errors import DataError

log = logging.getLogger(__name__)
LANGUAGES = ["de", "es", "fr"]
"""The languages paired with English (paper 000's Europarl set-ups)."""
TRAIN_ARCHIVE = ("training-parallel-europarl-v7.tgz", "https://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz",
                 "0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7")
DEV_ARCHIVE = ("devsets.tgz", "https://www.statmt.org/wmt07/devsets.tgz", None)
"""No checksum of this file is published; `install_archive` records the first copy's SHA-256."""
EVAL_SETS = {"dev2006": "val", "devtest2006": "devtest2006", "test2006": "test2006"}
_TRAIN_MEMBER = re.compile(r"(^|/)europarl-v7\.([a-z]{2})-en\.([a-z]{2})$")
_EVAL_MEMBER = re.compile(r"(^|/)(dev2006|devtest2006|test2006)(-src|-ref)?\.([a-z]{2})(\.sgm)?$")
_SEG = re.compile(r"<seg[^>]*>(.*?)</seg>", re.S | re.I)


def decode_legacy(raw: bytes, name: str) -> str:
    """UTF-8 text, or Windows-1252 (a superset of Latin-1) for the older WMT files that are not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        log.info("%s is not UTF-8; read as Windows-1252", name)
        return raw.decode("cp1252", errors="replace")


def sgml_segments(text: str) -> list[str]:
    """The `<seg>` contents of a WMT SGML file, in order, entities unescaped."""
    import html
    return [" ".join(html.unescape(s).split()) for s in _SEG.findall(text)]


def eval_lines(raw: bytes, name: str) -> list[str]:
    """One evaluation file's sentences, whether plain text (a line each) or SGML."""
    text = decode_legacy(raw, name)
    if name.endswith(".sgm") or "<seg" in text[:10000].lower():
        segments = sgml_segments(text)
        if not segments:
            raise DataError(f"{name}: an SGML file without <seg> elements")
        return segments
    return [" ".join(line.split()) for line in text.splitlines()]


def _members(archive: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(archive, "r:*")
    except (tarfile.TarError, OSError, EOFError) as err:
        raise DataError(f"{archive} is not a readable tar archive: {err}") from None


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo, archive: Path) -> bytes:
    try:
        f = tar.extractfile(member)
        if f is None:
            raise DataError(f"{archive}: {member.name} is not a file")
        return f.read()
    except (tarfile.TarError, OSError, EOFError) as err:
        raise DataError(f"{archive}: cannot read {member.name}: {err}") from None


def extract_training(archive: Path, dest: Path, langs: list[str]) -> dict[str, dict[str, str]]:
    """Europarl v7 x-en files of `langs` from the archive, gzipped into `dest`: pair -> lang -> file."""
    groups: dict[str, dict[str, str]] = {}
    with _members(archive) as tar:
        for member in tar:
            m = _TRAIN_MEMBER.search(member.name)
            if not m or m[2] not in langs:
                continue
            pair, lang = f"{m[2]}-en", m[3]
            name = f"europarl-v7.{pair}.{lang}.gz"
            stream = tar.extractfile(member)
            if stream is None:
                raise DataError(f"{archive}: {member.name} is not a file")
            try:  # streamed: a file of two million lines never sits in memory
                lines = io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline="\n")
                write_lines_gz(dest / name, (" ".join(x.split()) for x in lines))
            except (tarfile.TarError, OSError, EOFError) as err:
                raise DataError(f"{archive}: cannot read {member.name}: {err}") from None
            groups.setdefault(pair, {})[lang] = name
    missing = [f"{x}-en" for x in langs if len(groups.get(f"{x}-en", {})) != 2]
    if missing:
        raise DataError(f"{archive} holds no complete Europarl v7 files for {', '.join(missing)}")
    return groups


def extract_evaluation(archive: Path, dest: Path, langs: list[str]) -> dict[str, dict[str, str]]:
    """The multi-way WMT07 sets of `langs` (plain or SGML) from the archive into `dest`: split -> lang -> file,
    each set checked to have the same number of sentences in every language."""
    found: dict[str, dict[str, list[str]]] = {}
    with _members(archive) as tar:
        for member in tar:
            m = _EVAL_MEMBER.search(member.name)
            if not m or m[4] not in langs or not member.isfile():
                continue
            found.setdefault(m[2], {})[m[4]] = eval_lines(_read_member(tar, member, archive), member.name)
    splits: dict[str, dict[str, str]] = {}
    for name, split in EVAL_SETS.items():
        texts = found.get(name, {})
        if set(texts) != set(langs):
            log.warning("%s: %s is missing for %s; that set is left out", archive, name,
                        ", ".join(sorted(set(langs) - set(texts))))
            continue
        counts = {lang: len(t) for lang, t in texts.items()}
        if len(set(counts.values())) > 1:
            raise DataError(f"{archive}: {name} has different sentence counts per language: {counts}")
        for lang, lines in texts.items():
            write_lines_gz(dest / f"{name}.{lang}.gz", lines)
        splits[split] = {lang: f"{name}.{lang}.gz" for lang in sorted(texts)}
    if "val" not in splits:
        raise DataError(f"{archive} holds no dev2006 set for {', '.join(langs)}")
    return splits


def _line_hashes(path: Path) -> np.ndarray:
    """A 64-bit hash of every line of a gzipped file, in order."""
    with gzip.open(path, "rb") as f:
        return np.fromiter((hash64(line.rstrip(b"\n")) for line in f), dtype=np.uint64)


def _unique_rows(hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(hash, line) of the hashes that occur exactly once, sorted by hash."""
    values, first, counts = np.unique(hashes, return_index=True, return_counts=True)
    once = counts == 1
    return values[once], first[once]


def join_through_english(dest: Path, groups: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """Pairs between the non-English languages, built from the x-en files: lines whose English side is
    identical (and unique within each file) are translations of one English sentence. Europarl is
    largely multi-parallel through English, so this is how its many-to-many set-ups get x-y data."""
    langs = sorted(p.split("-")[0] for p in groups)
    keys = {x: _unique_rows(_line_hashes(dest / groups[f"{x}-en"]["en"])) for x in langs}
    out: dict[str, dict[str, str]] = {}
    for i, x in enumerate(langs):
        for y in langs[i + 1:]:
            _, ix, iy = np.intersect1d(keys[x][0], keys[y][0], assume_unique=True, return_indices=True)
            rows_x, rows_y = keys[x][1][ix], keys[y][1][iy]
            order = np.argsort(rows_x)
            rows_x, rows_y = rows_x[order], rows_y[order]
            # y's lines are needed in x's order: hold just those, as one bytes blob with offsets
            wanted = np.full(int(rows_y.max()) + 1 if len(rows_y) else 0, -1, dtype=np.int64)
            wanted[rows_y] = np.arange(len(rows_y))
            blob, spans = bytearray(), np.zeros((len(rows_y), 2), dtype=np.int64)
            with gzip.open(dest / groups[f"{y}-en"][y], "rb") as f:
                for n, line in enumerate(f):
                    if n < len(wanted) and wanted[n] >= 0:
                        spans[wanted[n]] = (len(blob), len(line.rstrip(b"\n")))
                        blob += line.rstrip(b"\n")
            picked = np.zeros(int(rows_x.max()) + 1 if len(rows_x) else 0, dtype=bool)
            picked[rows_x] = True
            with gzip.open(dest / groups[f"{x}-en"][x], "rb") as f:
                x_lines = (line.rstrip(b"\n").decode("utf-8") for n, line in enumerate(f)
                           if n < len(picked) and picked[n])
                write_lines_gz(dest / f"europarl-v7.{x}-{y}.{x}.gz", x_lines)
            write_lines_gz(dest / f"europarl-v7.{x}-{y}.{y}.gz",
                           (bytes(blob[a:a + n]).decode("utf-8") for a, n in spans))
            out[f"{x}-{y}"] = {x: f"europarl-v7.{x}-{y}.{x}.gz", y: f"europarl-v7.{x}-{y}.{y}.gz"}
            log.info("%s-%s: %d lines joined through English", x, y, len(rows_x))
    return out


def get_europarl(dest: str | Path, langs: list[str] | None = None, source_dir: str | Path | None = None) -> Path:
    """Europarl v7 x-en for `langs` (default de es fr) plus the WMT07 sets into `dest`, with its corpus YAML.
    The archives come from `source_dir` (a folder holding them) when given, else from statmt.org."""
    langs = sorted(langs or LANGUAGES)
    unknown = [x for x in langs if x not in LANGUAGES]
    if unknown:
        raise DataError(f"the Europarl v7 set-up pairs English with {', '.join(LANGUAGES)} (the languages of "
                        f"the WMT07 sets), not {', '.join(unknown)}")
    dest = Path(dest)
    downloads = dest / "downloads"
    train = install_archive(downloads, *TRAIN_ARCHIVE, source_dir=source_dir, desc="Europarl v7")
    dev = install_archive(downloads, *DEV_ARCHIVE, source_dir=source_dir, desc="WMT07 development")
    pairs = extract_training(train, dest, langs)
    pairs.update(join_through_english(dest, pairs))
    all_langs = sorted({*langs, "en"})
    splits = extract_evaluation(dev, dest, all_langs)
    spec = {"name": "europarl_v7", "languages": all_langs, "splits": splits, "pairs": {"train": pairs}}
    return write_corpus_yaml(dest, spec)
