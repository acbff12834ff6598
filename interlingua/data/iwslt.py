"""IWSLT 2017 multilingual TED (de, en, it, nl, ro): the release's files read as what they are.

The release holds, per language pair x-y, `train.tags.x-y.{x,y}` (plain text with talk metadata
on lines that start with '<', the README's own definition) and `IWSLT17.TED.{dev2010,tst2010}.
x-y.{x,y}.xml` (mteval XML: `<doc>` per talk, `<seg id>` per sentence), aligned within a pair.
`build_iwslt17_corpus` turns any folder holding them into the toolkit's corpus YAML, with one
group per language pair and a multi-way tst2010 built by intersecting the pairs through English.
"""
from __future__ import annotations

import gzip
import logging
import re
import shutil
import tarfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from interlingua.data.corpus import read_lines, write_corpus_yaml, write_lines_gz
from interlingua.data.download import install_archive
from interlingua.errors import DataError

log = logging.getLogger(__name__)
LANGUAGES = ["de", "en", "it", "nl", "ro"]
EVAL_SETS = ("dev2010", "tst2010")
_XML_NAME = re.compile(r"^IWSLT17\.TED\.(dev2010|tst2010)\.([a-z]{2})-([a-z]{2})\.([a-z]{2})\.xml(\.gz)?$")
_TRAIN_NAME = re.compile(r"^train\.tags\.([a-z]{2})-([a-z]{2})\.([a-z]{2})(\.gz)?$")


@dataclass(frozen=True)
class Segment:
    talk: str
    """The talk's id (`<talkid>`, else the document's `docid`)."""
    seg_id: str
    text: str


def read_mteval_xml(path: Path) -> list[Segment]:
    """The segments of an IWSLT/mteval XML file in document order, text stripped of padding."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            root = ET.parse(f).getroot()
    except ET.ParseError as err:
        raise DataError(f"{path} is not valid XML: {err}") from None
    except (OSError, EOFError) as err:
        raise DataError(f"cannot read {path}: {err}") from None
    segments = []
    for doc in root.iter("doc"):
        talk_el = doc.find("talkid")
        talk = (talk_el.text or "").strip() if talk_el is not None else doc.get("docid", "")
        for seg in doc.iter("seg"):
            segments.append(Segment(talk, seg.get("id", ""), " ".join((seg.text or "").split())))
    if not segments:
        raise DataError(f"{path} holds no <seg> elements: not an IWSLT evaluation file")
    return segments


def read_train_tags(path: Path) -> list[str]:
    """The transcript lines of a `train.tags` file: every line not starting with '<' (metadata)."""
    return [" ".join(line.split()) for line in read_lines(path) if not line.lstrip().startswith("<")]


def _find(folder: Path) -> tuple[dict[tuple[str, ...], dict[str, Path]], dict[tuple[str, ...], dict[str, Path]]]:
    """Release files anywhere under `folder`: train[(x, y)][lang] and evaluation[(set, x, y)][lang]
    (keys typed as `_unordered` takes them)."""
    train: dict[tuple[str, ...], dict[str, Path]] = {}
    evaluation: dict[tuple[str, ...], dict[str, Path]] = {}
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        if m := _TRAIN_NAME.match(path.name):
            train.setdefault((m[1], m[2]), {})[m[3]] = path
        elif m := _XML_NAME.match(path.name):
            evaluation.setdefault((m[1], m[2], m[3]), {})[m[4]] = path
    return train, evaluation


def _unordered(pairs: dict[tuple[str, ...], dict[str, Path]]) -> dict[tuple[str, ...], dict[str, Path]]:
    """One of x-y / y-x per language pair (the release ships both with the same lines)."""
    out: dict[tuple[str, ...], dict[str, Path]] = {}
    for key, files in sorted(pairs.items()):
        x, y = key[-2:]
        canonical = key[:-2] + tuple(sorted((x, y)))
        if len(files) == 2 and canonical not in out:
            out[canonical] = files
    return out


def _aligned(x: str, y: str, files: dict[str, Path]) -> tuple[dict[str, list[str]], list[str]]:
    """Both sides of one pair's evaluation set, checked to be aligned talk by talk, segment by segment,
    and the talk of each segment."""
    segs = {lang: read_mteval_xml(files[lang]) for lang in (x, y)}
    if len(segs[x]) != len(segs[y]) or any((a.talk, a.seg_id) != (b.talk, b.seg_id) for a, b in zip(segs[x], segs[y])):
        raise DataError(f"{files[x]} and {files[y]} are not aligned ({len(segs[x])} and {len(segs[y])} segments)")
    return {lang: [s.text for s in segs[lang]] for lang in (x, y)}, [s.talk for s in segs[x]]


def _write_pair(dest: Path, prefix: str, texts: dict[str, list[str]]) -> dict[str, str]:
    """One language pair's lines as `<prefix>.<lang>.gz` files in `dest`; the corpus group naming them."""
    group = {}
    for lang, lines in texts.items():
        write_lines_gz(dest / f"{prefix}.{lang}.gz", lines)
        group[lang] = f"{prefix}.{lang}.gz"
    return group


def multiway_through_english(pairs: dict[str, dict[str, list[str]]],
                             talks: dict[str, list[str]]) -> dict[str, list[str]]:
    """A multi-way set from x-en pair sets: the (talk, English sentence) keys that every pair holds,
    each language's sentence for that key (keys seen twice within one pair are left out)."""
    tables = {}
    for x, texts in pairs.items():
        keys = list(zip(talks[x], texts["en"]))
        counts: dict[tuple[str, str], int] = {}
        for k in keys:
            counts[k] = counts.get(k, 0) + 1
        tables[x] = {k: t for k, t in zip(keys, texts[x]) if counts[k] == 1}
    first = next(iter(pairs))
    order = [k for k in zip(talks[first], pairs[first]["en"]) if all(k in tables[x] for x in pairs)]
    out = {"en": [k[1] for k in order]}
    for x in pairs:
        out[x] = [tables[x][k] for k in order]
    return out


def build_iwslt17_corpus(source: Path, dest: Path, languages: list[str] | None = None) -> Path:
    """Convert the release files found under `source` into gzipped line files and `dest/corpus.yaml`:
    `pairs` train/val (dev2010)/tst2010 per language pair, and `splits: tst2010_multiway`."""
    langs = sorted(languages or LANGUAGES)
    unknown = [lang for lang in langs if lang not in LANGUAGES]
    if unknown:
        raise DataError(f"IWSLT 2017 multilingual has no language {', '.join(unknown)} (it has {', '.join(LANGUAGES)})")
    train, evaluation = _find(Path(source))
    keep = lambda key: all(lang in langs for lang in key[-2:])  # noqa: E731
    train = _unordered({k: v for k, v in train.items() if keep(k)})
    evaluation = _unordered({k: v for k, v in evaluation.items() if keep(k)})
    if not evaluation:
        raise DataError(f"no IWSLT17.TED.{{dev2010,tst2010}}.x-y.x.xml files for {', '.join(langs)} under {source}")
    dest.mkdir(parents=True, exist_ok=True)
    spec: dict = {"name": "iwslt17", "languages": langs, "pairs": {}}
    if not train:
        log.warning("no train.tags files under %s: the corpus has evaluation sets only", source)
    for (x, y), files in train.items():
        texts = {lang: read_train_tags(files[lang]) for lang in (x, y)}
        if len(texts[x]) != len(texts[y]):
            raise DataError(f"{files[x]} and {files[y]} hold {len(texts[x])} and {len(texts[y])} transcript lines")
        spec["pairs"].setdefault("train", {})[f"{x}-{y}"] = _write_pair(dest, f"train.{x}-{y}", texts)
    english_pairs: dict[str, dict[str, list[str]]] = {}
    english_talks: dict[str, list[str]] = {}
    for (split, x, y), files in evaluation.items():
        texts, talks = _aligned(x, y, files)
        name = "val" if split == "dev2010" else split
        spec["pairs"].setdefault(name, {})[f"{x}-{y}"] = _write_pair(dest, f"{split}.{x}-{y}", texts)
        if split == "tst2010" and "en" in (x, y):
            other = y if x == "en" else x
            english_pairs[other] = texts
            english_talks[other] = talks
    if len(english_pairs) > 1:
        multi = multiway_through_english(english_pairs, english_talks)
        spec["splits"] = {"tst2010_multiway": {}}
        for lang, lines in sorted(multi.items()):
            write_lines_gz(dest / f"tst2010.multiway.{lang}.gz", lines)
            spec["splits"]["tst2010_multiway"][lang] = f"tst2010.multiway.{lang}.gz"
    return write_corpus_yaml(dest, spec)


RELEASE_ARCHIVE = ("2017-01-trnmted.tgz",
                   "https://drive.google.com/uc?id=12ycYSzLIG253AFN35Y6qoyf9wtkOjakp&export=download&confirm=t",
                   "aca701032b1c4411afc4d9fa367796ba")
"""The WIT3 release of the 2017 multilingual task (MD5 as torchtext publishes it); it holds
`texts/DeEnItNlRo/DeEnItNlRo/DeEnItNlRo-DeEnItNlRo.tgz`, the archive of the files above."""


def _is_release_file(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return bool(_TRAIN_NAME.match(base) or _XML_NAME.match(base))


def unpack_release(archive: Path, dest: Path) -> Path:
    """The release files from the outer archive (through its inner DeEnItNlRo-DeEnItNlRo.tgz) into
    `dest`, each under its own base name via a temporary name; nothing else is written."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, "r:*") as outer:
            inner = next((m for m in outer if m.name.endswith("DeEnItNlRo-DeEnItNlRo.tgz")), None)
            if inner is None:
                raise DataError(f"{archive} holds no DeEnItNlRo-DeEnItNlRo.tgz: "
                                "not the IWSLT 2017 multilingual release")
            with tarfile.open(fileobj=outer.extractfile(inner), mode="r:gz") as tar:
                for member in tar:
                    if not member.isfile() or not _is_release_file(member.name):
                        continue
                    target = dest / member.name.rsplit("/", 1)[-1]
                    tmp = target.with_name(target.name + ".part")
                    extracted = tar.extractfile(member)
                    assert extracted is not None  # a regular file (checked above) has its data
                    with extracted as src, open(tmp, "wb") as out:
                        shutil.copyfileobj(src, out)
                    tmp.replace(target)
    except (tarfile.TarError, OSError, EOFError) as err:
        raise DataError(f"{archive} is not a readable IWSLT 2017 archive: {err}") from None
    return dest


def get_iwslt17(dest: str | Path, langs: list[str] | None = None, source_dir: str | Path | None = None) -> Path:
    """IWSLT 2017 multilingual into `dest` with its corpus YAML. `source_dir` may hold the release
    archive (checked like a download) or release files already unpacked, in any layout."""
    dest = Path(dest)
    if source_dir is not None and not (Path(source_dir) / RELEASE_ARCHIVE[0]).is_file():
        if not Path(source_dir).is_dir():
            raise DataError(f"--from {source_dir}: no such folder")
        return build_iwslt17_corpus(Path(source_dir), dest, langs)
    archive = install_archive(dest / "downloads", *RELEASE_ARCHIVE, source_dir=source_dir, desc="IWSLT 2017")
    release = unpack_release(archive, dest / "release")
    return build_iwslt17_corpus(release, dest, langs)
