"""Readers for the evaluation data under a data root (SentEval transfer sets, XNLI, Multi30k).

Layout expected under `data_root` (what `interlingua data NAME` writes there by default):
`senteval_downstream/` (SentEval's downstream folder), `xnli/dev-<lang>.tsv`,
`multi30k/<split>.<lang>.gz`. Every reader returns plain lists and raises
`MissingDataError` naming the absent file, so a suite can skip that set with a note.
"""
from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path
from typing import overload

import numpy as np

from interlingua.errors import DataError

SENTEVAL_DIR = "senteval_downstream"
CLASSIFICATION_TASKS = ("MR", "CR", "SUBJ", "MPQA", "TREC", "SST2")
STS_YEARS = ("STS12", "STS13", "STS14", "STS15", "STS16")
# SentEval's subsets per year; STS13 'SMT' was never redistributed (SentEval skips it too).
STS_SUBSETS = {
    "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "STS13": ("FNWN", "headlines", "OnWN"),
    "STS14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "STS16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}
NLI_LABELS = ("contradiction", "neutral", "entailment")
XNLI_LANGS = ("en", "de", "fr", "es")
MULTI30K_LANGS = ("en", "de", "fr", "cs")


class MissingDataError(DataError):
    """An evaluation data file is absent; suites skip the set and say which file."""


@dataclass
class Labelled:
    """Texts with one label each (class name or score)."""

    texts: list[str]
    labels: list


@dataclass
class ClassificationTask:
    """A SentEval classification set. `protocol`: 'cv' (no split: 10-fold CV),
    'train_test' (C tuned by k-fold on train), or 'train_dev_test' (C tuned on dev)."""

    name: str
    protocol: str
    train: Labelled
    dev: Labelled | None = None
    test: Labelled | None = None
    note: str = ""


@dataclass
class Pairs:
    """Sentence pairs with a gold value per pair (a similarity score or an NLI label)."""

    a: list[str]
    b: list[str]
    gold: list

    def __len__(self) -> int:
        return len(self.gold)


def _need(path: Path) -> Path:
    if not path.is_file():
        raise MissingDataError(f"missing evaluation file {path}")
    return path


def _read_lines(path: Path, encoding: str = "utf-8") -> list[str]:
    _need(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding=encoding, newline=None) as f:
        return f.read().splitlines()


@overload
def subsample(items: Labelled, limit: int | None, seed: int) -> Labelled: ...
@overload
def subsample(items: Pairs, limit: int | None, seed: int) -> Pairs: ...
def subsample(items: Labelled | Pairs, limit: int | None, seed: int) -> Labelled | Pairs:
    """A seeded random subset of at most `limit` items, order kept (None: all)."""
    n = len(items.labels) if isinstance(items, Labelled) else len(items)
    if limit is None or n <= limit:
        return items
    keep = np.sort(np.random.default_rng(seed).choice(n, size=limit, replace=False))
    if isinstance(items, Labelled):
        return Labelled([items.texts[i] for i in keep], [items.labels[i] for i in keep])
    return Pairs([items.a[i] for i in keep], [items.b[i] for i in keep], [items.gold[i] for i in keep])


def _two_file_set(folder: Path, pos: str, neg: str) -> Labelled:
    texts, labels = [], []
    for fname, label in ((pos, 1), (neg, 0)):
        lines = [ln.strip() for ln in _read_lines(folder / fname)]
        lines = [ln for ln in lines if ln]
        texts += lines
        labels += [label] * len(lines)
    return Labelled(texts, labels)


def load_classification(data_root: Path, name: str, *, sst_train_limit: int | None = None,
                        seed: int = 0) -> ClassificationTask:
    """One SentEval classification set by name (MR, CR, SUBJ, MPQA, TREC, SST2).

    SST2's train file has 67k phrase-level lines; `sst_train_limit` keeps a seeded subset
    so a full run stays inside its time budget (the note says so)."""
    root = Path(data_root) / SENTEVAL_DIR
    if name == "MR":
        return ClassificationTask(name, "cv", _two_file_set(root / "MR", "rt-polarity.pos", "rt-polarity.neg"))
    if name == "CR":
        return ClassificationTask(name, "cv", _two_file_set(root / "CR", "custrev.pos", "custrev.neg"))
    if name == "SUBJ":
        return ClassificationTask(name, "cv", _two_file_set(root / "SUBJ", "subj.subjective", "subj.objective"))
    if name == "MPQA":
        return ClassificationTask(name, "cv", _two_file_set(root / "MPQA", "mpqa.pos", "mpqa.neg"))
    if name == "TREC":
        def trec(fname: str) -> Labelled:
            # SentEval reads TREC as latin-1 (the train file is not valid UTF-8); label = coarse class
            texts, labels = [], []
            for line in _read_lines(root / "TREC" / fname, encoding="latin-1"):
                if line.strip():
                    tag, _, question = line.strip().partition(" ")
                    texts.append(question)
                    labels.append(tag.split(":")[0])
            return Labelled(texts, labels)
        return ClassificationTask(name, "train_test", trec("train_5500.label"), test=trec("TREC_10.label"))
    if name == "SST2":
        def sst(fname: str) -> Labelled:
            texts, labels = [], []
            for line in _read_lines(root / "SST" / "binary" / fname):
                if line.strip():
                    text, _, label = line.rpartition("\t")
                    texts.append(text.strip())
                    labels.append(int(label))
            return Labelled(texts, labels)
        train = sst("sentiment-train.gz")
        note = ""
        if sst_train_limit is not None and len(train.labels) > sst_train_limit:
            note = (f"SST2 train: seeded random {sst_train_limit:,} of the {len(train.labels):,} "
                    f"phrase-level training lines (time budget); dev and test complete")
            train = subsample(train, sst_train_limit, seed)
        return ClassificationTask(name, "train_dev_test", train, dev=sst("sentiment-dev"), test=sst("sentiment-test"),
                                  note=note)
    raise DataError(f"unknown classification task '{name}' (known: {', '.join(CLASSIFICATION_TASKS)})")


def load_sts(data_root: Path, year: str) -> dict[str, Pairs]:
    """STS12-16 test sets of one year: subset -> pairs with gold 0-5; unscored pairs dropped."""
    if year not in STS_SUBSETS:
        raise DataError(f"unknown STS year '{year}' (known: {', '.join(STS_YEARS)})")
    folder = Path(data_root) / SENTEVAL_DIR / "STS" / f"{year}-en-test"
    out = {}
    for subset in STS_SUBSETS[year]:
        inputs = _read_lines(folder / f"STS.input.{subset}.txt")
        gold = _read_lines(folder / f"STS.gs.{subset}.txt")
        if len(inputs) != len(gold):
            raise DataError(f"{folder / f'STS.input.{subset}.txt'} has {len(inputs)} lines "
                            f"but its gold file has {len(gold)}")
        a, b, g = [], [], []
        for line, score in zip(inputs, gold):
            if score.strip():
                s1, s2 = line.split("\t")[:2]
                a.append(s1)
                b.append(s2)
                g.append(float(score))
        out[subset] = Pairs(a, b, g)
    return out


def load_stsb(data_root: Path) -> dict[str, Pairs]:
    """STS Benchmark (SentEval's tokenised copy): train/dev/test pairs with gold 0-5."""
    folder = Path(data_root) / SENTEVAL_DIR / "STSBenchmark"
    out = {}
    for split in ("train", "dev", "test"):
        a, b, g = [], [], []
        for line in _read_lines(folder / f"sts-{split}.csv"):
            cols = line.split("\t")
            if len(cols) >= 7:
                g.append(float(cols[4]))
                a.append(cols[5])
                b.append(cols[6])
        out[split] = Pairs(a, b, g)
    return out


def load_sick(data_root: Path, target: str) -> dict[str, Pairs]:
    """SICK train/dev(trial)/test; `target` 'relatedness' (1-5 score) or 'entailment' (label)."""
    if target not in ("relatedness", "entailment"):
        raise DataError(f"SICK target must be 'relatedness' or 'entailment', not '{target}'")
    folder = Path(data_root) / SENTEVAL_DIR / "SICK"
    files = {"train": "SICK_train.txt", "dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}
    out = {}
    for split, fname in files.items():
        a, b, g = [], [], []
        for line in _read_lines(folder / fname)[1:]:
            cols = line.split("\t")
            if len(cols) >= 5:
                a.append(cols[1])
                b.append(cols[2])
                g.append(float(cols[3]) if target == "relatedness" else cols[4].strip().lower())
        out[split] = Pairs(a, b, g)
    return out


def load_xnli(data_root: Path, lang: str) -> Pairs:
    """XNLI dev set of one language (premise, hypothesis, label); lines are parallel across languages."""
    path = Path(data_root) / "xnli" / f"dev-{lang}.tsv"
    a, b, g = [], [], []
    for line in _read_lines(path):
        cols = line.split("\t")
        if len(cols) >= 3:
            if cols[2] not in NLI_LABELS:
                raise DataError(f"{path}: unknown label '{cols[2]}' (expected one of {NLI_LABELS})")
            a.append(cols[0])
            b.append(cols[1])
            g.append(cols[2])
    return Pairs(a, b, g)


def load_multi30k(data_root: Path, split: str, lang: str) -> list[str]:
    """One side of Multi30k (`<split>.<lang>.gz`), one caption per line."""
    return _read_lines(Path(data_root) / "multi30k" / f"{split}.{lang}.gz")
