"""`interlingua serve` under abuse and overload: the payload limit (before the body is read), the bound
on requests at once (429), the request timeout (503, the queue dropped), stalled and idle connections
(closed, never piling up), batches bounded by tokens, timing headers, /metrics, the API key, and
API docs that load nothing from elsewhere.

Connection-level behaviour is tested against the real uvicorn server (`server_config`, as `interlingua
serve` runs it) in a thread of this process, over raw sockets."""
from __future__ import annotations

import asyncio
import json
import re
import select
import socket
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from html.parser import HTMLParser

import pytest
import uvicorn

with warnings.catch_warnings():  # as in test_serve.py
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

from test_serve import EN, TRANSLATE, FakeModelCall, model, run_async  # noqa: F401 (fixture)

from interlingua.cli import build_parser, main
from interlingua.errors import ConfigError
from interlingua.inference.api import Model, load
from interlingua.serving.app import build_app
from interlingua.serving.batcher import DynamicBatcher
from interlingua.serving.connections import MAX_HEAD_BYTES
from interlingua.serving.limits import ServiceLimits, estimated_subwords
from interlingua.serving.server import listening_socket, reachable_from_elsewhere, serve, server_config


def slowed(trained_model, seconds: float, calls: list[int] | None = None) -> Model:
    """A fresh model whose translations take `seconds` longer; `calls` notes each call's text count."""
    slow = load(trained_model, "cpu")
    translate = slow.translate

    def slow_translate(texts, *args, **kwargs):
        if calls is not None:
            calls.append(len(texts))
        time.sleep(seconds)
        return translate(texts, *args, **kwargs)

    slow.translate = slow_translate
    return slow


def at_once(count: int, ask) -> list:
    """`ask(i)` from `count` threads released together; their answers in order."""
    start = threading.Barrier(count)
    answers: list = [None] * count

    def run(i: int) -> None:
        start.wait()
        answers[i] = ask(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return answers


# --- a real server over raw sockets ---------------------------------------------------------------


class LiveServer:
    def __init__(self, server: uvicorn.Server, port: int):
        self.server, self.port = server, port

    def connect(self, timeout: float = 10.0) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)

    @property
    def open_connections(self) -> int:
        return len(self.server.server_state.connections)


@contextmanager
def live_server(app, limits: ServiceLimits) -> Iterator[LiveServer]:
    """`app` served by uvicorn as `interlingua serve` configures it, in a thread, on a free port."""
    sock = listening_socket("127.0.0.1", 0)
    server = uvicorn.Server(server_config(app, limits, graceful_timeout_s=5, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        yield LiveServer(server, sock.getsockname()[1])
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()


def read_until_closed(conn: socket.socket, seconds: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection (or `seconds` pass: an error), and when."""
    t0 = time.monotonic()
    conn.settimeout(seconds)
    data = b""
    try:
        while chunk := conn.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        pytest.fail(f"the server kept the connection open for {seconds} s; got {data[:200]!r}")
    return data, time.monotonic() - t0


def parse_response(data: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


def read_response(conn: socket.socket, timeout: float = 10.0) -> tuple[int, dict[str, str], dict]:
    """One HTTP response with a Content-Length body, read off `conn`."""
    conn.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        assert chunk, f"the connection closed after {data!r}"
        data += chunk
    status, headers, body = parse_response(data)
    while len(body) < int(headers["content-length"]):
        body += conn.recv(65536)
    return status, headers, json.loads(body)


@pytest.fixture(scope="module")
def guarded(model) -> Iterator[LiveServer]:
    """Small limits, so that the tests see them act within a second."""
    limits = ServiceLimits(payload_limit=1000, read_timeout_s=0.5, keep_alive_timeout_s=0.3, max_connections=40)
    with live_server(build_app(model, limits), limits) as server:
        yield server


# --- the payload limit ----------------------------------------------------------------------------


def test_a_declared_body_over_the_limit_is_a_413_before_it_is_read(guarded):
    with guarded.connect() as conn:
        t0 = time.monotonic()
        conn.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100000000\r\n\r\n")  # 100 MB announced, not one byte of it sent
        status, headers, body = read_response(conn)
        assert time.monotonic() - t0 < 2
    assert status == 413 and headers["content-type"] == "application/json"
    assert body["error"]["field"] == "body" and "100,000,000" in body["error"]["message"] \
        and "1,000" in body["error"]["message"]


def test_a_chunked_body_is_counted_as_it_streams_in(guarded):
    with guarded.connect() as conn:
        conn.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        conn.sendall(b"258\r\n" + b" " * 600 + b"\r\n")  # 600 bytes: under the limit of 1000
        time.sleep(0.1)
        conn.sendall(b"258\r\n" + b" " * 600 + b"\r\n")  # 1200: over it; the body never ends
        status, _, body = read_response(conn)
    assert status == 413 and "longer than 1,000 bytes" in body["error"]["message"]


def test_a_body_under_the_limit_is_answered(model):
    with TestClient(build_app(model, ServiceLimits(payload_limit=200))) as small:
        assert small.post("/translate", json=TRANSLATE).status_code == 200
        response = small.post("/translate", json={**TRANSLATE, "texts": ["a" * 300]})
        assert response.status_code == 413 and response.json()["error"]["field"] == "body"


# --- stalled and idle connections -------------------------------------------------------------------


@pytest.mark.parametrize("sent", [b"", b"POST /translate HTTP/1.1\r\nHost: x\r\n", b"GET /hea"],
                         ids=["nothing", "half-the-headers", "half-a-line"])
def test_a_stalled_request_head_gets_a_408_and_is_closed(guarded, sent):
    with guarded.connect() as conn:
        conn.sendall(sent)
        data, seconds = read_until_closed(conn, 5)
    assert seconds < 2
    status, headers, body = parse_response(data)
    assert status == 408 and headers["connection"] == "close"
    assert "0.5 s" in json.loads(body)["error"]["message"]


def test_trickling_a_head_byte_by_byte_does_not_keep_it_open(guarded):
    """The head has a deadline, not a timeout between bytes."""
    with guarded.connect() as conn:
        t0 = time.monotonic()
        head = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"y" * 100
        for byte in head:
            if select.select([conn], [], [], 0)[0]:  # the server has answered: stop before it resets
                break
            conn.sendall(bytes([byte]))
            time.sleep(0.05)
        data, _ = read_until_closed(conn, 5)
        assert time.monotonic() - t0 < 2.5 and data.startswith(b"HTTP/1.1 408")


def test_a_stalled_body_gets_a_408_and_is_closed(guarded):
    with guarded.connect() as conn:
        conn.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"texts\": ")
        data, seconds = read_until_closed(conn, 5)
    status, headers, body = parse_response(data)
    assert seconds < 2 and status == 408 and headers["connection"] == "close"
    assert json.loads(body)["error"]["field"] == "body"


def test_an_idle_keep_alive_connection_is_closed(guarded):
    with guarded.connect() as conn:
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _, _ = read_response(conn)
        _, seconds = read_until_closed(conn, 5)
    assert status == 200 and seconds < 1.5


def test_stalled_connections_do_not_pile_up(guarded):
    conns = [guarded.connect() for _ in range(30)]
    try:
        for i, conn in enumerate(conns):
            conn.sendall(b"POST /embed HTTP/1.1\r\nHost: x\r\n" if i % 2 else b"")
        # Each one is answered 408 and closed by the server. (How many are open at one moment depends on how
        # fast a busy machine's loop accepts them against the 0.5 s deadline, so that is not what is checked.)
        statuses = [parse_response(read_until_closed(conn, 5)[0])[0] for conn in conns]
        assert statuses == [408] * 30
    finally:
        for conn in conns:
            conn.close()
    deadline = time.monotonic() + 5
    while guarded.open_connections and time.monotonic() < deadline:
        time.sleep(0.05)
    assert guarded.open_connections == 0
    with guarded.connect() as conn:  # and the server still answers
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(conn)[0] == 200


def test_past_max_connections_a_new_one_gets_a_503(model):
    limits = ServiceLimits(max_connections=3)
    with live_server(build_app(model, limits), limits) as server:
        idle = [server.connect() for _ in range(3)]
        try:
            time.sleep(0.1)
            with server.connect() as extra:
                data, _ = read_until_closed(extra, 5)
            status, _, body = parse_response(data)
            assert status == 503 and "--max-connections" in json.loads(body)["error"]["message"]
        finally:
            for conn in idle:
                conn.close()


# --- the framing of a request -------------------------------------------------------------------------

BODY = json.dumps(TRANSLATE).encode()
SMUGGLED = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"


def answers(data: bytes) -> list[bytes]:
    """The status lines of every answer in `data`."""
    return re.findall(rb"HTTP/1\.1 \d{3}[^\r]*", data)


@pytest.mark.parametrize("framing", [
    b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n" % len(BODY),
    b"Transfer-Encoding: chunked\r\nContent-Length: %d\r\n" % len(BODY),
    b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n",  # a proxy that reads 4 bytes sees a second request
], ids=["length-first", "chunked-first", "disagreeing"])
def test_a_request_with_both_content_length_and_transfer_encoding_is_a_400_and_closed(guarded, framing):
    """RFC 9112 §6.1: the two framings may disagree about where the body ends, which is how a request is
    smuggled past a proxy in front; the request is refused and nothing after it on the connection is read."""
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)
    with guarded.connect() as conn:
        conn.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + framing
                     + b"\r\n" + chunked + SMUGGLED)
        data, seconds = read_until_closed(conn, 5)
    assert seconds < 2 and answers(data) == [b"HTTP/1.1 400 Bad Request"], data
    status, headers, body = parse_response(data)
    assert headers["connection"] == "close" and headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert error["field"] == "header.transfer-encoding" and "Content-Length and Transfer-Encoding" in error["message"]


def test_one_framing_alone_is_answered_and_the_connection_kept(guarded):
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)
    with guarded.connect() as conn:
        for framing, body in ((b"Content-Length: %d\r\n" % len(BODY), BODY),
                              (b"Transfer-Encoding: chunked\r\n", chunked)):
            conn.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + framing
                         + b"\r\n" + body)
            assert read_response(conn, 30)[0] == 200


def padded_head(size: int, target: bytes = b"/health") -> bytes:
    """A GET of `target` whose head (request line and headers) has exactly `size` bytes."""
    head = b"GET %s HTTP/1.1\r\nHost: x\r\nX-Pad: " % target
    return head + b"p" * (size - len(head) - 4) + b"\r\n\r\n"


def test_a_head_of_the_documented_limit_is_answered(guarded):
    assert MAX_HEAD_BYTES == 16 * 1024  # README: 16 KiB
    with guarded.connect() as conn:
        conn.sendall(padded_head(MAX_HEAD_BYTES))
        assert read_response(conn)[0] == 200


@pytest.mark.parametrize("head", [
    padded_head(MAX_HEAD_BYTES + 1),
    padded_head(70_000),
    b"GET /health?q=" + b"u" * 100_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 90) for i in range(400)) + b"\r\n",
], ids=["one-byte-over", "a-70-KB-header", "a-100-KB-url", "400-headers"])
def test_a_head_over_the_limit_in_one_read_is_a_431(guarded, head):
    with guarded.connect() as conn:
        conn.sendall(head)
        data, seconds = read_until_closed(conn, 5)
    assert seconds < 2 and answers(data) == [b"HTTP/1.1 431 Request Header Fields Too Large"], data[:200]
    status, headers, body = parse_response(data)
    error = json.loads(body)["error"]
    assert headers["connection"] == "close" and error["field"] == "header" and "16,384" in error["message"]


def test_a_head_over_the_limit_in_many_reads_is_a_431(guarded):
    head = padded_head(40_000)
    with guarded.connect() as conn:
        for start in range(0, len(head), 4096):
            if select.select([conn], [], [], 0)[0]:  # the server has answered: stop before it resets
                break
            conn.sendall(head[start:start + 4096])
            time.sleep(0.02)
        data, _ = read_until_closed(conn, 5)
    assert answers(data) == [b"HTTP/1.1 431 Request Header Fields Too Large"], data[:200]
    assert json.loads(parse_response(data)[2])["error"]["field"] == "header"


def test_a_malformed_request_is_the_services_json_400(guarded):
    with guarded.connect() as conn:
        conn.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n")
        data, _ = read_until_closed(conn, 5)
    status, headers, body = parse_response(data)
    assert status == 400 and headers["content-type"] == "application/json"
    assert "Transfer-Encoding" in json.loads(body)["error"]["message"]


# --- requests at once, and in time ------------------------------------------------------------------


def test_requests_past_max_concurrent_requests_are_a_429(trained_model):
    limits = ServiceLimits(max_concurrent_requests=2)
    with TestClient(build_app(slowed(trained_model, 0.8), limits)) as test_client:
        answers = at_once(5, lambda i: test_client.post("/translate", json=TRANSLATE))
        assert test_client.get("/health").status_code == 200  # not counted, never refused
        refused = [a for a in answers if a.status_code == 429]
        assert sorted(a.status_code for a in answers) == [200, 200, 429, 429, 429]
        for answer in refused:
            assert answer.headers["retry-after"] == "1"
            assert "--max-concurrent-requests" in answer.json()["error"]["message"]
        assert test_client.post("/translate", json=TRANSLATE).status_code == 200  # the slots are free again


def test_a_request_past_its_timeout_is_a_503_and_leaves_the_queue(trained_model):
    calls: list[int] = []
    limits = ServiceLimits(request_timeout_s=0.3)
    with TestClient(build_app(slowed(trained_model, 1.0, calls), limits)) as test_client:
        t0 = time.monotonic()
        answers = at_once(2, lambda i: test_client.post("/translate", json={**TRANSLATE, "texts": [EN[i]],
                                                                            "beam": 1 + i}))
        assert time.monotonic() - t0 < 0.9  # answered at the timeout, not when the model is done
        for answer in answers:
            assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
            assert "--request-timeout" in answer.json()["error"]["message"]
        time.sleep(1.5)  # the model call under way finishes; the other request's texts never reach the model
        assert calls == [1]


def test_the_batcher_drops_a_request_whose_caller_gave_up():
    run = FakeModelCall(seconds=0.3)

    async def scenario():
        async with DynamicBatcher(run) as batcher:
            first = asyncio.ensure_future(batcher.submit("a", ["first"]))
            await asyncio.sleep(0.05)  # its model call is running
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(batcher.submit("a", ["late"]), 0.05)
            assert batcher.queued == 0
            return await first

    assert run_async(scenario()) == ["a:FIRST"]
    assert [texts for _, texts in run.calls] == [["first"]]


def test_the_batcher_bounds_a_batch_by_tokens_too():
    run = FakeModelCall()

    async def scenario():
        async with DynamicBatcher(run, max_wait_ms=100, max_batch_texts=64, max_batch_tokens=10) as batcher:
            return await asyncio.gather(*[batcher.submit("a", ["xxxx"]) for _ in range(5)],
                                        batcher.submit("a", ["y" * 25]))

    answers = run_async(scenario())
    assert answers == [["a:XXXX"]] * 5 + [["a:" + "Y" * 25]]
    assert sorted(sum(map(len, texts)) for _, texts in run.calls) == [4, 8, 8, 25]  # 25: alone, over the bound


def test_token_estimate_is_characters_capped_at_max_len():
    assert estimated_subwords("a dog", 50) == 6 and estimated_subwords("x" * 2000, 50) == 51
    assert estimated_subwords("", 50) == 1


# --- timing headers and metrics -----------------------------------------------------------------------


def test_model_answers_carry_timing_headers(model):
    with TestClient(build_app(model)) as test_client:
        response = test_client.post("/translate", json=TRANSLATE)
        times = {name: float(response.headers[name]) for name in ("x-total-time", "x-queue-time", "x-inference-time")}
        assert times["x-inference-time"] > 0 and times["x-queue-time"] >= 0
        assert times["x-total-time"] >= times["x-inference-time"] + times["x-queue-time"] - 0.2
        assert "x-total-time" in test_client.post("/embed", json={"texts": ["a"], "lang": "xx"}).headers  # a 422
        assert "x-total-time" not in test_client.get("/health").headers


def metric(text: str, name: str, **labels: str) -> float:
    selector = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = re.escape(name + (f"{{{selector}}}" if selector else "")) + r" (\S+)"
    found = re.search(f"^{pattern}$", text, re.MULTILINE)
    assert found, f"no {name} {labels} in:\n{text}"
    return float(found.group(1))


def test_metrics_in_prometheus_format_per_app(model):
    with TestClient(build_app(model)) as first, TestClient(build_app(model)) as second:  # no clash
        for _ in range(3):
            assert first.post("/translate", json=TRANSLATE).status_code == 200
        first.post("/translate", json={**TRANSLATE, "src": "xx"})
        first.post("/embed", json={"texts": ["a dog", "two dogs"], "lang": "en"})
        first.get("/nowhere")
        response = first.get("/metrics")
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
        text = response.text
        assert metric(text, "interlingua_requests_total", endpoint="/translate", status="200") == 3
        assert metric(text, "interlingua_requests_total", endpoint="/translate", status="422") == 1
        assert metric(text, "interlingua_requests_total", endpoint="unmatched", status="404") == 1
        assert metric(text, "interlingua_request_duration_seconds_count", endpoint="/translate") == 4
        assert metric(text, "interlingua_queue_duration_seconds_count", endpoint="/translate") == 3
        assert metric(text, "interlingua_inference_duration_seconds_sum", endpoint="/embed") > 0
        assert metric(text, "interlingua_batch_size_count") == 4 and metric(text, "interlingua_batch_size_sum") == 5
        assert metric(text, "interlingua_batch_tokens_sum") == sum(estimated_subwords(t, model.preprocess.max_len)
                                                                   for t in ["A dog runs."] * 3 + ["a dog", "two dogs"])
        assert metric(text, "interlingua_queue_depth") == 0 and metric(text, "interlingua_requests_in_flight") == 0
        assert 'endpoint="/translate"' not in second.get("/metrics").text


# --- the API key ------------------------------------------------------------------------------------------


def test_the_api_key_guards_every_endpoint_but_health_the_page_and_the_docs(model):
    with TestClient(build_app(model, api_key="s3cret")) as test_client:
        for path in ("/health", "/", "/docs", "/openapi.json", "/page/page.js"):
            assert test_client.get(path).status_code == 200, path
        bearer = {"Authorization": "Bearer s3cret"}
        for method, path, body in [("GET", "/languages", None), ("GET", "/model", None), ("GET", "/metrics", None),
                                   ("POST", "/translate", TRANSLATE), ("POST", "/v1/embeddings",
                                                                       {"input": "a", "model": "m", "language": "en"})]:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret"}):
                response = test_client.request(method, path, json=body, headers=headers)
                assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer", path
                assert response.json()["error"]["field"] == "header.authorization"
            assert test_client.request(method, path, json=body, headers=bearer).status_code == 200, path


def test_the_key_comes_from_the_flag_or_the_environment(monkeypatch, tmp_path):
    seen: list[dict] = []
    monkeypatch.setattr("interlingua.serving.server.serve", lambda *args, **kwargs: seen.append(kwargs))
    monkeypatch.setenv("INTERLINGUA_API_KEY", "from-env")
    assert main(["serve", "--model", "m.pt"]) == 0
    assert main(["serve", "--model", "m.pt", "--api-key", "from-flag", "--payload-limit", "123",
                 "--request-timeout", "2.5"]) == 0
    monkeypatch.delenv("INTERLINGUA_API_KEY")
    assert main(["serve", "--model", "m.pt"]) == 0
    assert [kwargs["api_key"] for kwargs in seen] == ["from-env", "from-flag", None]
    assert (seen[1]["limits"].payload_limit, seen[1]["limits"].request_timeout_s) == (123, 2.5)


@pytest.mark.parametrize("flag, env, source", [
    ("", None, "--api-key is empty"),
    ("  ", None, "--api-key is blank"),
    (None, "", "the environment variable INTERLINGUA_API_KEY is empty"),
    ("", "from-env", "--api-key is empty"),
], ids=["empty-flag", "blank-flag", "empty-env", "empty-flag-over-env"])
def test_an_empty_key_is_a_one_line_error_at_start_up(monkeypatch, capsys, flag, env, source):
    """`--api-key "$UNSET"` must not serve without authentication."""
    started: list[dict] = []
    monkeypatch.setattr("interlingua.serving.server.serve", lambda *args, **kwargs: started.append(kwargs))
    monkeypatch.delenv("INTERLINGUA_API_KEY", raising=False)
    if env is not None:
        monkeypatch.setenv("INTERLINGUA_API_KEY", env)
    assert main(["serve", "--model", "m.pt", *(["--api-key", flag] if flag is not None else [])]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {source}") and started == []


def test_an_empty_key_is_refused_from_python_too(model, trained_model):
    with pytest.raises(ConfigError, match="API key is empty"):
        build_app(model, api_key="")
    with pytest.raises(ConfigError, match="API key is empty"):
        serve(trained_model, port=0, device="cpu", api_key="")


def test_the_command_defaults_are_the_limits_defaults():
    args = build_parser().parse_args(["serve", "--model", "m.pt"])
    shown = {"max_texts": args.max_texts, "max_chars": args.max_chars, "max_wait_ms": args.max_wait_ms,
             "max_batch_texts": args.max_batch_texts, "max_batch_tokens": args.max_batch_tokens,
             "payload_limit": args.payload_limit, "max_concurrent_requests": args.max_concurrent_requests,
             "request_timeout_s": args.request_timeout, "read_timeout_s": args.read_timeout,
             "keep_alive_timeout_s": args.keep_alive_timeout, "max_connections": args.max_connections}
    assert ServiceLimits(**shown) == ServiceLimits()
    assert args.api_key is None


def test_listening_beyond_this_machine_without_a_key_is_warned_about(trained_model, monkeypatch, capsys):
    assert reachable_from_elsewhere("0.0.0.0") and reachable_from_elsewhere("::")
    assert not reachable_from_elsewhere("127.0.0.1") and not reachable_from_elsewhere("::1")
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: None)  # bind, but serve nothing
    warned = []
    for host, key in (("127.0.0.1", None), ("0.0.0.0", "k"), ("0.0.0.0", None)):
        serve(trained_model, host=host, port=0, device="cpu", api_key=key)
        warned.append("without an API key" in capsys.readouterr().err)  # uvicorn's logger writes to stderr
    assert warned == [False, False, True]


# --- the docs ---------------------------------------------------------------------------------------------


class Loads(HTMLParser):
    def __init__(self):
        super().__init__()
        self.loads: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.loads += [a[key] for key in ("src", "href") if key in a and tag in ("script", "link", "img")]


def test_the_docs_load_nothing_from_elsewhere(model):
    with TestClient(build_app(model)) as test_client:
        response = test_client.get("/docs")
        assert response.status_code == 200 and "default-src 'self'" in response.headers["content-security-policy"]
        page = Loads()
        page.feed(response.text)
        assert sorted(page.loads) == ["data:,", "page/docs.js", "page/page.css"]
        script = test_client.get("/page/docs.js")
        assert script.status_code == 200 and not re.search(r"https?://", script.text)
        assert "openapi.json" in script.text
        assert test_client.get("/redoc").status_code == 404
        assert {"/translate", "/metrics"} <= set(test_client.get("/openapi.json").json()["paths"])
