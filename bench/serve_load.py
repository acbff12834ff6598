"""Load test of `interlingua serve` over loopback: requests/s and latency under concurrent clients, what
dynamic batching buys, what the service's bounds do under overload, and what a huge body costs it.

Run: python bench/serve_load.py --model runs/multi30k/cpu/ntdv/lstm_bridge_en_de_fr_ntdv/best.pt
     [--src en --tgt de (default: the first trained direction)] [--clients 1 8 32] [--seconds 20]
     [--requests N] [--threads 1] [--batching off on] [--soak MINUTES] [--sentences FILE]
     [--max-concurrent-requests N] [--payload-test] [--out bench/results/serve_load.jsonl]

Overload: `--clients 32 200 --max-concurrent-requests 64 --batching on` shows the bound at work: below
it (32 clients) every request is answered; above it (200) the service answers 429 (with Retry-After)
to what it cannot take at once, and the latency of the answered ones stays bounded. A 429 is counted
apart from errors (`refused_429`, with its own latency), and the client that got it waits the
Retry-After seconds before its next request, as a well-behaved client does.
`--payload-test`: after the levels, a 100 MB body to POST /translate, once with Content-Length and
once chunked, streamed in 1 MiB writes while the client watches for the answer: the time to the 413,
how much had been sent by then, and the server's RSS before and after (a line each).

The real server (`python -m interlingua.cli serve --port 0`, a child process in its own session) is
started once per batching mode and stopped with SIGTERM at the end, on errors and on Ctrl-C alike:
- batching "on":  `--max-wait-ms` (default 0, the service's default) and `--max-batch-texts 64`;
- batching "off": `--max-batch-texts 1`, every request is its own model call (one at a time, since
  the model runs in one worker thread); nothing else differs.
For POST /translate (greedy) and POST /embed (mean pooling), at each level of `--clients`, that many
client threads (http.client, one keep-alive connection each) send requests of ONE sentence each,
back to back, for `--seconds` or until `--requests` have been sent at that level, whichever comes
first. Sentences: `--sentences FILE` or Multi30k test_2016_flickr.<src>.gz, taken in turn. A request
is an error unless it gets a 200 with one translation / one vector (connection errors and timeouts
included); requests/s counts answered ones only, latency (nearest-rank p50/p95/p99) is per answered
request, measured in the client from sending to the last byte read. Each line also has the latency of
GET /health (no model call) on one keep-alive connection (`health_keepalive`): the floor that HTTP
and the event loop put under every latency.
After the levels of the last mode, `--soak MINUTES` runs 8 clients alternating translate and embed
and samples the server's RSS (/proc/<pid>/status VmRSS) every second.

The client runs on the same machine: its threads, JSON and HTTP parsing take CPU from the cores the
server uses (each line records the CPU seconds of both processes and the load average before it),
so these are loopback figures of one machine, not of the server alone. The server keeps uvicorn's
access log on (to a temporary file), as it runs by default.
One JSON line per (endpoint, clients, batching) and one for the soak go to --out.
"""
from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _results import append_result  # noqa: E402

from interlingua.cli import non_negative_float, positive_float, positive_int  # noqa: E402
from interlingua.data.corpus import read_lines  # noqa: E402

HOST = "127.0.0.1"
BATCHING_SETTINGS = {"on": {"max_batch_texts": 64}, "off": {"max_batch_texts": 1}}
CLIENT_NOTE = ("client on the same machine as the server: Python threads with http.client (one keep-alive "
               "connection each, one sentence per request); its CPU is taken from the server's cores")
SOAK_CLIENTS = 8


class Interrupted(KeyboardInterrupt):
    """SIGTERM to this script, turned into an exception so that the server is still stopped."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signal.Signals(signum).name}")
        self.signum = signum


def _stop_on_sigterm(signum: int, _: FrameType | None) -> None:
    raise Interrupted(signum)


# --- the server --------------------------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` so far (None once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (fields 14, 15)


def _status_mib(pid: int, key: str) -> float | None:
    """A memory line of /proc/<pid>/status (VmRSS, VmHWM) in MiB (None once the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return round(int(line.split()[1]) / 1024, 1)  # the file says kB
    except OSError:
        pass
    return None


@dataclass
class Server:
    """A running `interlingua serve` child process and where it listens."""

    process: subprocess.Popen
    port: int
    log: Path
    settings: dict

    def rss_mib(self) -> float | None:
        return _status_mib(self.process.pid, "VmRSS")

    def cpu_s(self) -> float | None:
        return _cpu_seconds(self.process.pid)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"


def _wait_for(condition, seconds: float, what: str, process: subprocess.Popen, log: Path):
    """Poll `condition` until it is true (returned) or `seconds` pass; fail early if the server exits."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if process.poll() is not None:
            raise RuntimeError(f"the server exited ({process.returncode}) before {what}; its log:\n"
                               + log.read_text(errors="replace")[-3000:])
        time.sleep(0.1)
    raise RuntimeError(f"no {what} after {seconds:g} s; server log:\n" + log.read_text(errors="replace")[-3000:])


def get_json(port: int, path: str, body: dict | None = None, timeout: float = 10.0) -> tuple[int, dict]:
    """One request outside the timed load (health, languages, warm-up): (status, parsed body)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        if body is None:
            conn.request("GET", path)
        else:
            conn.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


@contextmanager
def running_server(model: str, threads: int, max_wait_ms: float, max_batch_texts: int, startup_s: float,
                   stop_s: float, max_concurrent_requests: int | None = None) -> Iterator[Server]:
    """Start the real server on a free port (`--port 0`, read back from its 'serving ... on' line), wait
    for GET /health, and stop it with SIGTERM on the way out whatever happened (SIGKILL after `stop_s`)."""
    settings = {"max_wait_ms": max_wait_ms, "max_batch_texts": max_batch_texts, "threads": threads,
                "max_texts": 64, "max_chars": 2000, "host": HOST,
                "max_concurrent_requests": max_concurrent_requests or "default (512)"}
    log_fd, log_name = tempfile.mkstemp(prefix=f"serve_load_b{max_batch_texts}_", suffix=".log")
    log = Path(log_name)
    cmd = [sys.executable, "-m", "interlingua.cli", "serve", "--model", model, "--host", HOST, "--port", "0",
           "--threads", str(threads), "--max-wait-ms", f"{max_wait_ms:g}", "--max-batch-texts", str(max_batch_texts)]
    if max_concurrent_requests is not None:
        cmd += ["--max-concurrent-requests", str(max_concurrent_requests)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    # Own session: a Ctrl-C in the terminal reaches only this script, which then stops the server itself.
    process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=subprocess.STDOUT, env=env,
                               start_new_session=True)
    os.close(log_fd)
    failed = True
    try:
        found = _wait_for(lambda: re.search(r" on http://127\.0\.0\.1:(\d+) ", log.read_text(errors="replace")),
                          startup_s, "'serving ... on http://...' line", process, log)
        port = int(found.group(1))

        def healthy() -> bool:
            try:
                return get_json(port, "/health", timeout=2)[0] == 200
            except (OSError, http.client.HTTPException, ValueError):
                return False

        _wait_for(healthy, startup_s, "200 from GET /health", process, log)
        yield Server(process, port, log, settings)
        failed = False
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(stop_s)
            except subprocess.TimeoutExpired:
                print(f"server did not stop within {stop_s:g} s of SIGTERM; killing it", file=sys.stderr)
                process.kill()
                process.wait(10)
        if failed or process.returncode != 0:
            print(f"server exit code {process.returncode}; its log is kept: {log}", file=sys.stderr)
        else:
            log.unlink(missing_ok=True)


# --- the load --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One kind of request: endpoint, the prepared body for each sentence, the answer's list field."""

    name: str
    path: str
    bodies: tuple[bytes, ...]
    answer_field: str


@dataclass
class Tally:
    """What one endpoint got during a run: latencies of answered requests, errors by kind."""

    latencies_s: list[float] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)
    refused_s: list[float] = field(default_factory=list)
    """Latencies of 429 answers (over --max-concurrent-requests): refused, not failed."""


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile (no interpolation: always a latency that was measured)."""
    return sorted_values[max(0, math.ceil(p / 100 * len(sorted_values)) - 1)]


def summary(tally: Tally, seconds: float) -> dict:
    lat = sorted(tally.latencies_s)
    refused = sorted(tally.refused_s)
    ok, errors = len(lat), sum(tally.errors.values())
    out = {"rps": round(ok / seconds, 2) if seconds > 0 else None, "requests": ok + len(refused) + errors,
           "answered": ok, "refused_429": len(refused), "errors": errors, "error_kinds": dict(tally.errors)}
    for p in (50, 95, 99):
        out[f"p{p}_ms"] = round(1000 * percentile(lat, p), 1) if lat else None
    out["mean_ms"] = round(1000 * sum(lat) / ok, 1) if ok else None
    out["max_ms"] = round(1000 * lat[-1], 1) if lat else None
    out["refused_p50_ms"] = round(1000 * percentile(refused, 50), 1) if refused else None
    out["refused_p99_ms"] = round(1000 * percentile(refused, 99), 1) if refused else None
    return out


class Load:
    """`clients` threads sending `jobs` requests (ticket i: job i % len(jobs)) back to back until the
    deadline or `max_requests` tickets; every thread's request in flight at the deadline is finished."""

    def __init__(self, port: int, jobs: list[Job], clients: int, seconds: float, max_requests: int | None,
                 timeout_s: float):
        self.port, self.jobs, self.clients = port, jobs, clients
        self.seconds, self.max_requests, self.timeout_s = seconds, max_requests, timeout_s
        self.tallies = {job.name: Tally() for job in jobs}
        self._lock = threading.Lock()
        self._tickets = 0
        self._stop = threading.Event()
        self._t0 = self._deadline = 0.0
        # The clock starts when every client has connected; the barrier's action runs before any is released.
        self._start = threading.Barrier(clients + 1, action=self._begin)

    def _begin(self) -> None:
        self._t0 = time.perf_counter()
        self._deadline = self._t0 + self.seconds

    def _ticket(self) -> int | None:
        """The next request's number, or None when the run is over."""
        with self._lock:
            if self._stop.is_set() or time.perf_counter() >= self._deadline or \
                    (self.max_requests is not None and self._tickets >= self.max_requests):
                return None
            self._tickets += 1
            return self._tickets - 1

    def _client(self) -> None:
        conn: http.client.HTTPConnection | None = http.client.HTTPConnection(HOST, self.port, timeout=self.timeout_s)
        try:
            conn.connect()  # before the clock starts
        except OSError:
            conn = None  # retried below, counted as an error if it fails again
        try:
            self._start.wait()
        except threading.BrokenBarrierError:
            return
        headers = {"Content-Type": "application/json"}
        while (ticket := self._ticket()) is not None:
            job = self.jobs[ticket % len(self.jobs)]
            body = job.bodies[(ticket // len(self.jobs)) % len(job.bodies)]
            tally = self.tallies[job.name]
            t0 = time.perf_counter()
            retry_after = 0.0
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(HOST, self.port, timeout=self.timeout_s)
                conn.request("POST", job.path, body, headers)
                response = conn.getresponse()
                data = response.read()
                elapsed = time.perf_counter() - t0
                if response.status == 429:
                    error = "refused"
                    retry_after = float(response.getheader("Retry-After") or 1)
                elif response.status != 200:
                    error = f"HTTP {response.status}"
                else:
                    answer = json.loads(data).get(job.answer_field)
                    error = None if isinstance(answer, list) and len(answer) == 1 else f"not one {job.answer_field}"
            except Exception as err:  # refused, reset, timed out, not JSON...: all errors of this request
                error = type(err).__name__
                if conn is not None:
                    conn.close()
                conn = None  # a fresh connection for the next request
            with self._lock:
                if error is None:
                    tally.latencies_s.append(elapsed)
                elif error == "refused":
                    tally.refused_s.append(elapsed)
                else:
                    tally.errors[error] += 1
            if retry_after:  # as the answer asks, but not past the end of the run
                self._stop.wait(max(0.0, min(retry_after, self._deadline - time.perf_counter())))
        if conn is not None:
            conn.close()

    def run(self) -> float:
        """Run the load; the seconds from the common start until the last client finished."""
        threads = [threading.Thread(target=self._client, daemon=True, name=f"client-{i}") for i in range(self.clients)]
        for t in threads:
            t.start()
        try:
            self._start.wait(timeout=60)  # every client has connected
        except threading.BrokenBarrierError:
            raise RuntimeError("the client threads did not start") from None
        except BaseException:
            self._start.abort()
            raise
        t0 = self._t0
        try:
            hard_stop = t0 + self.seconds + self.timeout_s + 30  # bounded even if a request hangs
            for t in threads:
                while t.is_alive() and time.perf_counter() < hard_stop:
                    t.join(0.5)  # short joins keep Ctrl-C / SIGTERM responsive
        finally:
            self._stop.set()
        return time.perf_counter() - t0


def make_jobs(sentences: list[str], src: str, tgt: str) -> dict[str, Job]:
    """The prepared request bodies, so that the clients spend their time sending, not encoding."""
    def encode(body: dict) -> bytes:
        return json.dumps(body).encode()
    return {"translate": Job("translate", "/translate", tuple(encode({"texts": [s], "src": src, "tgt": tgt,
                                                                      "beam": 1}) for s in sentences),
                             "translations"),
            "embed": Job("embed", "/embed", tuple(encode({"texts": [s], "lang": src, "pooling": "mean"})
                                                  for s in sentences), "vectors")}


def warm_up(server: Server, jobs: dict[str, Job], n: int) -> None:
    """A few untimed requests per endpoint, so that the first model calls' one-off costs stay out."""
    for job in jobs.values():
        for i in range(n):
            status, body = get_json(server.port, job.path, json.loads(job.bodies[i % len(job.bodies)]), timeout=120)
            if status != 200:
                raise RuntimeError(f"warm-up {job.path} answered {status}: {body}")


def http_floor_ms(server: Server, n: int = 20) -> dict:
    """Latency of GET /health (no model call) sent `n` times back to back on one keep-alive connection:
    what HTTP and the event loop alone cost a request, the floor under every latency measured here."""
    conn = http.client.HTTPConnection(HOST, server.port, timeout=10)
    times = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            conn.request("GET", "/health")
            response = conn.getresponse()
            response.read()
            times.append(time.perf_counter() - t0)
            if response.status != 200:
                raise RuntimeError(f"GET /health answered {response.status}")
    finally:
        conn.close()
    times.sort()
    return {"p50_ms": round(1000 * percentile(times, 50), 1), "max_ms": round(1000 * times[-1], 1), "requests": n}


def measure(server: Server, jobs: list[Job], clients: int, seconds: float, max_requests: int | None,
            timeout_s: float) -> tuple[dict, dict[str, Tally], float]:
    """Run one load and return (context: CPU seconds, load average, RSS), the tallies and the seconds."""
    load_before = os.getloadavg()
    server_cpu0, client_cpu0 = server.cpu_s(), time.process_time()
    load = Load(server.port, jobs, clients, seconds, max_requests, timeout_s)
    elapsed = load.run()
    server_cpu1, client_cpu1 = server.cpu_s(), time.process_time()
    context = {"server_cpu_s": round(server_cpu1 - server_cpu0, 2) if None not in (server_cpu0, server_cpu1) else None,
               "client_cpu_s": round(client_cpu1 - client_cpu0, 2),
               "loadavg_1min_before": round(load_before[0], 2), "server_rss_mib_after": server.rss_mib()}
    if server.process.poll() is not None:
        raise RuntimeError(f"the server exited ({server.process.returncode}) during the load:\n{server.log_tail()}")
    return context, load.tallies, elapsed


def soak(server: Server, jobs: dict[str, Job], minutes: float,
         timeout_s: float) -> tuple[dict, dict[str, Tally], float]:
    """`SOAK_CLIENTS` clients alternating translate and embed for `minutes`, the server's RSS sampled each second."""
    samples: list[tuple[float, float]] = []
    done = threading.Event()

    def sample_rss() -> None:
        t0 = time.perf_counter()
        while not done.is_set():
            rss = server.rss_mib()
            if rss is not None:
                samples.append((time.perf_counter() - t0, rss))
            done.wait(1.0)

    rss_start = server.rss_mib()
    sampler = threading.Thread(target=sample_rss, daemon=True, name="rss-sampler")
    sampler.start()
    try:
        context, tallies, elapsed = measure(server, [jobs["translate"], jobs["embed"]], SOAK_CLIENTS, minutes * 60,
                                            None, timeout_s)
    finally:
        done.set()
        sampler.join(5)
    rss = [r for _, r in samples]
    per_minute = [next(r for t, r in samples if t >= 60 * m) for m in range(int(samples[-1][0] // 60) + 1)] \
        if samples else []  # the first sample of each minute, for the trend
    context.update({"rss_mib_start": rss_start, "rss_mib_end": server.rss_mib(),
                    "rss_mib_max_sampled": max(rss) if rss else None, "rss_samples": len(rss),
                    "rss_mib_each_minute": per_minute, "vmhwm_mib_end": _status_mib(server.process.pid, "VmHWM")})
    return context, tallies, elapsed


# --- a 100 MB body ------------------------------------------------------------------------------------

PAYLOAD_BYTES = 100 * 2**20
WRITE_BYTES = 2**20


def send_huge_body(server: Server, chunked: bool, timeout_s: float = 60.0) -> dict:
    """POST a PAYLOAD_BYTES body of spaces to /translate in WRITE_BYTES writes, watching after each for the
    answer; stop sending once it comes. The status, the time from the first byte sent to the answer's
    first byte, and the bytes sent by then."""
    head = (f"POST /translate HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
            + ("Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {PAYLOAD_BYTES}\r\n") + "\r\n")
    piece = b" " * WRITE_BYTES
    if chunked:
        piece = f"{WRITE_BYTES:x}\r\n".encode() + piece + b"\r\n"
    sock = socket.create_connection((HOST, server.port), timeout=timeout_s)
    sent = 0
    answer = b""
    t0 = time.perf_counter()
    first_byte = None
    try:
        sock.sendall(head.encode("ascii"))
        sock.setblocking(False)
        view = memoryview(piece)
        while sent < PAYLOAD_BYTES and not answer and time.perf_counter() - t0 < timeout_s:
            readable, writable, _ = select.select([sock], [sock], [], 1.0)
            if readable:
                answer = sock.recv(65536)
                first_byte = time.perf_counter()
                break
            if writable:
                written = sock.send(view[sent % len(piece):])
                sent += written
        sock.setblocking(True)
        if not answer:
            answer = sock.recv(65536)
            first_byte = time.perf_counter()
        while b"\r\n\r\n" not in answer and (more := sock.recv(65536)):
            answer += more
    except OSError as err:
        return {"status": None, "error": f"{type(err).__name__}: {err}", "sent_mib": round(sent / 2**20, 1)}
    finally:
        sock.close()
    status_line = answer.split(b"\r\n", 1)[0].decode("latin-1")
    return {"status": int(status_line.split()[1]) if status_line.startswith("HTTP/") else None,
            "time_to_answer_ms": round(1000 * (first_byte - t0), 1) if first_byte else None,
            "sent_mib_before_answer": round(sent / 2**20, 1), "answer_head": status_line}


def payload_test(server: Server) -> list[dict]:
    """The 100 MB body declared and chunked, with the server's RSS around each."""
    lines = []
    for chunked in (False, True):
        rss_before = server.rss_mib()
        result = send_huge_body(server, chunked)
        time.sleep(1.0)  # whatever the server took in has been dealt with
        healthy = get_json(server.port, "/health", timeout=10)[0] == 200
        lines.append({"endpoint": "payload: 100 MB body to /translate", "body": "chunked" if chunked else
                      "Content-Length", "body_mib": PAYLOAD_BYTES / 2**20, **result,
                      "server_rss_mib_before": rss_before, "server_rss_mib_after": server.rss_mib(),
                      "server_vmhwm_mib": _status_mib(server.process.pid, "VmHWM"), "health_after": healthy})
    return lines


# --- the command ---------------------------------------------------------------------------------------


def default_sentences(data: Path, lang: str) -> Path:
    return data / f"test_2016_flickr.{lang}.gz"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="checkpoint to serve (.pt)")
    ap.add_argument("--src", default=None, help="source language (translate from, embed); default: the first "
                                                "trained direction of GET /languages")
    ap.add_argument("--tgt", default=None, help="target language of /translate (default: see --src)")
    ap.add_argument("--sentences", default=None, metavar="FILE",
                    help="one sentence a line, plain or .gz (default: Multi30k test_2016_flickr.<src>.gz)")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "multi30k"),
                    help="folder of the default sentences")
    ap.add_argument("--endpoints", nargs="+", choices=["translate", "embed"], default=["translate", "embed"])
    ap.add_argument("--clients", nargs="+", type=positive_int, default=[1, 8, 32], help="concurrency levels")
    ap.add_argument("--seconds", type=positive_float, default=20.0, help="length of each level")
    ap.add_argument("--requests", type=positive_int, default=None, help="at most this many requests per level")
    ap.add_argument("--batching", nargs="+", choices=["on", "off"], default=["off", "on"],
                    help="server modes, in this order (the soak runs on the last)")
    ap.add_argument("--max-wait-ms", type=non_negative_float, default=0.0, help="the server's --max-wait-ms")
    ap.add_argument("--threads", type=positive_int, default=1,
                    help="the server's torch threads (default 1: on 2 cores the other is the client's)")
    ap.add_argument("--soak", type=non_negative_float, default=0.0, metavar="MINUTES",
                    help=f"after the levels, {SOAK_CLIENTS} clients mixing translate and embed this long (0: no soak)")
    ap.add_argument("--warmup", type=positive_int, default=5, help="untimed requests per endpoint after start-up")
    ap.add_argument("--max-concurrent-requests", type=positive_int, default=None,
                    help="the server's --max-concurrent-requests (default: the server's, 512); set it below the "
                         "largest --clients to see 429s")
    ap.add_argument("--payload-test", action="store_true",
                    help="after the levels of the last mode, send a 100 MB body (declared, then chunked): time to "
                         "the 413 and the server's RSS")
    ap.add_argument("--timeout", type=positive_float, default=60.0, help="seconds a client waits for one answer")
    ap.add_argument("--startup-timeout", type=positive_float, default=300.0,
                    help="seconds to wait for the server to load the model and answer /health")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "serve_load.jsonl"))
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C also where SIGINT came in ignored
    model = str(Path(args.model).resolve())
    if not Path(model).is_file():
        raise SystemExit(f"no checkpoint at {args.model}")
    modes = list(dict.fromkeys(args.batching))
    workload: tuple[list[str], str] | None = None
    for index, mode in enumerate(modes):
        max_batch_texts = BATCHING_SETTINGS[mode]["max_batch_texts"]
        print(f"starting the server (batching {mode}: --max-batch-texts {max_batch_texts})", file=sys.stderr)
        with running_server(model, args.threads, args.max_wait_ms, max_batch_texts, args.startup_timeout,
                            stop_s=45.0, max_concurrent_requests=args.max_concurrent_requests) as server:
            workload = workload or choose_workload(server, args)  # needs a server that answers /languages
            last = index == len(modes) - 1
            run_mode(server, mode, model, *workload, args, soak_too=args.soak > 0 and last,
                     payload_too=args.payload_test and last)


def choose_workload(server: Server, args: argparse.Namespace) -> tuple[list[str], str]:
    """Fill in --src / --tgt (the first trained direction) and read the sentences: (sentences, their file)."""
    if args.src is None or args.tgt is None:
        _, langs = get_json(server.port, "/languages")
        src, tgt = langs["trained"][0]
        args.src, args.tgt = args.src or src, args.tgt or tgt
    path = Path(args.sentences) if args.sentences else default_sentences(Path(args.data), args.src)
    sentences = [s for s in read_lines(path) if s.strip()]
    if not sentences:
        raise SystemExit(f"no sentences in {path}")
    return sentences, str(path)


def run_mode(server: Server, mode: str, model: str, sentences: list[str], sentences_from: str,
             args: argparse.Namespace, soak_too: bool, payload_too: bool = False) -> None:
    """Every endpoint at every level against one server, then the soak if `soak_too` and the 100 MB bodies
    if `payload_too`; a line each."""
    jobs = make_jobs(sentences, args.src, args.tgt)
    warm_up(server, jobs, args.warmup)
    common = {"bench": "serve_load", "batching": mode, "model": model, "torch_threads": args.threads,
              "server": {**server.settings, "access_log": True}, "health_keepalive": http_floor_ms(server),
              "src": args.src, "tgt": args.tgt, "beam": 1, "pooling": "mean", "texts_per_request": 1,
              "sentences_file": sentences_from, "distinct_sentences": len(sentences), "seconds_limit": args.seconds,
              "requests_limit": args.requests, "timeout_s": args.timeout, "cpu_count": os.cpu_count(),
              "client": CLIENT_NOTE}
    for endpoint in args.endpoints:
        for clients in dict.fromkeys(args.clients):
            context, tallies, elapsed = measure(server, [jobs[endpoint]], clients, args.seconds, args.requests,
                                                args.timeout)
            append_result(args.out, {**common, "endpoint": endpoint, "clients": clients, "seconds": round(elapsed, 2),
                                     **summary(tallies[endpoint], elapsed), **context})
    if soak_too:
        context, tallies, elapsed = soak(server, jobs, args.soak, args.timeout)
        total = Tally([t for tally in tallies.values() for t in tally.latencies_s],
                      sum((tally.errors for tally in tallies.values()), Counter()))
        append_result(args.out, {**common, "endpoint": "soak: translate + embed alternating", "clients": SOAK_CLIENTS,
                                 "soak_minutes": args.soak, "seconds_limit": args.soak * 60, "requests_limit": None,
                                 "seconds": round(elapsed, 2), **summary(total, elapsed),
                                 "by_endpoint": {name: summary(tally, elapsed) for name, tally in tallies.items()},
                                 **context})
    if payload_too:
        for line in payload_test(server):
            append_result(args.out, {"bench": "serve_load", "model": model, "server": common["server"],
                                     "cpu_count": os.cpu_count(), **line})

def run_main(main: Callable[[], None]) -> None:
    """Run a serving bench's `main` as a command: an interrupt or a server that failed is one line and an exit
    status, never a traceback."""
    try:
        main()
    except KeyboardInterrupt as err:  # Ctrl-C or SIGTERM: the server has been stopped on the way out
        print(f"interrupted{': ' + str(err) if str(err) else ''}; the server was stopped", file=sys.stderr)
        sys.exit(128 + getattr(err, "signum", signal.SIGINT))
    except RuntimeError as err:  # the server did not start, died, or answered a warm-up with an error
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    run_main(main)
