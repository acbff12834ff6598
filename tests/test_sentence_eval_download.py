"""SentEval probing download: clear error offline, atomic files when the server answers (no network used)."""
from __future__ import annotations

import io
import urllib.error
import urllib.request

import pytest

from interlingua.data import senteval_download as sd
from interlingua.errors import DataError


def test_offline_gives_a_clear_error_and_no_partial_file(tmp_path, monkeypatch):
    def offline(url, timeout=None):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(DataError, match=r"cannot download https://raw\.githubusercontent\.com/.*sentence_length\.txt.*offline"):
        sd.download_senteval_probing(tmp_path / "probing")
    assert list((tmp_path / "probing").iterdir()) == []


def test_all_ten_files_are_fetched_and_kept(tmp_path, monkeypatch):
    fetched = []

    class Response(io.BytesIO):
        headers = {"Content-Length": "9"}

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def fake(request, timeout=None):
        fetched.append(getattr(request, "full_url", request))
        return Response(b"tr\tA\tx .\n")

    monkeypatch.setattr(urllib.request, "urlopen", fake)
    paths = sd.download_senteval_probing(tmp_path)
    assert [p.name for p in paths] == list(sd.SENTEVAL_PROBING_FILES) and len(fetched) == 10
    assert all(p.read_text() == "tr\tA\tx .\n" for p in paths)
    assert all(u.startswith("https://") for u in fetched)
    sd.download_senteval_probing(tmp_path)  # present files are not fetched again
    assert len(fetched) == 10
    assert not list(tmp_path.glob("*.part"))
