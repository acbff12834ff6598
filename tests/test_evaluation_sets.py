"""Download/copy of the sentence-evaluation data: checksums, upstream layout, stored form."""
from __future__ import annotations

import gzip
import shutil

import pytest
from conftest import SHARED_DATA

from interlingua.cli import main
from interlingua.data import download
from interlingua.data.evaluation_sets import (
    SENTEVAL_URL,
    XNLI_URL,
    get_senteval_downstream,
    get_xnli_dev,
    read_checksums,
    senteval_upstream_path,
)
from interlingua.errors import DataError
from interlingua.evaluation.sentence.tasks import load_classification, load_xnli

SENTEVAL = SHARED_DATA / "senteval_downstream"
XNLI = SHARED_DATA / "xnli"


@pytest.fixture
def shared_evaluation_sets() -> None:
    if not (SENTEVAL / "MR").is_dir() or not XNLI.is_dir():
        from conftest import missing
        missing("../shared/data has no SentEval/XNLI copy")


needs_data = pytest.mark.usefixtures("shared_evaluation_sets")


def test_upstream_layout_mapping():
    assert senteval_upstream_path("MR/rt-polarity.pos") == "MR/rt-polarity.pos"
    assert senteval_upstream_path("STSBenchmark/sts-dev.csv") == "STS/STSBenchmark/sts-dev.csv"
    assert senteval_upstream_path("STSBenchmark/original/readme.txt") == "STS/STSBenchmark/stsbenchmark/readme.txt"
    assert senteval_upstream_path("SST/binary/sentiment-train.gz") == "SST/binary/sentiment-train"
    assert len(read_checksums("senteval_downstream")) == 80 and len(read_checksums("xnli")) == 4


@needs_data
def test_local_copy_is_checked_and_readable(tmp_path):
    root = tmp_path / "root"
    get_senteval_downstream(root / "senteval_downstream", SENTEVAL)
    assert len(load_classification(root, "MR").train.labels) == 10662
    get_xnli_dev(root / "xnli", XNLI)
    assert len(load_xnli(root, "de")) == 2490
    assert sorted(p.name for p in (root / "xnli").iterdir()) == [f"dev-{x}.tsv" for x in ("de", "en", "es", "fr")]

    bad = tmp_path / "bad"
    shutil.copytree(SENTEVAL, bad)
    (bad / "MR" / "rt-polarity.neg").write_text("not the file\n")
    with pytest.raises(DataError, match="checksum mismatch for MR/rt-polarity.neg"):
        get_senteval_downstream(tmp_path / "s2", bad)


@needs_data
def test_download_converts_to_stored_form(tmp_path, monkeypatch):
    """Serve the upstream bytes (SST train uncompressed, XNLI with CRLF) and check what lands."""
    upstream = {SENTEVAL_URL.format(path=senteval_upstream_path(n)): SENTEVAL / n
                for n in read_checksums("senteval_downstream")}
    upstream.update({XNLI_URL.format(name=n): XNLI / n for n in read_checksums("xnli")})
    fetched = []

    def fake_fetch(url, dest, **_):
        local = upstream[url]
        data = gzip.decompress(local.read_bytes()) if local.suffix == ".gz" else local.read_bytes()
        dest.write_bytes(data.replace(b"\n", b"\r\n") if "xnli" in url else data)
        fetched.append(url)

    monkeypatch.setattr(download, "fetch", fake_fetch)
    assert main(["data", "senteval", "--dest", str(tmp_path / "s")]) == 0
    assert main(["data", "xnli", "--dest", str(tmp_path / "x")]) == 0
    assert len(fetched) == 84
    assert gzip.decompress((tmp_path / "s" / "SST/binary/sentiment-train.gz").read_bytes()).count(b"\n") == 67349
    assert b"\r" not in (tmp_path / "x" / "dev-en.tsv").read_bytes()
    assert main(["data", "xnli", "--dest", str(tmp_path / "x")]) == 0   # all in place: nothing fetched again
    assert len(fetched) == 84


def test_probing_download_refuses_from(tmp_path, capsys):
    assert main(["data", "senteval-probing", "--dest", str(tmp_path / "p"), "--from", str(tmp_path)]) == 2
    assert "senteval-probing downloads only" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()
