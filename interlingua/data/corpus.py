"""Corpora described in YAML: multi-way parallel files per split, or per-pair files.

A corpus YAML looks like::

    name: multi30k
    languages: [en, de, fr, cs]
    splits:                       # multi-way: line i of every file is the same sentence
      train: {en: train.en.gz, de: train.de.gz, ...}
      val:   {en: val.en.gz, ...}
    pairs:                        # optional per-pair files (bitexts)
      train:
        de-en: {de: europarl.de, en: europarl.en}

Paths are relative to the YAML's folder. Files may be gzipped. Every group of files that
belongs together is checked for equal line counts when read.
"""
from __future__ import annotations

import gzip
import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

import yaml

from interlingua.atomic_files import atomic_output, write_text_atomic
from interlingua.errors import DataError
from interlingua.textio import decode_lines, iter_decoded_lines, read_text, yaml_problem

_LANG = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,15}$")


@dataclass
class ParallelGroup:
    """Files whose lines are aligned: one file per language."""

    name: str
    files: dict[str, Path]


@dataclass
class Corpus:
    name: str
    languages: list[str]
    splits: dict[str, list[ParallelGroup]] = field(default_factory=dict)
    source: Path | None = None

    def groups(self, split: str) -> list[ParallelGroup]:
        if split not in self.splits:
            raise DataError(f"corpus '{self.name}' has no split '{split}' (it has: {', '.join(sorted(self.splits))})")
        return self.splits[split]


def load_corpus(path: str | Path) -> Corpus:
    """Read and check a corpus YAML: languages known, files present."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"corpus file not found: {path}")
    try:
        spec = yaml.safe_load(read_text(path)) or {}
    except yaml.YAMLError as err:
        raise DataError(f"corpus {path} is not valid YAML: {yaml_problem(err)}") from None
    if not isinstance(spec, dict):
        raise DataError(f"corpus {path}: expected a mapping with 'languages' and 'splits'/'pairs'")
    unknown = set(spec) - {"name", "languages", "splits", "pairs"}
    if unknown:
        raise DataError(f"corpus {path}: unknown key(s) {', '.join(sorted(unknown))}")
    langs = spec.get("languages")
    if not isinstance(langs, list) or not langs or not all(isinstance(x, str) and _LANG.match(x) for x in langs):
        raise DataError(f"corpus {path}: 'languages' must be a non-empty list of language codes")
    base = path.resolve().parent
    corpus = Corpus(name=str(spec.get("name", path.stem)), languages=list(langs), source=path)

    def resolve(split: str, group: str, files: object) -> ParallelGroup:
        if not isinstance(files, dict) or len(files) < 1:
            raise DataError(f"corpus {path}: {split}/{group} must map language codes to files")
        out = {}
        for lang, f in files.items():
            if lang not in langs:
                raise DataError(f"corpus {path}: {split}/{group} uses language '{lang}' not in languages {langs}")
            p = Path(f)
            p = p if p.is_absolute() else base / p
            if not p.is_file():  # read more than once (fingerprint, counts, text): a regular file, not a pipe
                what = "is a folder, not a file" if p.is_dir() else "not found" if not p.exists() else \
                    "is not a regular file (a corpus file is read more than once)"
                raise DataError(f"corpus {path}: file for {split}/{group}/{lang} {what}: {p}")
            out[lang] = p
        return ParallelGroup(name=group, files=out)

    for split, files in (spec.get("splits") or {}).items():
        corpus.splits.setdefault(split, []).append(resolve(split, "multiway", files))
    for split, pairs in (spec.get("pairs") or {}).items():
        if not isinstance(pairs, dict):
            raise DataError(f"corpus {path}: pairs/{split} must map 'src-tgt' names to files")
        for pair, files in pairs.items():
            corpus.splits.setdefault(split, []).append(resolve(split, str(pair), files))
    if not corpus.splits:
        raise DataError(f"corpus {path}: no 'splits' or 'pairs' given")
    return corpus


def normalize_line(line: str, lowercase: bool, normalize: bool) -> str:
    """NFKC + collapsed whitespace (+ lowercasing), the same for training and inference."""
    if normalize:  # str.split() splits at exactly the characters `\s` matches, and faster
        line = " ".join(unicodedata.normalize("NFKC", line).split())
    else:
        line = line.strip("\r\n")
    return line.lower() if lowercase else line


def read_lines(path: Path) -> list[str]:
    """All lines of a (possibly gzipped) UTF-8 file, newline stripped; bad bytes name their line."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise DataError(f"file not found: {path}") from None
    except (OSError, EOFError) as err:
        raise DataError(f"cannot read {path}: {err}") from None
    return decode_lines(raw, str(path))


def read_group(group: ParallelGroup, limit: int | None = None) -> dict[str, list[str]]:
    """Read aligned files, insisting that they have the same number of lines."""
    texts = {lang: read_lines(p) for lang, p in group.files.items()}
    counts = {lang: len(t) for lang, t in texts.items()}
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"{group.files[lang]} has {n}" for lang, n in counts.items())
        raise DataError(f"parallel files of '{group.name}' have different line counts: {detail}")
    if limit is not None:
        texts = {lang: t[:limit] for lang, t in texts.items()}
    return texts


def stream_group(group: ParallelGroup, langs: list[str], chunk_rows: int, limit: int | None = None,
                 transform: Callable[[str], str] | None = None) -> Iterator[dict[str, list[str]]]:
    """The aligned lines of `langs` of a file group, `chunk_rows` at a time, never the whole files
    in memory; files that end at different lines raise `DataError` naming each count."""
    files = {lang: group.files[lang] for lang in langs}
    handles = {}
    try:
        for lang, path in files.items():
            try:
                handles[lang] = (gzip.open if path.suffix == ".gz" else open)(path, "rb")
            except OSError as err:
                raise DataError(f"cannot read {path}: {err}") from None
        lines = {lang: iter_decoded_lines(h, str(files[lang])) for lang, h in handles.items()}
        counts = dict.fromkeys(langs, 0)
        rows = 0
        while limit is None or rows < limit:
            want = chunk_rows if limit is None else min(chunk_rows, limit - rows)
            chunk = {}
            try:
                for lang in langs:
                    chunk[lang] = list(islice(lines[lang], want))
                    counts[lang] += len(chunk[lang])
            except (OSError, EOFError) as err:
                raise DataError(f"cannot read {files[lang]}: {err}") from None
            sizes = {len(v) for v in chunk.values()}
            if len(sizes) > 1 or (sizes and max(sizes) < want and limit is None):
                for lang in langs:  # count the rest, to name both lengths
                    counts[lang] += sum(1 for _ in lines[lang])
                if len(set(counts.values())) > 1:
                    detail = ", ".join(f"{files[lang]} has {n}" for lang, n in counts.items())
                    raise DataError(f"parallel files of '{group.name}' have different line counts: {detail}")
            n = min(sizes) if sizes else 0
            if n:
                yield {lang: [transform(x) for x in v] if transform else v for lang, v in chunk.items()}
                rows += n
            if n < want:
                return
    finally:
        for h in handles.values():
            h.close()


def write_lines_gz(path: Path, lines: Iterable[str]) -> None:
    """Write lines gzipped through a temporary name: a file under the final name is always whole."""
    with atomic_output(path) as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        for line in lines:
            f.write((line + "\n").encode("utf-8"))


def write_corpus_yaml(dest: Path, spec: dict) -> Path:
    """`dest/corpus.yaml` from a corpus description, through a temporary name (it appears whole or not
    at all: the file that makes a converted data set usable is written last)."""
    out = dest / "corpus.yaml"
    write_text_atomic(out, yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    return out


def write_multiway_corpus_yaml(dest: Path, name: str, languages: list[str], splits: dict[str, dict[str, str]]) -> Path:
    """Write the corpus YAML for a folder of multi-way parallel files."""
    return write_corpus_yaml(dest, {"name": name, "languages": languages, "splits": splits})


def write_corpus_with_monolingual(base: str | Path, dest: Path, name: str, monolingual: dict[str, list[str]]) -> Path:
    """A corpus YAML in `dest`: every file group of the corpus `base`, plus one training group per
    language of `monolingual` (lang -> lines, written gzipped beside the YAML). A one-language group
    serves only the copy directions (A->A, `directions.monolingual: true`) and the vocabularies."""
    corpus = load_corpus(base)
    unknown = sorted(set(monolingual) - set(corpus.languages))
    if unknown:
        raise DataError(f"monolingual text for {', '.join(unknown)}: not a language of corpus {corpus.source} "
                        f"({', '.join(corpus.languages)})")
    dest.mkdir(parents=True, exist_ok=True)

    def rel(path: Path) -> str:
        return os.path.relpath(path.resolve(), dest.resolve())

    splits: dict[str, dict[str, str]] = {}
    pairs: dict[str, dict[str, dict[str, str]]] = {}
    for split, groups in corpus.splits.items():
        for g in groups:
            files = {lang: rel(p) for lang, p in g.files.items()}
            if g.name == "multiway":
                splits[split] = files
            else:
                pairs.setdefault(split, {})[g.name] = files
    for lang, lines in sorted(monolingual.items()):
        file = dest / f"{name}.{lang}.gz"
        write_lines_gz(file, (x for x in (" ".join(line.split()) for line in lines) if x))
        pairs.setdefault("train", {})[f"{name}.{lang}"] = {lang: file.name}
    spec = {"name": f"{corpus.name}+{name}", "languages": corpus.languages, "splits": splits, "pairs": pairs}
    return write_corpus_yaml(dest, {k: v for k, v in spec.items() if v})
