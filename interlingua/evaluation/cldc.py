"""`interlingua evaluate cldc`: cross-lingual document classification (paper 003, Sec. 3.2) on
Webis-CLS-10 sentiment.

For each language pair (a, b) and domain, a linear SVM (scikit-learn `LinearSVC`, defaults but
`class_weight="balanced"`, `max_iter=5000`, no scaling) is trained on one language's training
documents and tested on the other language's test documents, both ways, for every document vector
variant (DV / SV x a, b, a:b, a+b; `interlingua.inference.documents`). Two references sit beside
them: translate-test (the test documents translated into the training language by the same model,
then a TF-IDF SVM trained on the training language) and an in-language TF-IDF SVM (trained and
tested in the test language: the bound a cross-lingual method aims at). Accuracy is the paper's
metric; macro-F1 is added. Translations are cached in <out>/translations.
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.metrics import accuracy_score, f1_score
from sklearn.svm import LinearSVC
from tqdm import tqdm

from interlingua.atomic_files import write_text_atomic
from interlingua.data.document_text import read_labelled_documents
from interlingua.data.webis import DOMAINS, DomainData, LabelledDocuments, load_domain
from interlingua.errors import InterlinguaError
from interlingua.evaluation.registry import Report
from interlingua.figures import save_figure
from interlingua.inference.api import Model, load
from interlingua.inference.documents import Unit, embed_documents, translate_documents, variant_names

log = logging.getLogger(__name__)

UNITS: dict[str, Unit] = {"DV": "document", "SV": "sentences"}

PAPER_TABLE2 = {"DV_en": (92.58, 82.53), "DV_de": (92.16, 79.38),
                "DV_en:de": (94.39, 82.70), "DV_en+de": (93.52, 82.25),
                "SV_en": (93.30, 82.55), "SV_de": (91.74, 79.55),
                "SV_en:de": (94.30, 83.18), "SV_en+de": (93.22, 81.37),
                "MT_base": (68.1, 67.4)}
"""Paper 003 Table 2, accuracy (%) en->de and de->en on RCV1/RCV2 topics (4 classes), NTDV models
trained on Europarl: context for our numbers, not a like-for-like target."""


@dataclass
class Score:
    accuracy: float
    macro_f1: float


@dataclass
class CLDCResult:
    model: str
    translator: str
    pairs: list[tuple[str, str]]
    domains: list[str]
    scores: dict[str, dict[str, Score]] = field(default_factory=dict)
    """row (DV_en, ..., translate-test, in-language) -> column ("books en->de") -> score."""
    held_out: bool = False
    documents: dict[str, int] = field(default_factory=dict)
    """train / test documents per language and domain."""
    speed: dict[str, float] = field(default_factory=dict)
    """documents per second: DV / SV vectors (forward passes only) and full translation."""


def linear_svm() -> LinearSVC:
    """The paper's classifier: scikit-learn's linear SVM, defaults but these two settings."""
    return LinearSVC(class_weight="balanced", max_iter=5000)


def svm_score(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray) -> Score:
    pred = linear_svm().fit(x_train, y_train).predict(x_test)
    return Score(100 * accuracy_score(y_test, pred), 100 * f1_score(y_test, pred, average="macro"))


def tfidf_score(train_texts: list[str], y_train: np.ndarray, test_texts: list[str], y_test: np.ndarray) -> Score:
    """TF-IDF (word uni- and bigrams, sublinear tf) + the same SVM."""
    vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2)
    return svm_score(vec.fit_transform(train_texts), y_train, vec.transform(test_texts), y_test)


def _cap(docs: LabelledDocuments, n: int | None, seed: int) -> LabelledDocuments:
    """At most `n` documents, drawn at random (the files are ordered by label)."""
    if n is None or n >= len(docs.texts):
        return docs
    return docs.subset(np.sort(np.random.default_rng(seed).permutation(len(docs.texts))[:n]))


class _Translations:
    """Document translations cached on disk: they cost more than everything else here."""

    def __init__(self, model: Model, folder: Path, key: str):
        self.model, self.folder, self.key = model, folder, key
        self.seconds, self.documents = 0.0, 0

    def get(self, docs: list[str], src: str, tgt: str, name: str) -> list[list[str]]:
        path = self.folder / f"{name}.{src}-{tgt}.json"
        digest = hashlib.sha256("\0".join(docs).encode("utf-8")).hexdigest()
        if path.is_file():
            cached = json.loads(path.read_text(encoding="utf-8"))
            if cached.get("key") == self.key and cached.get("documents") == digest:
                return cached["sentences"]
        start = time.perf_counter()
        out = translate_documents(self.model, docs, src, tgt, progress=True)
        self.seconds += time.perf_counter() - start
        self.documents += len(docs)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps({"key": self.key, "documents": digest, "sentences": out},
                                           ensure_ascii=False))
        return out


class _Scorer:
    """One evaluation's model, translator cache and clocks: document vectors of a set of documents
    (DV and SV, both sides) and the scores of one train-language -> test-language column."""

    def __init__(self, model: Model, translations: _Translations, result: CLDCResult, batch_size: int):
        self.model, self.translations, self.result, self.batch_size = model, translations, result, batch_size
        self.encode_seconds = {name: 0.0 for name in UNITS}
        self.encoded_docs = 0

    def vectors(self, docs: list[str], lang: str, other: str, name: str) -> dict[str, dict[str, np.ndarray]]:
        """unit name (DV / SV) -> variant -> (n, d) vectors of `docs`, written in `lang`."""
        translated = self.translations.get(docs, lang, other, name)
        out = {}
        for unit_name, unit in UNITS.items():
            dv = embed_documents(self.model, docs, lang, unit=unit, other=other, translations=translated,
                                 batch_size=self.batch_size)
            self.encode_seconds[unit_name] += dv.seconds["encode"]
            out[unit_name] = dv.vectors
        self.encoded_docs += len(docs)
        return out

    def score(self, column: str, src: str, tgt: str, train: LabelledDocuments, test: LabelledDocuments,
              train_vectors: dict[str, dict[str, np.ndarray]], test_vectors: dict[str, dict[str, np.ndarray]],
              test_name: str, in_language: LabelledDocuments | None,
              in_language_vectors: dict[str, dict[str, np.ndarray]] | None = None) -> None:
        """Every vector variant trained on `train` (in `src`), tested on `test` (in `tgt`); translate-test;
        the in-language bound where the test language has training documents, with TF-IDF and, given
        `in_language_vectors` (the test language's training documents), with the model's own vectors of
        the test language: what the vectors know of the classes before any language is crossed."""
        scores = self.result.scores
        for unit_name in UNITS:
            for variant in variant_names(src, tgt):
                scores.setdefault(f"{unit_name}_{variant}", {})[column] = svm_score(
                    train_vectors[unit_name][variant], train.labels, test_vectors[unit_name][variant], test.labels)
            if in_language is not None and in_language_vectors is not None:
                scores.setdefault(f"in-language ({unit_name}, own side)", {})[column] = svm_score(
                    in_language_vectors[unit_name][tgt], in_language.labels, test_vectors[unit_name][tgt], test.labels)
        test_in_src = [" ".join(s) for s in self.translations.get(test.texts, tgt, src, test_name)]
        scores.setdefault("translate-test (TF-IDF)", {})[column] = tfidf_score(train.texts, train.labels,
                                                                               test_in_src, test.labels)
        if in_language is not None:
            scores.setdefault("in-language (TF-IDF)", {})[column] = tfidf_score(
                in_language.texts, in_language.labels, test.texts, test.labels)

    def finish(self, out: Path) -> CLDCResult:
        # encoding is timed on both sides (own text + translation): per document, each side counts once
        speed = {f"{u} vectors (docs/s)": 2 * self.encoded_docs / s for u, s in self.encode_seconds.items() if s > 0}
        if self.translations.seconds > 0:
            speed["translation (docs/s)"] = self.translations.documents / self.translations.seconds
        self.result.speed = speed
        write_report(self.result, out)
        return self.result


def _setup(checkpoint: str | Path, translator_path: str | Path | None, languages: set[str], device: str,
           cache_key: str, precision: str = "fp32") -> tuple[Model, _Translations, Path]:
    model = load(checkpoint, device, precision)
    translator_path = Path(translator_path or checkpoint)
    translator = model if translator_path == Path(checkpoint) else load(translator_path, device, precision)
    for lang in sorted(languages):
        model.check_source(lang)
        translator.check_source(lang)
        translator.check_target(lang)
    key = f"{translator_path.resolve()}:{translator_path.stat().st_mtime}:{cache_key}"
    if precision != "fp32":  # other precisions translate differently: their own cache entries
        key += f":{precision}"
    return model, _Translations(translator, translator_path.parent / "eval" / "cldc_translations", key), translator_path


def evaluate_cldc(checkpoint: str | Path, data_root: str | Path, out_dir: str | Path,
                  pairs: list[tuple[str, str]] | None = None, domains: list[str] | None = None,
                  max_documents: int | None = None, batch_size: int = 16, device: str = "auto",
                  seed: int = 0, translator_path: str | Path | None = None, precision: str = "fp32") -> CLDCResult:
    """Every vector variant and both references, for each pair and domain, both ways; writes
    cldc.md/.json/.png.

    `translator_path`: the model that translates (the other-side vectors, translate-test), by default
    the embedding model itself. Paper 003 translates with the plain translation models, not through
    the NTDV layers: give the frozen base model here. Translations are cached beside it
    (<its folder>/eval/cldc_translations), so every model evaluated with one translator shares them."""
    pairs = pairs or [("en", "de"), ("en", "fr")]
    domains = domains or list(DOMAINS)
    model, translations, translator_path = _setup(checkpoint, translator_path, {x for p in pairs for x in p}, device,
                                                  f"{seed}:{max_documents}", precision)
    result = CLDCResult(str(checkpoint), str(translator_path), [(a, b) for a, b in pairs], list(domains))
    scorer = _Scorer(model, translations, result, batch_size)
    steps = [(p, d) for p in pairs for d in domains]
    for (a, b), domain in tqdm(steps, desc="cldc", unit="pair-domain"):
        data: dict[str, DomainData] = {}
        for lang in (a, b):
            d = load_domain(Path(data_root), lang, domain, seed=seed)
            d.train, d.test = _cap(d.train, max_documents, seed), _cap(d.test, max_documents, seed + 1)
            data[lang] = d
            result.held_out |= d.held_out
            result.documents[f"{lang}/{domain}"] = len(d.train.texts) + len(d.test.texts)
        vectors = {(lang, split): scorer.vectors(getattr(data[lang], split).texts, lang, other, f"{domain}.{split}")
                   for lang, other in ((a, b), (b, a)) for split in ("train", "test")}
        for src, tgt in ((a, b), (b, a)):
            scorer.score(f"{domain} {src}->{tgt}", src, tgt, data[src].train, data[tgt].test, vectors[(src, "train")],
                         vectors[(tgt, "test")], f"{domain}.test", data[tgt].train, vectors[(tgt, "train")])
    return scorer.finish(Path(out_dir))


def evaluate_cldc_files(checkpoint: str | Path, train: LabelledDocuments, train_lang: str, test: LabelledDocuments,
                        test_lang: str, out_dir: str | Path, batch_size: int = 16, device: str = "auto",
                        translator_path: str | Path | None = None, name: str = "documents",
                        precision: str = "fp32") -> CLDCResult:
    """Your own documents: an SVM per vector variant trained on `train` (in `train_lang`), tested on
    `test` (in `test_lang`), and translate-test beside it (no in-language bound: the test language
    has no training documents here)."""
    if train_lang == test_lang:
        raise InterlinguaError(f"cross-lingual classification needs two languages (both are '{train_lang}')")
    model, translations, translator_path = _setup(checkpoint, translator_path, {train_lang, test_lang}, device,
                                                  "files", precision)
    result = CLDCResult(str(checkpoint), str(translator_path), [(train_lang, test_lang)], [name])
    result.documents = {f"{train_lang} train": len(train.texts), f"{test_lang} test": len(test.texts)}
    scorer = _Scorer(model, translations, result, batch_size)
    train_vectors = scorer.vectors(train.texts, train_lang, test_lang, f"{name}.train")
    test_vectors = scorer.vectors(test.texts, test_lang, train_lang, f"{name}.test")
    scorer.score(f"{name} {train_lang}->{test_lang}", train_lang, test_lang, train, test, train_vectors, test_vectors,
                 f"{name}.test", None)
    return scorer.finish(Path(out_dir))


def markdown(result: CLDCResult) -> str:
    """One table per pair: rows the vector variants and references, columns domain x direction."""
    lines = [f"# Cross-lingual document classification: {result.model}", "",
             "Accuracy % (macro-F1 %): a linear SVM trained on one language's documents, tested on the other's. "
             f"Translations (the other-side vectors, translate-test) by {result.translator}, "
             "greedy, sentence by sentence."]
    if result.held_out:
        lines.append("The test documents are a held-out half of each train.review (no test.review in the data folder).")
    for a, b in result.pairs:
        cols = [f"{d} {s}->{t}" for d in result.domains for s, t in ((a, b), (b, a))]
        lines += ["", f"## {a}-{b}", "", "| | " + " | ".join(cols) + " | mean |", "|---" * (len(cols) + 2) + "|"]
        for row, by_col in result.scores.items():
            cells = [by_col.get(c) for c in cols]
            if not any(cells) or (row.startswith(("DV_", "SV_")) and not _row_of_pair(row, a, b)):
                continue
            shown = [f"{s.accuracy:.1f} ({s.macro_f1:.1f})" if s else "" for s in cells]
            mean = np.mean([s.accuracy for s in cells if s])
            lines.append(f"| {row} | " + " | ".join(shown) + f" | {mean:.1f} |")
        gaps = _two_language_gaps(result, a, b, cols)
        if gaps:
            lines += ["", "Two-language vectors against one-language ones (paper line 144), mean accuracy over the "
                      "columns: " + "; ".join(gaps)]
    if result.speed:
        lines += ["", "Speed on this machine: " + ", ".join(f"{k} {v:.1f}" for k, v in result.speed.items())]
    lines += ["", "Paper 003 Table 2 for reference (accuracy %, en->de / de->en, RCV1/RCV2 topic classification, "
              "models trained on Europarl: another task and scale): "
              + "; ".join(f"{k} {v[0]:.1f} / {v[1]:.1f}" for k, v in PAPER_TABLE2.items())]
    return "\n".join(lines) + "\n"


def _two_language_gaps(result: CLDCResult, a: str, b: str, cols: list[str]) -> list[str]:
    """Per unit: the mean accuracy of a:b and a+b beside that of the training language's own side
    and of the other side (the one reached by translating)."""
    def mean(row: str) -> float | None:
        vals = [s.accuracy for c, s in result.scores.get(row, {}).items() if c in cols]
        return float(np.mean(vals)) if vals else None

    out = []
    for unit in UNITS:
        x, y = sorted((a, b))
        parts = {"a:b": mean(f"{unit}_{x}:{y}"), "a+b": mean(f"{unit}_{x}+{y}"),
                 "train-language side": _side_mean(result, unit, cols, train_side=True),
                 "test-language side": _side_mean(result, unit, cols, train_side=False)}
        if all(v is not None for v in parts.values()):
            out.append(f"{unit} " + ", ".join(f"{k} {v:.1f}" for k, v in parts.items()))
    return out


def _side_mean(result: CLDCResult, unit: str, cols: list[str], train_side: bool) -> float | None:
    """Mean accuracy of the single-language vectors of the training language (train_side) or of the
    test language, over `cols` ("<domain> <src>-><tgt>")."""
    vals = []
    for col in cols:
        src, tgt = col.split()[-1].split("->")
        score = result.scores.get(f"{unit}_{src if train_side else tgt}", {}).get(col)
        if score is not None:
            vals.append(score.accuracy)
    return float(np.mean(vals)) if vals else None


def _row_of_pair(row: str, a: str, b: str) -> bool:
    return row.split("_", 1)[1] in variant_names(a, b)


def write_report(result: CLDCResult, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    md, js = out / "cldc.md", out / "cldc.json"
    write_text_atomic(md, markdown(result))
    write_text_atomic(js, json.dumps(asdict(result), indent=1))
    return [md, js, plot_accuracy(result, out / "cldc.png")]


def plot_accuracy(result: CLDCResult, out_png: Path) -> Path:
    """Mean accuracy over the domains per row, one bar per direction."""
    import matplotlib.pyplot as plt
    directions = [(s, t) for a, b in result.pairs for s, t in ((a, b), (b, a))]
    rows = list(result.scores)
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(rows) * len(directions) / 2), 4))
    width = 0.8 / len(directions)
    for k, (s, t) in enumerate(directions):
        means = []
        for row in rows:
            vals = [v.accuracy for c, v in result.scores[row].items() if c.endswith(f" {s}->{t}")]
            means.append(float(np.mean(vals)) if vals else np.nan)
        ax.bar(np.arange(len(rows)) + k * width, means, width, label=f"{s}->{t}")
    ax.set_xticks(np.arange(len(rows)) + width * (len(directions) - 1) / 2, rows, rotation=60, ha="right", fontsize=8)
    ax.axhline(50, color="grey", lw=0.8, ls="--")
    ax.set_ylabel("accuracy % (mean over domains)")
    ax.set_title("cross-lingual document classification (Webis-CLS-10)")
    ax.legend(fontsize=8)
    return save_figure(fig, out_png)


def parse_pairs(values: list[str]) -> list[tuple[str, str]]:
    """'en-de' -> ('en', 'de')."""
    pairs = []
    for v in values:
        parts = v.split("-")
        if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
            raise InterlinguaError(f"--pairs takes two different languages joined by '-', e.g. en-de (got {v!r})")
        pairs.append((parts[0], parts[1]))
    return pairs


def report_cldc(model: str, data_root: str, out: str | None, pairs: list[str], domains: list[str] | None,
                translator: str | None, train_docs: str | None, train_labels: str | None, train_lang: str | None,
                test_docs: str | None, test_labels: str | None, test_lang: str | None, max_documents: int | None,
                device: str, precision: str) -> Report:
    """`interlingua evaluate cldc` (`registry.EVALUATIONS`): on Webis-CLS-10 under `data_root` (the folder
    itself or one holding webis_cls10/), or, given --train-docs / --test-docs, on the user's own documents
    and label files; written under `out` (default: <model folder>/eval/cldc)."""
    out_dir = Path(out or Path(model).parent / "eval" / "cldc")
    if train_docs or test_docs:
        given = {"--train-docs": train_docs, "--train-labels": train_labels, "--train-lang": train_lang,
                 "--test-docs": test_docs, "--test-labels": test_labels, "--test-lang": test_lang}
        missing = [k for k, v in given.items() if not v]
        if missing:
            raise InterlinguaError(f"cldc on your own documents needs {', '.join(missing)} as well")
        assert train_docs and train_labels and train_lang and test_docs and test_labels and test_lang  # checked above
        texts, labels, names = read_labelled_documents(Path(train_docs), Path(train_labels))
        test_texts, test_labels_read, _ = read_labelled_documents(Path(test_docs), Path(test_labels), names)
        result = evaluate_cldc_files(model, LabelledDocuments(texts, labels), train_lang,
                                     LabelledDocuments(test_texts, test_labels_read), test_lang, out_dir,
                                     device=device, translator_path=translator, precision=precision)
    else:
        root = Path(data_root)
        root = root / "webis_cls10" if (root / "webis_cls10").is_dir() else root
        result = evaluate_cldc(model, root, out_dir, pairs=parse_pairs(pairs), domains=domains,
                               max_documents=max_documents, device=device, translator_path=translator,
                               precision=precision)
    files = [out_dir / "cldc.md", out_dir / "cldc.json", out_dir / "cldc.png"]  # as `write_report` writes them
    return Report(markdown(result), asdict(result), files, result=result)
