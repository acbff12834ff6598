"""Document vectors (DV / SV, both language sides), Webis-CLS-10 reading and `evaluate cldc`."""
from __future__ import annotations

import json
import logging
import random
from pathlib import Path
from xml.sax.saxutils import escape

import numpy as np
import pytest

from interlingua import load
from interlingua.cli import main
from interlingua.data.document_text import SENTENCE_TOKENS, split_sentences, tokenize_documents
from interlingua.data.webis import held_out_split, load_domain, read_reviews
from interlingua.errors import DataError, InterlinguaError
from interlingua.evaluation.cldc import parse_pairs
from interlingua.inference.documents import embed_documents, variant_names

DOCS_EN = ["A dog runs on the grass. Two men talk in the street!", "", "A woman is cooking."]


def test_sentences_are_split_by_language_rules():
    assert split_sentences("Das ist gut. Z.B. der 3. Teil ist schlecht! Also", "de") == \
        ["Das ist gut.", "Z.B. der 3. Teil ist schlecht!", "Also"]
    assert split_sentences("   ", "en") == []
    assert split_sentences("One. Two.", "xx") == ["One.", "Two."]  # no rules for 'xx': English ones


def test_long_and_empty_documents_are_named(trained_model, caplog):
    vocab = load(trained_model, device="cpu").vocabs["en"]
    from interlingua.config import PreprocessConfig
    with caplog.at_level(logging.WARNING):
        seqs = tokenize_documents(["a dog " * 50, "", "a cat"], vocab, PreprocessConfig(), max_tokens=10)
    assert [len(s) for s in seqs][:2] == [10, 0]
    assert "document 0 longer than 10 subwords" in caplog.text and "document 1 empty" in caplog.text


def test_dv_sv_and_both_sides(trained_model, caplog):
    model = load(trained_model, device="cpu")
    with caplog.at_level(logging.WARNING):
        dv = embed_documents(model, DOCS_EN, "en", unit="document", other="de")
    assert "document 1 empty" in caplog.text
    assert list(dv.vectors) == variant_names("en", "de") == ["de", "en", "de:en", "de+en"]
    d = model.dim
    assert dv.vectors["en"].shape == (3, d) and dv.vectors["de:en"].shape == (3, 2 * d)
    assert np.allclose(dv.vectors["de:en"], np.concatenate([dv.vectors["de"], dv.vectors["en"]], 1))
    assert np.allclose(dv.vectors["de+en"], dv.vectors["de"] + dv.vectors["en"])
    assert not dv.vectors["en"][1].any() and dv.vectors["en"][0].any()
    assert len(dv.translations[0]) == 2 and dv.translations[1] == []
    assert dv.seconds["translate"] > 0 and dv.seconds["encode"] > 0
    # SV: the mean of the document's sentence vectors
    sv = embed_documents(model, DOCS_EN, "en", unit="sentences")
    sentences = split_sentences(DOCS_EN[0], "en")
    ids = tokenize_documents(sentences, model.vocabs["en"], model.preprocess, SENTENCE_TOKENS)
    assert np.allclose(sv.vectors["en"][0], model.encode_ids(ids, "en").mean(0), atol=1e-5)
    assert not sv.vectors["en"][1].any()
    # given translations are used as they are (no second translation)
    again = embed_documents(model, DOCS_EN, "en", unit="document", other="de", translations=dv.translations)
    assert "translate" not in again.seconds and np.allclose(again.vectors["de"], dv.vectors["de"], atol=1e-5)
    with pytest.raises(InterlinguaError, match="2 translations for 3 documents"):
        embed_documents(model, DOCS_EN, "en", other="de", translations=dv.translations[:2])
    with pytest.raises(InterlinguaError, match="another language"):
        embed_documents(model, DOCS_EN, "en", other="en")


def test_embed_documents_cli(trained_model, tmp_path, capsys):
    docs = tmp_path / "docs.en"
    docs.write_text("\n".join(DOCS_EN) + "\n", encoding="utf-8")
    out = tmp_path / "vectors.npz"
    assert main(["embed", "--model", str(trained_model), "--lang", "en", "--documents", "--unit", "sentences",
                 "--other", "de", "-i", str(docs), "-o", str(out), "--device", "cpu"]) == 0
    with np.load(out) as arrays:
        assert sorted(arrays.files) == ["de", "de+en", "de:en", "en"] and arrays["en"].shape[0] == 3
    one = tmp_path / "one.npy"
    assert main(["embed", "--model", str(trained_model), "--lang", "en", "--documents", "-i", str(docs),
                 "-o", str(one)]) == 0
    assert np.load(one).shape[0] == 3
    assert main(["embed", "--model", str(trained_model), "--lang", "en", "--documents", "--other", "de",
                 "-i", str(docs)]) == 2
    assert "-o" in capsys.readouterr().err
    assert main(["embed", "--model", str(trained_model), "--lang", "xx", "--documents", "-i", str(docs),
                 "-o", str(one)]) == 2
    assert "no encoder for 'xx'" in capsys.readouterr().err


# -- Webis-CLS-10 -----------------------------------------------------------------------------------
WORDS = {"en": (["good", "great", "nice"], ["bad", "awful", "poor"], "a dog runs on the grass"),
         "de": (["gut", "toll", "schön"], ["schlecht", "furchtbar", "mies"], "ein hund läuft auf dem gras")}


def write_reviews(path: Path, lang: str, n: int, seed: int, rating3: bool = False) -> None:
    rng = random.Random(seed)
    items = []
    for i in range(n):
        positive = i % 2 == 0
        word = rng.choice(WORDS[lang][0 if positive else 1])
        text = f"{WORDS[lang][2]} & it is {word}. {word} {word}!"
        rating = "3.0" if rating3 and i == 1 else ("5.0" if positive else "1.0")
        items.append(f"<item>\n\t<summary>{escape(word)}\n</summary>\n\t<rating>{rating}</rating>\n"
                     f"\t<text>{escape(text)}\n</text>\n\t<category>music</category>\n\t</item>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('<?xml version="1.0" encoding="utf-8"?>\n<items>' + "\n".join(items) + "</items>\n",
                    encoding="utf-8")


@pytest.fixture
def webis(tmp_path) -> Path:
    root = tmp_path / "webis"
    for k, lang in enumerate(("en", "de")):
        write_reviews(root / lang / "music" / "train.review", lang, 40, k)
    return root


def test_reviews_labels_and_held_out_split(webis, tmp_path):
    docs = read_reviews(webis / "en" / "music" / "train.review")
    assert len(docs.texts) == 40 and docs.labels.tolist()[:2] == [1, 0]
    assert docs.texts[0].startswith(docs.texts[0].split()[0] + " a dog runs") and "&" in docs.texts[0]
    train, test = held_out_split(docs, 0.5, seed=0)
    assert len(train.texts) == len(test.texts) == 20 and test.labels.sum() == 10
    assert not set(train.texts) & set(test.texts) or len(set(docs.texts)) < 40
    domain = load_domain(webis, "en", "music")
    assert domain.held_out and len(domain.test.texts) == 20
    write_reviews(webis / "en" / "music" / "test.review", "en", 10, 9)
    official = load_domain(webis, "en", "music")
    assert not official.held_out and len(official.train.texts) == 40 and len(official.test.texts) == 10
    bad = tmp_path / "bad.review"
    write_reviews(bad, "en", 4, 0, rating3=True)
    with pytest.raises(DataError, match="review 2 is rated 3"):
        read_reviews(bad)
    bad.write_text("<items><item>", encoding="utf-8")
    with pytest.raises(DataError, match="not a Webis-CLS-10 review file"):
        read_reviews(bad)
    with pytest.raises(DataError, match="de/books"):
        load_domain(webis, "de", "books")


def test_pairs_are_parsed():
    assert parse_pairs(["en-de", "fr-en"]) == [("en", "de"), ("fr", "en")]
    for bad in ("en", "en-en", "en-de-fr", "-de"):
        with pytest.raises(InterlinguaError, match="--pairs"):
            parse_pairs([bad])


def test_evaluate_cldc_cli(trained_model, webis, tmp_path, capsys):
    out = tmp_path / "cldc"
    args = ["evaluate", "cldc", "--model", str(trained_model), "--data-root", str(webis), "--pairs", "en-de",
            "--domains", "music", "--max-documents", "12", "--out", str(out), "--threads", "1", "--device", "cpu"]
    assert main(args) == 0
    report = capsys.readouterr().out
    for row in ("DV_de:en", "SV_en", "translate-test (TF-IDF)", "in-language (TF-IDF)", "in-language (DV, own side)",
                "in-language (SV, own side)", "music en->de", "music de->en"):
        assert row in report
    result = json.loads((out / "cldc.json").read_text())
    assert result["held_out"] and (out / "cldc.png").is_file()
    scores = result["scores"]["SV_de+en"]["music en->de"]
    assert 0 <= scores["accuracy"] <= 100 and 0 <= scores["macro_f1"] <= 100
    assert "translation (docs/s)" in result["speed"]
    cache = sorted((Path(trained_model).parent / "eval" / "cldc_translations").glob("music.*.json"))
    assert len(cache) == 4  # train and test, each language into the other
    stamps = [p.stat().st_mtime_ns for p in cache]
    assert main(args) == 0  # the second run reuses every translation
    assert [p.stat().st_mtime_ns for p in cache] == stamps
    assert "translation (docs/s)" not in json.loads((out / "cldc.json").read_text())["speed"]
    assert main([*args[:6], "--pairs", "en-xx", *args[8:]]) == 2
    assert "'xx'" in capsys.readouterr().err


def test_cldc_on_your_own_files(trained_model, tmp_path, capsys):
    rng = random.Random(1)
    files = {}
    for part, lang in (("train", "en"), ("test", "de")):
        good, bad, base = WORDS[lang]
        labels = [rng.choice(["pos", "neg"]) for _ in range(16)]
        docs = [f"{base}. {rng.choice(good if y == 'pos' else bad)}!" for y in labels]
        files[part] = (tmp_path / f"{part}.txt", tmp_path / f"{part}.labels")
        files[part][0].write_text("\n".join(docs) + "\n", encoding="utf-8")
        files[part][1].write_text("\n".join(labels) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    args = ["evaluate", "cldc", "--model", str(trained_model), "--train-docs", str(files["train"][0]),
            "--train-labels", str(files["train"][1]), "--train-lang", "en", "--test-docs", str(files["test"][0]),
            "--test-labels", str(files["test"][1]), "--test-lang", "de", "--out", str(out), "--device", "cpu"]
    assert main(args) == 0
    report = capsys.readouterr().out
    assert "documents en->de" in report and "translate-test (TF-IDF)" in report and "in-language (TF-IDF)" not in report
    files["test"][1].write_text("pos\nneg\n", encoding="utf-8")  # 2 labels for 16 documents
    assert main(args) == 2
    assert "16 documents but" in capsys.readouterr().err
    files["test"][1].write_text("\n".join(["pos"] * 15 + ["maybe"]) + "\n", encoding="utf-8")
    assert main(args) == 2
    assert "line 16: label 'maybe'" in capsys.readouterr().err
    assert main(args[:2] + ["--model", str(trained_model), "--train-docs", str(files["train"][0])]) == 2
    assert "--train-labels" in capsys.readouterr().err


def test_webis_copy_is_checked(tmp_path, capsys):
    from conftest import SHARED_DATA, missing
    source = SHARED_DATA / "webis_cls10"
    if not (source / "en" / "books" / "train.review.gz").is_file():
        missing("../shared/data/webis_cls10 is not available")
    dest = tmp_path / "webis"
    assert main(["data", "webis-cls10", "--dest", str(dest), "--from", str(source)]) == 0
    assert len(list(dest.glob("*/*/train.review.gz"))) == 9
    assert len(load_domain(dest, "fr", "dvd").train.texts) == 1000
    broken = tmp_path / "broken"
    for f in source.glob("*/*/train.review.gz"):
        (broken / f.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
        (broken / f.relative_to(source)).write_bytes(f.read_bytes())
    (broken / "de" / "music" / "train.review.gz").write_bytes(b"not a review file")
    assert main(["data", "webis-cls10", "--dest", str(tmp_path / "again"), "--from", str(broken)]) == 2
    assert "checksum mismatch for de/music/train.review.gz" in capsys.readouterr().err


def test_two_language_gap_line():
    from interlingua.evaluation.cldc import CLDCResult, Score, markdown
    result = CLDCResult("m", "m", [("en", "de")], ["music"])
    cols = ["music en->de", "music de->en"]
    values = {"de": (60, 70), "en": (80, 50), "de:en": (75, 75), "de+en": (65, 65)}
    for unit in ("DV", "SV"):
        for variant, (x, y) in values.items():
            result.scores[f"{unit}_{variant}"] = {cols[0]: Score(x, x), cols[1]: Score(y, y)}
    text = markdown(result)
    # training-language side: en for en->de (80), de for de->en (70); test-language side: de (60), en (50)
    assert "DV a:b 75.0, a+b 65.0, train-language side 75.0, test-language side 55.0" in text


def test_webis_download_fetches_the_official_test_parts(tmp_path, monkeypatch, capsys):
    """Without --from, train and test parts come from the pinned public copy; a test part whose
    content does not match its checksum is named and removed, nothing half-written stays."""
    import gzip

    from conftest import SHARED_DATA, missing

    from interlingua.data import download
    source = SHARED_DATA / "webis_cls10"
    if not (source / "en" / "books" / "train.review.gz").is_file():
        missing("../shared/data/webis_cls10 is not available")
    asked = []

    def fake_fetch(url, dest, **_):
        asked.append(url)
        lang, domain, part = url.split("/")[-3:]
        if part == "train.review":
            dest.write_bytes(gzip.decompress((source / lang / domain / "train.review.gz").read_bytes()))
        else:
            dest.write_bytes(b"<reviews>not the release</reviews>")

    monkeypatch.setattr(download, "fetch", fake_fetch)
    dest = tmp_path / "webis"
    assert main(["data", "webis-cls10", "--dest", str(dest)]) == 2
    assert "checksum mismatch for de/books/test.review.gz" in capsys.readouterr().err
    assert not (dest / "de" / "books" / "test.review.gz").exists()
    assert len(list(dest.glob("*/*/train.review.gz"))) == 9  # installed and checked before the test parts
    assert load_domain(dest, "de", "books").held_out  # no test part: half of train.review is held out
    assert [u.split("UFD/1d5f78c1a5c579910e6dff0ca2144d2e46492abb/data/")[1] for u in asked] == [
        f"{lang}/{domain}/train.review" for lang in ("de", "en", "fr") for domain in ("books", "dvd", "music")
    ] + ["de/books/test.review"]


def test_webis_download_lists_train_and_test_of_every_language_and_domain():
    from interlingua.data.webis import webis_files
    files = webis_files()
    assert len(files) == 18 and len(set(files.values())) == 18
    assert {name.split("/")[2] for name in files} == {"train.review.gz", "test.review.gz"}
    assert len(webis_files(with_test=False)) == 9


def test_webis_monolingual_takes_the_training_split_only(webis, tmp_path, capsys):
    """Review sentences for copy directions come from the documents `evaluate cldc` trains on,
    never from its test documents, and land beside the corpus as one group per language."""
    from conftest import write_multiway_corpus

    from interlingua.data.corpus import load_corpus, read_group
    from interlingua.data.webis import review_sentences
    for lang in ("en", "de"):
        for domain in ("books", "dvd"):
            write_reviews(webis / lang / domain / "train.review", lang, 10, 3)
    write_reviews(webis / "en" / "dvd" / "unlabeled.review", "en", 4, 5)
    unlabeled = read_reviews(webis / "en" / "dvd" / "unlabeled.review").texts
    sentences = review_sentences(webis, "en")
    train_docs = [t for d in ("books", "dvd", "music") for t in load_domain(webis, "en", d).train.texts]
    test_docs = [t for d in ("books", "dvd", "music") for t in load_domain(webis, "en", d).test.texts]
    in_order = [t for d in ("books", "dvd", "music") for t in
                load_domain(webis, "en", d).train.texts + (unlabeled if d == "dvd" else [])]
    assert sentences == [s for t in in_order for s in split_sentences(t, "en")]
    assert len(train_docs) + len(test_docs) == 60 and len(test_docs) >= 25
    base = write_multiway_corpus(tmp_path, "toy", {"train": {"en": ["a dog ."], "de": ["ein hund ."]}})
    dest = tmp_path / "with_reviews"
    assert main(["data", "webis-monolingual", "--from", str(webis), "--corpus", str(base), "--dest", str(dest)]) == 0
    assert f"en {len(sentences)}" in capsys.readouterr().out
    groups = {g.name: g for g in load_corpus(dest / "corpus.yaml").splits["train"]}
    assert set(groups) == {"multiway", "webis_reviews.en", "webis_reviews.de"}
    assert read_group(groups["webis_reviews.en"])["en"] == [" ".join(s.split()) for s in sentences]
    assert main(["data", "webis-monolingual", "--from", str(webis), "--dest", str(dest)]) == 2
    assert "--corpus" in capsys.readouterr().err
    assert main(["data", "webis-monolingual", "--from", str(webis), "--corpus", str(base), "--langs", "xx",
                 "--dest", str(dest)]) == 2
    assert "no language xx" in capsys.readouterr().err
