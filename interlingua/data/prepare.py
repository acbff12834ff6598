"""`interlingua prepare`: normalise text, train sentencepiece, cache the encoded corpus.

The cache lives in `<work_dir>/data/` and is keyed by a hash of the corpus files and the
preprocessing settings, so changing either re-prepares instead of reusing stale ids.
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from interlingua.config import ExperimentConfig, PreprocessConfig
from interlingua.data.corpus import Corpus, load_corpus, normalize_line, read_group
from interlingua.data.vocab import Vocab, language_tag
from interlingua.errors import DataError, LanguageError

log = logging.getLogger(__name__)
CACHE_VERSION = 1
REFERENCE_SPLITS = ("val",)
"""Splits whose raw text is kept next to the ids: dev BLEU scores against the corpus's own lines."""


@dataclass
class EncodedGroup:
    """Aligned id sequences of one file group: lang -> list of int32 arrays (may be empty)."""

    name: str
    ids: dict[str, list[np.ndarray]]
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

    def groups(self, split: str) -> list[EncodedGroup]:
        if split not in self.splits:
            raise DataError(f"prepared corpus has no split '{split}' (it has: {', '.join(sorted(self.splits))})")
        return self.splits[split]


def _fingerprint(corpus: Corpus, pre: PreprocessConfig, langs: list[str], given: dict[str, Vocab] | None = None) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(pre.model_dump(mode="json"), sort_keys=True).encode())
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


def tokenize_texts(vocab: Vocab, texts: list[str], max_len: int, what: str) -> list[np.ndarray]:
    """Tokenise, truncating to `max_len` subwords (with a warning) and counting empty lines."""
    ids = vocab.tokenize_batch(texts)
    too_long = sum(len(x) > max_len for x in ids)
    empty = sum(len(x) == 0 for x in ids)
    if too_long:
        log.warning("%s: %d line(s) longer than max_len=%d subwords were truncated", what, too_long, max_len)
    if empty:
        log.warning("%s: %d empty line(s) will be skipped", what, empty)
    return [np.asarray(x[:max_len], dtype=np.int32) for x in ids]


def train_vocabs(corpus: Corpus, texts: dict[str, list[str]], pre: PreprocessConfig, langs: list[str]) -> dict[str, Vocab]:
    if pre.joint_vocab:
        joint = Vocab.train((s for lang in langs for s in texts[lang]), pre.vocab_size,
                            user_symbols=[language_tag(lang) for lang in langs])
        return {lang: joint for lang in langs}
    return {lang: Vocab.train(texts[lang], pre.vocab_size) for lang in tqdm(langs, desc="sentencepiece", unit="lang")}


def prepare(cfg: ExperimentConfig, force: bool = False, vocabs: dict[str, Vocab] | None = None) -> PreparedData:
    """Prepare (or load from cache) the encoded corpus of an experiment. With `vocabs` (a checkpoint's,
    for `train --init`) the corpus is encoded with those instead of newly trained ones."""
    corpus = load_corpus(cfg.corpus)
    pre = cfg.preprocess
    langs = sorted(cfg.directions.languages or corpus.languages)
    unknown = sorted(set(langs) - set(corpus.languages))
    if unknown:
        raise DataError(f"directions.languages: {', '.join(unknown)} not in corpus {corpus.source} (it has {', '.join(corpus.languages)})")
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
        meta = json.loads(meta_path.read_text())
        if meta.get("fingerprint") == fp:
            return _attach_texts(_load_cache(cache_dir, meta, vocabs), corpus)
    cache_dir.mkdir(parents=True, exist_ok=True)

    raw: dict[str, list[tuple[str, dict[str, list[str]]]]] = {}
    for split, groups in corpus.splits.items():
        limit = pre.max_train_sentences if split == "train" else None
        raw[split] = []
        for g in groups:
            if not set(g.files) & set(langs):
                continue
            texts = read_group(g, limit=limit)
            texts = {lang: [normalize_line(s, pre.lowercase, pre.normalize) for s in t]
                     for lang, t in texts.items() if lang in langs}
            raw[split].append((g.name, texts))
    if "train" not in raw:
        raise DataError(f"corpus {corpus.source} has no 'train' split to learn vocabularies from")
    train_text: dict[str, list[str]] = {lang: [] for lang in langs}
    for _, texts in raw["train"]:
        for lang, t in texts.items():
            train_text[lang].extend(t)
    missing = [lang for lang in langs if not any(train_text[lang])]
    if missing:
        raise DataError(f"corpus {corpus.source}: no training text for language(s) {', '.join(missing)}")
    given = vocabs is not None  # a checkpoint's vocabularies: it holds them, nothing to cache
    if vocabs is None:
        vocabs = train_vocabs(corpus, train_text, pre, langs)

    splits: dict[str, list[EncodedGroup]] = {}
    arrays: dict[str, np.ndarray] = {}
    for split, groups in raw.items():
        splits[split] = []
        for gi, (name, texts) in enumerate(groups):
            enc = {lang: tokenize_texts(vocabs[lang], t, pre.max_len, f"{split}/{name}/{lang}") for lang, t in texts.items()}
            splits[split].append(EncodedGroup(name, enc))
            for lang, seqs in enc.items():
                key = f"{split}|{gi}|{lang}"
                arrays[key + "|ids"] = np.concatenate(seqs) if seqs else np.zeros(0, np.int32)
                arrays[key + "|len"] = np.asarray([len(s) for s in seqs], dtype=np.int32)
    np.savez(cache_dir / "encoded.npz", **arrays)
    distinct = {id(v): v for v in vocabs.values()}
    if not given and pre.joint_vocab:
        (cache_dir / "joint.model").write_bytes(next(iter(vocabs.values())).proto)
    elif not given:
        for lang, v in vocabs.items():
            (cache_dir / f"{lang}.model").write_bytes(v.proto)
    meta = {
        "fingerprint": fp, "languages": langs, "joint_vocab": pre.joint_vocab,
        "groups": {s: [g.name for g in gs] for s, gs in splits.items()},
        "group_langs": {s: [sorted(g.ids) for g in gs] for s, gs in splits.items()},
        "vocab_sizes": {lang: len(v) for lang, v in vocabs.items()},
        "n_vocabs": len(distinct),
    }
    meta_path.write_text(json.dumps(meta, indent=1))
    return _attach_texts(PreparedData(vocabs=vocabs, splits=splits, languages=langs, joint_vocab=pre.joint_vocab), corpus)


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


def _load_cache(cache_dir: Path, meta: dict, given: dict[str, Vocab] | None = None) -> PreparedData:
    langs = meta["languages"]
    if given is not None:
        vocabs = given
    elif meta["joint_vocab"]:
        joint = Vocab((cache_dir / "joint.model").read_bytes())
        vocabs = {lang: joint for lang in langs}
    else:
        vocabs = {lang: Vocab((cache_dir / f"{lang}.model").read_bytes()) for lang in langs}
    npz = np.load(cache_dir / "encoded.npz")
    splits: dict[str, list[EncodedGroup]] = {}
    for split, names in meta["groups"].items():
        splits[split] = []
        for gi, name in enumerate(names):
            ids = {}
            for lang in meta["group_langs"][split][gi]:
                key = f"{split}|{gi}|{lang}"
                flat, lens = npz[key + "|ids"], npz[key + "|len"]
                ids[lang] = np.split(flat, np.cumsum(lens)[:-1]) if len(lens) else []
            splits[split].append(EncodedGroup(name, ids))
    return PreparedData(vocabs=vocabs, splits=splits, languages=langs, joint_vocab=meta["joint_vocab"])


def language_training_text(corpus_path: str | Path, lang: str, pre: PreprocessConfig) -> list[str]:
    """The normalised 'train' lines of one language of a corpus (what its vocabulary is learned
    from when a language is added to a trained model), with the model's preprocessing."""
    corpus = load_corpus(corpus_path)
    if lang not in corpus.languages:
        raise LanguageError(f"language '{lang}' is not in corpus {corpus.source} (it has {', '.join(corpus.languages)})")
    lines: list[str] = []
    for g in corpus.splits.get("train", []):
        if lang in g.files:
            lines.extend(normalize_line(s, pre.lowercase, pre.normalize)
                         for s in read_group(g, limit=pre.max_train_sentences)[lang])
    if not any(lines):
        raise DataError(f"corpus {corpus.source}: no training text for language '{lang}'")
    return lines


def direction_pairs(data: PreparedData, split: str, src: str, tgt: str, limit: int | None = None,
                    share: tuple[int, int] | None = None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """All aligned (src, tgt) id sequences of a direction in a split; empty sides skipped. With
    `share` (index, count), only line j of each group where j % count == index."""
    srcs, tgts = [], []
    for g in data.groups(split):
        if src in g.ids and tgt in g.ids:
            for j, (a, b) in enumerate(zip(g.ids[src], g.ids[tgt])):
                if share is not None and j % share[1] != share[0]:
                    continue
                if len(a) and len(b):
                    srcs.append(a)
                    tgts.append(b)
    if limit is not None:
        srcs, tgts = srcs[:limit], tgts[:limit]
    return srcs, tgts


def direction_references(data: PreparedData, split: str, src: str, tgt: str, limit: int | None = None) -> list[str] | None:
    """The raw target lines of exactly the pairs `direction_pairs` returns, or None when the
    split keeps no text (not in REFERENCE_SPLITS)."""
    refs = []
    for g in data.groups(split):
        if src in g.ids and tgt in g.ids:
            if g.texts is None:
                return None
            for a, b, text in zip(g.ids[src], g.ids[tgt], g.texts[tgt]):
                if len(a) and len(b):
                    refs.append(text)
    return refs[:limit] if limit is not None else refs
