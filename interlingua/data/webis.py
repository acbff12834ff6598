"""Webis-CLS-10 (Prettenhofer & Stein 2010): Amazon reviews in en/de/fr for the domains books, dvd
and music, labelled positive (rating > 3) or negative (rating < 3).

Layout read: `<root>/<lang>/<domain>/{train,test,unlabeled}.review[.gz]`, the release's XML files
(`cls-acl10-unprocessed`). A document is the review's summary and text joined by a space. Where
`test.review` is missing (a copy with the training part only), a seeded, label-stratified part of
`train.review` is held out as the test split, and the split says so (`held_out`).
"""
from __future__ import annotations

import gzip
import hashlib
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from interlingua.data.document_text import split_sentences
from interlingua.data.download import install_files
from interlingua.errors import DataError

LANGUAGES = ("en", "de", "fr")
DOMAINS = ("books", "dvd", "music")
LABELS = ("negative", "positive")

WEBIS_URL = ("https://raw.githubusercontent.com/lijuntaopku/UFD/1d5f78c1a5c579910e6dff0ca2144d2e46492abb/"
             "data/{lang}/{domain}/{part}.review")
"""A public copy of the release's files at a pinned commit (the Webis group's own archive is on
Zenodo, record 3251672)."""
WEBIS_TRAIN_SHA256 = {
    "de/books": "3b0cca49e79aad2278d575841c5b4a4e7a9669e62b3f5ec623fdb45b33c615b7",
    "de/dvd": "9ad998bdba96476fcf9b0650d3ebb8ef4cb3e7c6ada03d834e057c89f7c0ca54",
    "de/music": "4e2a1e9cbad1af142576e39f3bc3b50aa2917f14e503ad517f4d9149b4a13be0",
    "en/books": "3f481f3e11fdfc6a14c9da1cc712fef7f71a32d0ff19e92230de5e0e188e9db2",
    "en/dvd": "9de7202b94ff38eefb655dc815a6c178b0fb1c9592ea85a98eef48ee0be83ff8",
    "en/music": "089ed551fcdf64f3beddc58204547b3fc3450ab1a3381c0dbd082600e3616166",
    "fr/books": "fb11d1a20d436ecfe34e19e7fcf3a81473909da593b967bf9f78f22b89256b99",
    "fr/dvd": "150487ab1ea7201c6a1a603cb6991f3297d79e4650502e4fbcb0337ed91d5bde",
    "fr/music": "66961e978b96ba7837cc6ced5f1db200009ad095ff7b55757482a7ceeb73da77",
}
"""SHA-256 of each train.review (the XML as released, uncompressed)."""
WEBIS_TEST_SHA256 = {
    "de/books": "e49eeecddea70abbc43bd79e29c7ba527a77a57f4282e0e9293349c3265241aa",
    "de/dvd": "64c204920fa0b7ca08b595465d62953bbf386d4f40f1e2c8061c1b3ee098366a",
    "de/music": "960d86d54345acbde7c1fe998fba7aca52150965b7dee1836ac2baa48b43a2bc",
    "en/books": "e3963bd5b91a5a8c1ad4bcdca37a4273db9868bce08eb5a91316e60688be381d",
    "en/dvd": "d4dd56218a3385c71be19c31e1ea376d5280733bee9fac9620094a5c93ce7f9a",
    "en/music": "1dfa555fd6d1a03565e921fa14057a148872965ed581c027f05a0da994a7445d",
    "fr/books": "70c42f8e351fd18311be71f28f3f51022ffa6c7b98ff4c3cf68c0839e916a31c",
    "fr/dvd": "b1d007d197489026a5d2cfe3c62d207c2d6b7e0349335d38903673ac05d4b045",
    "fr/music": "8ddcf008c838d81dee5fd57599ceb50de61682b10d38ad98d8337ea35cec7bd8",
}
"""SHA-256 of each official test.review (2,000 reviews per language and domain, as released)."""


@dataclass
class LabelledDocuments:
    texts: list[str]
    labels: np.ndarray
    """(n,) int: 1 positive, 0 negative."""

    def __post_init__(self) -> None:
        if len(self.texts) != len(self.labels):
            raise DataError(f"{len(self.texts)} documents but {len(self.labels)} labels")

    def subset(self, index: np.ndarray) -> LabelledDocuments:
        return LabelledDocuments([self.texts[i] for i in index], self.labels[index])


@dataclass
class DomainData:
    lang: str
    domain: str
    train: LabelledDocuments
    test: LabelledDocuments
    held_out: bool
    """True where `test` was held out of train.review (no test.review in the folder)."""


def _review_file(folder: Path, part: str) -> Path | None:
    for name in (f"{part}.review", f"{part}.review.gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def _review_items(path: Path) -> list[ET.Element]:
    """The <item> elements of one .review(.gz) file; unreadable or non-XML files are a DataError."""
    try:
        raw = gzip.open(path, "rb").read() if path.suffix == ".gz" else path.read_bytes()
        return list(ET.fromstring(raw).iter("item"))
    except (OSError, EOFError) as err:
        raise DataError(f"cannot read {path}: {err}") from None
    except ET.ParseError as err:
        raise DataError(f"{path} is not a Webis-CLS-10 review file (XML): {err}") from None


def _review_text(item: ET.Element) -> str:
    """A review as one document: its summary and text joined by a space."""
    summary, text = (item.findtext("summary") or "").strip(), (item.findtext("text") or "").strip()
    return f"{summary} {text}".strip()


def read_reviews(path: Path) -> LabelledDocuments:
    """The labelled reviews of one .review(.gz) file, in file order."""
    texts, labels = [], []
    for n, item in enumerate(_review_items(path), start=1):
        rating_text = (item.findtext("rating") or "").strip()
        try:
            rating = float(rating_text)
        except ValueError:
            raise DataError(f"{path}: review {n} has no numeric <rating> ({rating_text!r})") from None
        if rating == 3:
            raise DataError(f"{path}: review {n} is rated 3, neither positive nor negative")
        texts.append(_review_text(item))
        labels.append(int(rating > 3))
    if not texts:
        raise DataError(f"{path} holds no <item> reviews")
    return LabelledDocuments(texts, np.asarray(labels, dtype=np.int64))


def held_out_split(docs: LabelledDocuments, test_share: float,
                   seed: int) -> tuple[LabelledDocuments, LabelledDocuments]:
    """(train, test): `test_share` of each label's documents, drawn with `seed`, become the test part."""
    rng = np.random.default_rng(seed)
    test_idx: list[int] = []
    for label in np.unique(docs.labels):
        members = np.flatnonzero(docs.labels == label)
        test_idx.extend(rng.permutation(members)[: round(len(members) * test_share)])
    test = np.sort(np.asarray(test_idx, dtype=np.int64))
    train = np.setdiff1d(np.arange(len(docs.texts)), test)
    return docs.subset(train), docs.subset(test)


def training_reviews(root: Path, lang: str, domain: str) -> LabelledDocuments | None:
    """Every review of one language and domain's train.review(.gz), in file order (nothing held out),
    or None where the folder has none. The one reader of the training part, for classification and
    for the probing sets' English text alike."""
    path = _review_file(Path(root) / lang / domain, "train")
    return None if path is None else read_reviews(path)


def load_domain(root: Path, lang: str, domain: str, test_share: float = 0.5, seed: int = 0) -> DomainData:
    """One language and domain: the release's train/test split, or train.review split in two."""
    folder = Path(root) / lang / domain
    train = training_reviews(root, lang, domain)
    if train is None:
        raise DataError(f"no Webis-CLS-10 training reviews for {lang}/{domain}: {folder}/train.review[.gz] is missing")
    test_file = _review_file(folder, "test")
    if test_file is not None:
        return DomainData(lang, domain, train, read_reviews(test_file), held_out=False)
    train, test = held_out_split(train, test_share, seed)
    return DomainData(lang, domain, train, test, held_out=True)


def unlabeled_reviews(root: Path, lang: str, domain: str) -> list[str] | None:
    """The domain's unlabelled reviews (summary + text), or None where the folder has none."""
    path = _review_file(Path(root) / lang / domain, "unlabeled")
    if path is None:
        return None
    return [_review_text(item) for item in _review_items(path)]


def review_sentences(root: Path, lang: str, seed: int = 0) -> list[str]:
    """Monolingual review text of one language, split into sentences: the documents of every domain's
    training split (never its test part; with a held-out split, the same half `load_domain` keeps for
    training with `seed`) and its unlabelled reviews where the folder has them. Labels are not used."""
    docs: list[str] = []
    for domain in DOMAINS:
        docs.extend(load_domain(root, lang, domain, seed=seed).train.texts)
        docs.extend(unlabeled_reviews(root, lang, domain) or [])
    return [s for d in docs for s in split_sentences(d, lang)]


def _content_sha256(path: Path) -> str:
    """SHA-256 of a stored (gzipped) review file's content: the release's bytes, whatever the gzip."""
    try:
        return hashlib.sha256(gzip.decompress(path.read_bytes())).hexdigest()
    except (OSError, EOFError):
        return "unreadable"


def webis_files(with_test: bool = True) -> dict[str, str]:
    """{stored name: SHA-256 of its content}: the training parts, and the official test parts."""
    parts = [("train", WEBIS_TRAIN_SHA256)] + ([("test", WEBIS_TEST_SHA256)] if with_test else [])
    return {f"{key}/{part}.review.gz": digest for part, table in parts for key, digest in table.items()}


def get_webis_cls10(dest: str | Path, source_dir: str | Path | None = None) -> tuple[Path, bool]:
    """Put `<lang>/<domain>/{train,test}.review.gz` into `dest`, downloaded (or copied from
    `source_dir`, the same layout) and checked against their SHA-256; returns (dest, whether the
    official test parts are there). A local copy may lack the test parts: then only its training
    parts are installed, and `load_domain` holds out half of each train.review as the test split."""
    with_test = source_dir is None or all((Path(source_dir) / name).is_file()
                                          for name in webis_files() if "/test." in name)

    def url_for(name: str) -> str:
        lang, domain, file = name.split("/")
        return WEBIS_URL.format(lang=lang, domain=domain, part=file.split(".")[0])

    files = webis_files(with_test)
    for part in ("train", "test"):  # the training parts first: they are what a held-out split needs
        install_files(Path(dest), {k: v for k, v in files.items() if f"/{part}." in k}, url_for=url_for,
                      source_dir=source_dir, desc=f"webis-cls10 {part}", digest=_content_sha256,
                      convert=lambda _name, raw: gzip.compress(raw, mtime=0))
    return Path(dest), with_test
