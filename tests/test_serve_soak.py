"""bench/serve_soak.py's accounting on made-up numbers: windows, RSS growth, answers against references,
responses read off a stream (the soak itself runs for minutes: bench/README.md)."""
from __future__ import annotations

import asyncio
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import serve_soak  # noqa: E402 - bench/ is not a package


def test_a_window_counts_answers_refusals_errors_and_disconnects_apart():
    window = serve_soak.Window()
    for ms in range(1, 101):  # 100 right answers of 1..100 ms
        window.add("translate_greedy", None, ms / 1000)
    window.add("embed_mean", "429", 0.002)
    window.add("embed_mean", "HTTP 503", 60.0)
    window.add("translate_beam_max", "wrong answer: translate_beam_max", 0.5)
    window.disconnects["head, reset"] += 2
    line = serve_soak.window_line(3, window, 30.0, {"rss_mib": 500.0})
    assert (line["window"], line["t_end_s"]) == (3, 120.0)
    assert (line["requests"], line["answered"], line["refused_429"], line["errors"]) == (103, 100, 1, 2)
    assert line["error_kinds"] == {"HTTP 503": 1, "wrong answer: translate_beam_max": 1}
    assert (line["p50_ms"], line["p99_ms"], line["max_ms"]) == (50.0, 99.0, 100.0)  # answered ones only
    assert line["requests_by_kind"] == {"embed_mean": 2, "translate_beam_max": 1, "translate_greedy": 100}
    assert (line["disconnects"], line["rss_mib"]) == (2, 500.0)


def test_rss_growth_is_measured_from_the_end_of_the_first_minute():
    samples = [(30.0, 400.0), (60.0, 500.0), (90.0, 530.0), (120.0, 510.0)]
    growth = serve_soak.rss_growth(samples)
    assert growth["rss_mib_at_1min"] == 500.0
    assert (growth["rss_growth_pct"], growth["rss_growth_max_pct"]) == (2.0, 6.0)
    assert growth["rss_trend_mib_per_min"] == 10.0  # the least-squares line through 500, 530, 510 MiB
    assert serve_soak.rss_growth(samples[:2])["rss_growth_pct"] is None  # one minute: nothing after it


def test_an_answer_is_right_when_it_equals_its_reference_within_the_tolerance():
    reference = {"translations": ["ein hund ."], "vectors": [[0.5, -1.0]], "dim": 2}
    assert serve_soak.same({"translations": ["ein hund ."], "vectors": [[0.5004, -1.0]], "dim": 2}, reference)
    assert not serve_soak.same({"translations": ["ein hund"], "vectors": [[0.5, -1.0]], "dim": 2}, reference)
    assert not serve_soak.same({"translations": ["ein hund ."], "vectors": [[0.51, -1.0]], "dim": 2}, reference)
    assert not serve_soak.same({"translations": ["ein hund ."], "vectors": [[0.5]], "dim": 2}, reference)
    assert not serve_soak.same({"translations": ["ein hund ."], "vectors": [[0.5, -1.0]]}, reference)


def test_responses_are_read_by_length_and_by_chunks():
    async def read(raw: bytes):
        reader = asyncio.StreamReader()
        reader.feed_data(raw)
        reader.feed_eof()
        return await serve_soak.read_response(reader)

    status, headers, body = asyncio.run(read(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}extra"))
    assert (status, body) == (200, b"{}")
    status, headers, body = asyncio.run(read(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\n"
                                             b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"))
    assert (status, headers["retry-after"], body) == (429, "1", b"abcde")
