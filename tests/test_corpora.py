"""Paper-scale corpora: IWSLT 2017 and Europarl/WMT07 parsed from their release formats, and
downloads that check digests and resume after an interruption without leaving a file that looks whole."""
import gzip
import hashlib
import http.server
import io
import tarfile
import threading
from pathlib import Path

import pytest
import yaml
from conftest import SHARED_DATA, missing

from interlingua.cli import main
from interlingua.data import europarl, iwslt
from interlingua.data.corpus import load_corpus, read_group
from interlingua.data.download import fetch
from interlingua.errors import DataError

IWSLT_COUNTS = {  # segments per pair, from the release's PROVENANCE table
    "de-en": (888, 1568), "de-it": (923, 1567), "de-nl": (1001, 1779), "de-ro": (912, 1677),
    "en-it": (929, 1566), "en-nl": (1003, 1777), "en-ro": (914, 1678), "it-nl": (1001, 1669),
    "it-ro": (914, 1643), "nl-ro": (913, 1680),
}


def _iwslt_source() -> Path:
    source = SHARED_DATA / "iwslt17_multilingual"
    if not (source / "tst2010" / "IWSLT17.TED.tst2010.de-en.de.xml.gz").is_file():
        missing("../shared/data/iwslt17_multilingual is not available")
    return source


def test_iwslt17_release_xml_parsed_into_aligned_pairs_with_the_published_counts(tmp_path, capsys):
    assert main(["data", "iwslt17", "--from", str(_iwslt_source()), "--dest", str(tmp_path / "iw")]) == 0
    assert "IWSLT 2017 multilingual ready" in capsys.readouterr().out
    corpus = load_corpus(tmp_path / "iw" / "corpus.yaml")
    assert corpus.languages == ["de", "en", "it", "nl", "ro"]
    for split, column in (("val", 0), ("tst2010", 1)):
        counts = {g.name: len(next(iter(read_group(g).values()))) for g in corpus.groups(split)}
        assert counts == {pair: n[column] for pair, n in IWSLT_COUNTS.items()}
    pair = {g.name: read_group(g) for g in corpus.groups("tst2010")}["de-en"]
    assert pair["de"][0].startswith("Vor einigen Jahren, hier bei TED")  # padding and tags gone
    assert not any("<" in line and "seg" in line for line in pair["en"])
    multi = read_group(corpus.groups("tst2010_multiway")[0])
    assert set(multi) == set(corpus.languages) and 1000 < len(multi["en"]) <= 1566
    # every multi-way line is a real aligned pair of its x-en set
    de_en = dict(zip(pair["en"], pair["de"]))
    assert all(de_en.get(e) == d for e, d in zip(multi["en"][:200], multi["de"][:200]))


def test_iwslt_train_tags_keep_transcripts_and_drop_metadata(tmp_path):
    path = tmp_path / "train.tags.de-en.en"
    path.write_text("<url>http://www.ted.com/talks/x</url>\n<talkid>1</talkid>\n  Hello  world.\n"
                    "<title>T</title>\nSecond line.\n", encoding="utf-8")
    assert iwslt.read_train_tags(path) == ["Hello world.", "Second line."]


def test_multiway_through_english_keeps_keys_every_pair_has():
    pairs = {"de": {"de": ["a", "b", "c"], "en": ["A", "B", "C"]}, "it": {"it": ["y", "x"], "en": ["B", "A"]}}
    talks = {"de": ["1", "1", "1"], "it": ["1", "1"]}
    assert iwslt.multiway_through_english(pairs, talks) == {"en": ["A", "B"], "de": ["a", "b"], "it": ["x", "y"]}


def _release_archive(folder: Path) -> Path:
    """A small archive laid out as the IWSLT 2017 release (an inner tgz inside the outer one)."""
    inner = io.BytesIO()
    files = {
        "train.tags.de-en.de": "<talkid>1</talkid>\nHallo Welt.\nZweiter Satz.\n",
        "train.tags.de-en.en": "<talkid>1</talkid>\nHello world.\nSecond sentence.\n",
    }
    for lang, text in (("de", "Guten Tag."), ("en", "Good day.")):
        for split in ("dev2010", "tst2010"):
            files[f"IWSLT17.TED.{split}.de-en.{lang}.xml"] = (
                f'<?xml version="1.0" encoding="UTF-8"?>\n<mteval><srcset><doc docid="7"><talkid>7</talkid>'
                f'<seg id="1"> {text} </seg><seg id="2"> &quot;{text}&quot; </seg></doc></srcset></mteval>\n')
    with tarfile.open(fileobj=inner, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"DeEnItNlRo-DeEnItNlRo/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    archive = folder / iwslt.RELEASE_ARCHIVE[0]
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("2017-01-trnmted/texts/DeEnItNlRo/DeEnItNlRo/DeEnItNlRo-DeEnItNlRo.tgz")
        info.size = len(inner.getvalue())
        tar.addfile(info, io.BytesIO(inner.getvalue()))
    return archive


def test_iwslt_release_archive_checked_unpacked_and_converted(tmp_path, monkeypatch, capsys):
    source = tmp_path / "mirror"
    source.mkdir()
    archive = _release_archive(source)
    dest = tmp_path / "iw"
    # the published MD5 is not this fixture's: a clear error, and no archive left that looks checked
    assert main(["data", "iwslt17", "--from", str(source), "--dest", str(dest)]) == 2
    assert "checksum mismatch for 2017-01-trnmted.tgz" in capsys.readouterr().err
    assert not (dest / "downloads" / archive.name).exists()
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    monkeypatch.setattr(iwslt, "RELEASE_ARCHIVE", (*iwslt.RELEASE_ARCHIVE[:2], md5))
    corpus = load_corpus(iwslt.get_iwslt17(dest, source_dir=source))
    train = read_group(corpus.groups("train")[0])
    assert train == {"de": ["Hallo Welt.", "Zweiter Satz."], "en": ["Hello world.", "Second sentence."]}
    assert read_group(corpus.groups("val")[0])["en"] == ["Good day.", '"Good day."']


def _tgz(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_europarl_and_wmt_sets_from_plain_latin1_and_sgml_files(tmp_path, monkeypatch, capsys):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    train = _tgz(mirror / europarl.TRAIN_ARCHIVE[0], {
        "training/europarl-v7.de-en.de": b"Wiederaufnahme der Sitzungsperiode\n\nIch bitte Sie.\n",
        "training/europarl-v7.de-en.en": b"Resumption of the session\nPlease rise.\nThank you.\n",
        "training/europarl-v7.fr-en.fr": b"Merci.\nReprise de la session\nVeuillez vous lever.\n",
        "training/europarl-v7.fr-en.en": b"Thank you.\nResumption of the session\nPlease rise.\n",
        "training/europarl-v7.es-en.es": b"not asked for\n",
        "training/europarl-v7.es-en.en": b"not asked for\n",
    })
    sgml = ('<srcset setid="devtest2006" srclang="any">\n<doc docid="x">\n'
            '<seg id=1>{} &amp; {}</seg>\n</doc>\n</srcset>\n')
    _tgz(mirror / europarl.DEV_ARCHIVE[0], {
        "wmt07/dev/dev2006.de": "Straße frei\nzwei\n".encode("latin-1"),  # the old sets are Latin-1
        "wmt07/dev/dev2006.en": b"road clear\ntwo\n",
        "wmt07/dev/dev2006.fr": b"route libre\ndeux\n",
        "wmt07/devtest/devtest2006.fr.sgm": sgml.format("pain", "beurre").encode(),
        "wmt07/devtest/devtest2006.de.sgm": sgml.format("Brot", "Butter").encode("latin-1"),
        "wmt07/devtest/devtest2006.en.sgm": sgml.format("bread", "butter").encode(),
    })
    dest = tmp_path / "ep"
    assert main(["data", "europarl", "--langs", "de", "fr", "--from", str(mirror), "--dest", str(dest)]) == 2
    assert "checksum mismatch for training-parallel-europarl-v7.tgz" in capsys.readouterr().err
    assert not (dest / "downloads" / train.name).exists()

    digest = hashlib.sha256(train.read_bytes()).hexdigest()
    monkeypatch.setattr(europarl, "TRAIN_ARCHIVE", (*europarl.TRAIN_ARCHIVE[:2], digest))
    assert main(["data", "europarl", "--langs", "de", "fr", "--from", str(mirror), "--dest", str(dest)]) == 0
    corpus = load_corpus(dest / "corpus.yaml")
    assert corpus.languages == ["de", "en", "fr"]
    train = {g.name: read_group(g) for g in corpus.groups("train")}
    assert train["de-en"] == {"de": ["Wiederaufnahme der Sitzungsperiode", "", "Ich bitte Sie."],
                              "en": ["Resumption of the session", "Please rise.", "Thank you."]}
    # de-fr: the lines whose English sides are identical, in the German file's order
    assert train["de-fr"] == {"de": ["Wiederaufnahme der Sitzungsperiode", "", "Ich bitte Sie."],
                              "fr": ["Reprise de la session", "Veuillez vous lever.", "Merci."]}
    assert read_group(corpus.groups("val")[0]) == {"de": ["Straße frei", "zwei"], "en": ["road clear", "two"],
                                                   "fr": ["route libre", "deux"]}
    assert read_group(corpus.groups("devtest2006")[0]) == {"de": ["Brot & Butter"], "en": ["bread & butter"],
                                                           "fr": ["pain & beurre"]}
    assert "test2006" not in corpus.splits  # absent from this archive: left out, with a warning
    record = dest / "downloads" / "devsets.tgz.sha256"  # no published digest: the first copy's is kept
    assert record.read_text().split()[0] == hashlib.sha256((mirror / "devsets.tgz").read_bytes()).hexdigest()
    (mirror / "devsets.tgz").write_bytes(b"another file")
    (dest / "downloads" / "devsets.tgz").unlink()
    with pytest.raises(DataError, match="differs from the copy first installed"):
        europarl.get_europarl(dest, ["de", "fr"], mirror)


def test_europarl_refuses_languages_without_evaluation_sets(tmp_path):
    with pytest.raises(DataError, match="not cs"):
        europarl.get_europarl(tmp_path, ["cs"])


class _FlakyServer(http.server.BaseHTTPRequestHandler):
    """Serves `payload`; the first request breaks off half way, later ones honour Range."""

    payload = bytes(range(256)) * 400
    requests: list[str | None] = []

    def do_GET(self):  # noqa: N802 (the handler's API)
        rng = self.headers.get("Range")
        type(self).requests.append(rng)
        start = int(rng.split("=")[1].rstrip("-")) if rng else 0
        body = self.payload[start:]
        self.send_response(206 if rng else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if len(type(self).requests) == 1:
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            self.connection.shutdown(2)
            return
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_interrupted_download_leaves_only_a_part_file_and_resumes(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FlakyServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/big.bin"
    dest = tmp_path / "big.bin"
    try:
        with pytest.raises(DataError, match=r"big.bin.part is kept and the next run resumes it"):
            fetch(url, dest, timeout=5)
        assert not dest.exists()
        half = (tmp_path / "big.bin.part").stat().st_size
        assert 0 < half < len(_FlakyServer.payload)
        fetch(url, dest, timeout=5)
    finally:
        server.shutdown()
    assert dest.read_bytes() == _FlakyServer.payload
    assert not (tmp_path / "big.bin.part").exists()
    assert _FlakyServer.requests == [None, f"bytes={half}-"]


def test_corpus_yaml_of_the_converted_sets_is_plain_yaml(tmp_path):
    out = iwslt.build_iwslt17_corpus(_iwslt_source(), tmp_path, ["de", "en", "it"])
    spec = yaml.safe_load(out.read_text())
    assert sorted(spec["pairs"]["val"]) == ["de-en", "de-it", "en-it"]
    assert sorted(spec["splits"]["tst2010_multiway"]) == ["de", "en", "it"]
    with gzip.open(tmp_path / spec["splits"]["tst2010_multiway"]["en"], "rt") as f:
        assert len(f.read().splitlines()) > 1000
