"""`interlingua prepare`: normalise text, train sentencepiece, cache the encoded corpus.

The corpus streams through in chunks, so millions of lines never sit in memory: sentencepiece
learns from a random sample of the training lines, each chunk is encoded on all cores and
appended to one flat id file per language and file group (read back memory-mapped), and the
training lines are cleaned (`preprocess.clean`) with what was dropped counted per reason.
The cache lives in `<work_dir>/data/` and is keyed by a hash of the corpus files and the
preprocessing settings, so changing either re-prepares instead of reusing stale ids.
"""
from __future__ import annotations

import errno
import hashlib
import json
import logging
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from interlingua.atomic_files import atomic_output, disk_full, write_bytes_atomic, write_text_atomic
from interlingua.config import ExperimentConfig, PreprocessConfig
from interlingua.data.chunk_tokenizer import ChunkTokenizer
from interlingua.data.cleaning import LineFilter
from interlingua.data.corpus import Corpus, ParallelGroup, load_corpus, normalize_line, read_group, stream_group
from interlingua.data.token_store import DamagedCache, TokenFileWriter, TokenSequences, id_dtype
from interlingua.data.vocab import Vocab, language_tag
from interlingua.errors import DataError, LanguageError, one_line

log = logging.getLogger(__name__)
CACHE_VERSION = 2
CHUNK_ROWS = 20_000
"""Lines read, normalised and encoded at a time: large enough for sentencepiece's threads."""
REFERENCE_SPLITS = ("val",)
"""Splits whose raw text is kept next to the ids: dev BLEU scores against the corpus's own lines."""
CLEANED_SPLITS = ("train",)
"""Splits that `preprocess.clean` filters; evaluation sets are kept whole."""


@dataclass
class EncodedGroup:
    """Aligned id sequences of one file group: lang -> sequences (a line may be empty)."""

    name: str
    ids: dict[str, TokenSequences]
    texts: dict[str, list[str]] | None = None
    """The lines as the corpus files hold them, aligned with `ids` (only for REFERENCE_SPLITS)."""

    def __len__(self) -> int:
        return len(next(iter(self.ids.values())))


@dataclass
class PreparedData:
    vocabs: dict[str, Vocab]
    """Per language; with a joint vocabulary every language maps to the same object."""
    splits: dict[str, list[EncodedGroup]]
    languages: list[str]
    joint_vocab: bool
    cleaning: dict[str, dict[str, dict]] = field(default_factory=dict)
    """split -> group -> {lines, kept, dropped: {reason: count}, truncated: {lang: count}}."""

    def groups(self, split: str) -> list[EncodedGroup]:
        if split not in self.splits:
            raise DataError(f"prepared corpus has no split '{split}' (it has: {', '.join(sorted(self.splits))})")
        return self.splits[split]


def _fingerprint(corpus: Corpus, pre: PreprocessConfig, langs: list[str], given: dict[str, Vocab] | None = None) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(pre.model_dump(mode="json", exclude={"workers"}), sort_keys=True).encode())
    h.update(json.dumps(langs).encode())
    if given is not None:  # encoded with a checkpoint's vocabularies: they are part of the key
        for lang in langs:
            h.update(f"{lang}/{given[lang].offset}/".encode() + hashlib.sha256(given[lang].proto).digest())
    for split in sorted(corpus.splits):
        for g in corpus.splits[split]:
            for lang in sorted(g.files):
                st = g.files[lang].stat()
                h.update(f"{split}/{g.name}/{lang}/{g.files[lang].resolve()}/{st.st_size}/{int(st.st_mtime)}".encode())
    h.update(str(CACHE_VERSION).encode())
    return h.hexdigest()[:16]


def _normalizer(pre: PreprocessConfig):
    return lambda line: normalize_line(line, pre.lowercase, pre.normalize)


def _used_groups(corpus: Corpus, split: str, langs: list[str]) -> list[tuple[ParallelGroup, list[str]]]:
    """(group, its languages among `langs`) of the groups of a split that hold any of them."""
    used = ((g, [lang for lang in g.files if lang in langs]) for g in corpus.splits.get(split, []))
    return [(g, mine) for g, mine in used if mine]


def _training_lines(corpus: Corpus, pre: PreprocessConfig, langs: list[str], wanted: set[str]) -> Iterator[str]:
    """The normalised, non-empty training lines of the `wanted` languages, streamed."""
    for g, mine in _used_groups(corpus, "train", langs):
        mine = [lang for lang in mine if lang in wanted]
        if not mine:
            continue
        for chunk in stream_group(g, mine, CHUNK_ROWS, pre.max_train_sentences, _normalizer(pre)):
            for lang in mine:
                yield from (s for s in chunk[lang] if s)


def train_vocabs(corpus: Corpus, pre: PreprocessConfig, langs: list[str]) -> dict[str, Vocab]:
    """Sentencepiece per language (or one joint), each from a random sample of `pre.vocab_sample` lines."""
    if pre.joint_vocab:
        joint = Vocab.train(_training_lines(corpus, pre, langs, set(langs)), pre.vocab_size,
                            user_symbols=[language_tag(lang) for lang in langs], sample=pre.vocab_sample)
        joint.warn_if_smaller(pre.vocab_size, f"preprocess.vocab_size (the joint vocabulary of {', '.join(langs)})")
        return {lang: joint for lang in langs}
    vocabs = {}
    for lang in tqdm(langs, desc="sentencepiece", unit="lang"):
        vocabs[lang] = Vocab.train(_training_lines(corpus, pre, langs, {lang}), pre.vocab_size, sample=pre.vocab_sample)
        vocabs[lang].warn_if_smaller(pre.vocab_size, f"preprocess.vocab_size (the '{lang}' vocabulary)")
    return vocabs


def config_as_built(cfg: ExperimentConfig, data: PreparedData) -> dict[str, Any]:
    """`cfg` as plain JSON, for the record of a run, with `preprocess.vocab_size` the size of the largest
    vocabulary where sentencepiece built fewer pieces than asked: what the run used, not what it asked
    for (asking for that size again builds the same vocabularies)."""
    recorded = cfg.model_dump(mode="json")
    built = max(v.sp.get_piece_size() for v in data.vocabs.values())
    if built < cfg.preprocess.vocab_size:
        recorded["preprocess"]["vocab_size"] = built
    return recorded


def _check_training_text(corpus: Corpus, pre: PreprocessConfig, langs: list[str]) -> None:
    """Every language has some training text (reading only until each has shown a line)."""
    have: set[str] = set()
    for g, mine in _used_groups(corpus, "train", langs):
        for chunk in stream_group(g, mine, CHUNK_ROWS, pre.max_train_sentences, _normalizer(pre)):
            have.update(lang for lang in mine if any(chunk[lang]))
            if have.issuperset(mine):
                break
    missing = [lang for lang in langs if lang not in have]
    if missing:
        raise DataError(f"corpus {corpus.source}: no training text for language(s) {', '.join(missing)}")


def _save_array(path: Path, array: np.ndarray) -> None:
    """`np.save` under exactly `path`, whose full disk names the file (numpy's says only "N requested and
    M written")."""
    with atomic_output(path) as f:
        np.save(f, array)


def _tokenize_group(split: str, gi: int, group: ParallelGroup, mine: list[str], tokenizer: ChunkTokenizer,
                  pre: PreprocessConfig, langs: list[str], out_dir: Path, bar: tqdm) -> dict:
    """Stream one file group into flat id files; the group's cleaning report (keep index saved)."""
    writers = {lang: TokenFileWriter(out_dir / f"{split}.{gi}.{lang}.ids", id_dtype(len(tokenizer.vocabs[lang])))
               for lang in mine}
    cleaner = LineFilter(pre.clean, pre.max_len, langs) if split in CLEANED_SPLITS else None
    truncated = dict.fromkeys(mine, 0)
    limit = pre.max_train_sentences if split == "train" else None
    try:
        for enc in tokenizer.tokenize(stream_group(group, mine, CHUNK_ROWS, limit)):
            for lang in mine:
                truncated[lang] += int((enc.full_lengths[lang] > pre.max_len).sum())
                writers[lang].write(enc.ids[lang], enc.lengths[lang])
            if cleaner is not None:
                cleaner.add(enc.full_lengths, enc.texts, enc.hashes)
            bar.update(len(enc.full_lengths[mine[0]]))
        lengths = {lang: w.close() for lang, w in writers.items()}
    except BaseException:
        for w in writers.values():  # unflushed ids would fail again, unnamed, when collected
            w.discard()
        raise
    for lang, n in lengths.items():
        _save_array(out_dir / f"{split}.{gi}.{lang}.len.npy", n)
    report: dict = {"lines": len(next(iter(lengths.values())))}
    if cleaner is not None:
        kept = cleaner.kept()
        _save_array(out_dir / f"{split}.{gi}.keep.npy", kept)
        report = cleaner.report(kept)
    if any(truncated.values()):
        report["truncated"] = {lang: n for lang, n in truncated.items() if n}
        if not pre.clean.drop_long or split not in CLEANED_SPLITS:
            log.warning("%s/%s: lines longer than max_len=%d subwords were truncated: %s", split, group.name,
                        pre.max_len, ", ".join(f"{lang} {n}" for lang, n in report["truncated"].items()))
    return report


def prepare(cfg: ExperimentConfig, force: bool = False, vocabs: dict[str, Vocab] | None = None) -> PreparedData:
    """Prepare (or load from cache) the encoded corpus of an experiment. With `vocabs` (a checkpoint's,
    for `train --init`) the corpus is encoded with those instead of newly trained ones."""
    corpus = load_corpus(cfg.corpus)
    pre = cfg.preprocess
    langs = sorted(cfg.directions.languages or corpus.languages)
    unknown = sorted(set(langs) - set(corpus.languages))
    if unknown:
        raise DataError(f"directions.languages: {', '.join(unknown)} not in corpus {corpus.source} "
                        f"(it has {', '.join(corpus.languages)})")
    if vocabs is not None:
        absent = [lang for lang in langs if lang not in vocabs]
        if absent:
            raise LanguageError(f"the initial checkpoint has no vocabulary for {', '.join(absent)} (it has "
                                f"{', '.join(sorted(vocabs))}); add a language with `interlingua extend` first")
        vocabs = {lang: vocabs[lang] for lang in langs}
    cache_dir = Path(cfg.work_dir) / "data"
    fp = _fingerprint(corpus, pre, langs, vocabs)
    meta_path = cache_dir / "meta.json"
    if not force and meta_path.is_file():
        cached = _cached(cache_dir, fp, vocabs)
        if cached is not None:
            return _attach_texts(cached, corpus)
    cache_dir.mkdir(parents=True, exist_ok=True)
    meta_path.unlink(missing_ok=True)  # from here on the cache is incomplete until meta.json is rewritten

    if "train" not in corpus.splits:
        raise DataError(f"corpus {corpus.source} has no 'train' split to learn vocabularies from")
    _check_training_text(corpus, pre, langs)
    given = vocabs is not None  # a checkpoint's vocabularies: it holds them, nothing to cache
    if vocabs is None:
        vocabs = train_vocabs(corpus, pre, langs)

    work = cache_dir / "encoded.part"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        return _tokenize_and_save(corpus, cfg, langs, vocabs, given, cache_dir, work, fp)
    except BaseException as err:
        if not disk_full(err):
            raise
        shutil.rmtree(work, ignore_errors=True)  # a full disk is left with the room it had before
        where = err.filename if isinstance(err, OSError) and err.filename else cache_dir
        raise OSError(errno.ENOSPC, "no space left on device while writing it to prepare the corpus (the partial "
                                    "encoding is removed; the corpus itself is untouched)", str(where)) from None


def _tokenize_and_save(corpus: Corpus, cfg: ExperimentConfig, langs: list[str], vocabs: dict[str, Vocab], given: bool,
                     cache_dir: Path, work: Path, fp: str) -> PreparedData:
    """Encode every split into `work`, then make it the cache: the folder, the vocabularies, meta.json last."""
    pre = cfg.preprocess
    meta_path = cache_dir / "meta.json"
    groups_meta: dict[str, list[str]] = {}
    group_langs: dict[str, list[list[str]]] = {}
    cleaning: dict[str, dict[str, dict]] = {}
    with tqdm(desc="encode", unit=" lines", unit_scale=True) as bar, \
            ChunkTokenizer(vocabs, pre, hashes=pre.clean.dedup, texts=pre.clean.language_id) as tokenizer:
        for split in corpus.splits:
            used = _used_groups(corpus, split, langs)
            groups_meta[split] = [g.name for g, _ in used]
            group_langs[split] = [sorted(mine) for _, mine in used]
            for i, (g, mine) in enumerate(used):
                report = _tokenize_group(split, i, g, sorted(mine), tokenizer, pre, langs, work, bar)
                cleaning.setdefault(split, {})[g.name] = report
    final = cache_dir / "encoded"
    shutil.rmtree(final, ignore_errors=True)
    work.rename(final)
    (cache_dir / "encoded.npz").unlink(missing_ok=True)  # a cache of an older layout
    write_text_atomic(cache_dir / "cleaning.json", json.dumps(cleaning, indent=1))
    for line in cleaning_summary(cleaning):
        log.info("%s", line)
    distinct = {id(v): v for v in vocabs.values()}
    if not given and pre.joint_vocab:
        write_bytes_atomic(cache_dir / "joint.model", next(iter(vocabs.values())).proto)
    elif not given:
        for lang, v in vocabs.items():
            write_bytes_atomic(cache_dir / f"{lang}.model", v.proto)
    meta = {
        "fingerprint": fp, "languages": langs, "joint_vocab": pre.joint_vocab,
        "groups": groups_meta, "group_langs": group_langs,
        "dtypes": {lang: id_dtype(len(v)).name for lang, v in vocabs.items()},
        "vocab_sizes": {lang: len(v) for lang, v in vocabs.items()},
        "n_vocabs": len(distinct),
    }
    write_text_atomic(meta_path, json.dumps(meta, indent=1))  # last: it marks the cache complete
    return _attach_texts(_load_cache(cache_dir, meta, vocabs), corpus)


def cleaning_summary(cleaning: dict[str, dict[str, dict]]) -> list[str]:
    """One line per file group that cleaning dropped lines from: kept of all, and the drops per reason."""
    return [f"{split}/{name}: kept {r['kept']} of {r['lines']} lines (dropped: "
            f"{', '.join(f'{reason} {n}' for reason, n in r['dropped'].items())})"
            for split, groups in cleaning.items() for name, r in groups.items() if r.get("dropped")]


def _attach_texts(data: PreparedData, corpus: Corpus) -> PreparedData:
    """Keep the raw lines of the reference splits (re-read: the fingerprint says the files are unchanged)."""
    for split in REFERENCE_SPLITS:
        if split not in data.splits:
            continue
        files = {g.name: g for g in corpus.splits.get(split, [])}
        for eg in data.splits[split]:
            raw = read_group(files[eg.name])
            eg.texts = {lang: raw[lang] for lang in eg.ids}
    return data


def _cached(cache_dir: Path, fp: str, given: dict[str, Vocab] | None) -> PreparedData | None:
    """The prepared data in `cache_dir` where its fingerprint is `fp`, else None. A cache that cannot be what
    preparing wrote (a file cut short, overwritten or deleted; it is derived data, so nothing is lost) is logged and
    also None: it is prepared again rather than trained on."""
    try:
        try:
            meta = json.loads((cache_dir / "meta.json").read_text(encoding="utf-8"))
        except ValueError as err:  # JSON or UTF-8
            raise DamagedCache(f"{cache_dir / 'meta.json'} is not readable JSON ({err})") from None
        if not isinstance(meta, dict) or meta.get("fingerprint") != fp or not (cache_dir / "encoded").is_dir():
            return None
        return _load_cache(cache_dir, meta, given)
    except (DamagedCache, FileNotFoundError, ValueError, KeyError, TypeError, RuntimeError) as err:
        # RuntimeError: sentencepiece's on a garbled model; ValueError: JSON, UTF-8 and numpy's
        log.warning("the prepared data in %s is damaged (%s): preparing it again", cache_dir,
                    one_line(err, 200))
        return None


def _load_cache(cache_dir: Path, meta: dict, given: dict[str, Vocab] | None = None) -> PreparedData:
    langs = meta["languages"]
    if given is not None:
        vocabs = given
    elif meta["joint_vocab"]:
        joint = Vocab((cache_dir / "joint.model").read_bytes())
        vocabs = {lang: joint for lang in langs}
    else:
        vocabs = {lang: Vocab((cache_dir / f"{lang}.model").read_bytes()) for lang in langs}
    enc = cache_dir / "encoded"
    splits: dict[str, list[EncodedGroup]] = {}
    for split, names in meta["groups"].items():
        splits[split] = []
        for gi, name in enumerate(names):
            keep_path = enc / f"{split}.{gi}.keep.npy"
            keep = np.load(keep_path) if keep_path.is_file() else None
            ids = {}
            for lang in meta["group_langs"][split][gi]:
                seqs = TokenSequences.load(enc / f"{split}.{gi}.{lang}.ids", enc / f"{split}.{gi}.{lang}.len.npy",
                                           meta["dtypes"][lang])
                ids[lang] = seqs if keep is None else seqs.select(keep)
            splits[split].append(EncodedGroup(name, ids))
    cleaning_path = cache_dir / "cleaning.json"
    cleaning = json.loads(cleaning_path.read_text()) if cleaning_path.is_file() else {}
    return PreparedData(vocabs=vocabs, splits=splits, languages=langs, joint_vocab=meta["joint_vocab"],
                        cleaning=cleaning)


def language_training_text(corpus_path: str | Path, lang: str, pre: PreprocessConfig) -> Iterator[str]:
    """The normalised, non-empty 'train' lines of one language of a corpus, streamed (what its
    vocabulary is learned from when a language is added to a trained model), with the model's
    preprocessing. A language without training text is refused before anything is read further."""
    corpus = load_corpus(corpus_path)
    if lang not in corpus.languages:
        raise LanguageError(f"language '{lang}' is not in corpus {corpus.source} "
                            f"(it has {', '.join(corpus.languages)})")
    lines = _training_lines(corpus, pre, [lang], {lang})
    first = next(lines, None)
    if first is None:
        raise DataError(f"corpus {corpus.source}: no training text for language '{lang}'")
    return chain((first,), lines)


def _direction_rows(group: EncodedGroup, src: str, tgt: str, share: tuple[int, int] | None) -> np.ndarray:
    """Positions of the group's lines that give a (src, tgt) pair: both sides non-empty, in the share."""
    ok = (group.ids[src].lengths > 0) & (group.ids[tgt].lengths > 0)
    if share is not None:
        ok &= np.arange(len(ok)) % share[1] == share[0]
    return np.flatnonzero(ok)


def direction_pairs(data: PreparedData, split: str, src: str, tgt: str, limit: int | None = None,
                    share: tuple[int, int] | None = None) -> tuple[TokenSequences, TokenSequences]:
    """All aligned (src, tgt) id sequences of a direction in a split; empty sides skipped. With
    `share` (index, count), only line j of each group where j % count == index."""
    srcs, tgts = [], []
    for g in data.groups(split):
        if src in g.ids and tgt in g.ids:
            rows = _direction_rows(g, src, tgt, share)
            whole = len(rows) == len(g)  # every line: share the group's arrays (a->b and b->a alike)
            srcs.append(g.ids[src] if whole else g.ids[src].select(rows))
            tgts.append(g.ids[tgt] if whole else g.ids[tgt].select(rows))
    src_seqs, tgt_seqs = TokenSequences.concat(srcs), TokenSequences.concat(tgts)
    if limit is not None:
        src_seqs, tgt_seqs = src_seqs.select(slice(0, limit)), tgt_seqs.select(slice(0, limit))
    return src_seqs, tgt_seqs


def direction_references(data: PreparedData, split: str, src: str, tgt: str,
                         limit: int | None = None) -> list[str] | None:
    """The raw target lines of exactly the pairs `direction_pairs` returns, or None when the
    split keeps no text (not in REFERENCE_SPLITS)."""
    refs: list[str] = []
    for g in data.groups(split):
        if src in g.ids and tgt in g.ids:
            if g.texts is None:
                return None
            refs.extend(g.texts[tgt][i] for i in _direction_rows(g, src, tgt, None))
    return refs[:limit] if limit is not None else refs
