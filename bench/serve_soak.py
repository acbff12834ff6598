"""Load and fault soak of `interlingua serve` over loopback: many clients on mixed endpoints for minutes,
one client walking away mid-request every second, SIGTERM at the end with requests in flight.

Run: python bench/serve_soak.py [--minutes 10] [--clients 200] [--model CHECKPOINT]
     [--threads 1] [--window 30] [--max-concurrent-requests N] [--note TEXT] [--out bench/results/serve_soak.jsonl]

Model: `--model`, or one trained here once and reused by later runs: `interlingua train
recipes/multi30k/cpu/bilingual_en_de.yaml --set train.max_steps=2000` into `--train-dir`
(runs/bench/serve_soak_en_de; about 8 minutes on one busy core, dev BLEU 20), Multi30k copied first from
../shared/data/multi30k (`interlingua data multi30k --from`) where data/multi30k is missing. Trained
that far its translations are about as long as their sources, so beam search decodes whole sentences;
the summary records the words of the greedy references against their sources' (`reference_output_length`).

Server: the real `interlingua serve --port 0` in a child process (`serve_load.running_server`), with the
service's defaults but `--threads` (and `--max-concurrent-requests` when given).

Requests: a pool of distinct requests over Multi30k test sentences, `--distinct` per kind (MIX): /translate
greedy, beam 5 (one to four texts, `beam_stop` all and top) and the service's largest beam (read from its
/openapi.json) on long sentences, alone and four at once; /embed mean and heads; /v1/embeddings with and
without `language`; /attention; /similarity; GET /health, /languages, /model. Each is sent once, alone,
before the load; that answer is its reference. Under load an answer is right when it equals its
reference (texts and integers exactly, numbers within 1e-3).

Clients: `--clients` keep-alive connections in one asyncio loop of this process (raw HTTP/1.1, one socket
each), each drawing requests from the pool (seeded, weighted by MIX) back to back. A 429 (only above the
admission bound, `--max-concurrent-requests`) is counted apart and its client waits Retry-After. Every
other outcome but a right 200 is an error: another status (5xx, 503 past the request timeout, any 4xx), a
wrong answer, a reset or closed connection, a client timeout (`--timeout`).

Faults: once a second a connection of its own sends a heavy request (/translate, the largest beam, four long
sentences) and walks away, in turn after half of the head, after half of the body, and after the whole
request (within 0-5 s: while it waits for the model or is being decoded); each of the three every other
time with a reset (SO_LINGER 0) instead of a FIN. These requests are counted as disconnects, not as requests.

Windows: every `--window` seconds (30) one line: requests finished in the window, answered, 429s, errors by
kind, latency percentiles of the answered ones, disconnects, the server's VmRSS / VmHWM (/proc/<pid>/status)
and CPU seconds, the load average.

The end: after `--minutes`, in one step of the event loop, the clients stop sending and the server gets
SIGTERM. Every request written before it (in flight) must get a complete, right answer; the server must
exit 0 and its log hold no "Traceback". The summary line: totals, RSS growth from the end of the first
minute (to the last window, to the largest, and the least-squares trend in MiB a minute), the SIGTERM
outcome, and each target met or missed (RSS: the last window against the end of the first minute).

The clients run on the same machine and take CPU from the server's cores, so latencies are loopback figures
of one machine; each line records the load average, and `note` the cores and the load before the start.
"""
from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import append_result  # noqa: E402
from serve_load import HOST, Server, Tally, _status_mib, _stop_on_sigterm, get_json, run_main, running_server, summary  # noqa: E402

from interlingua.cli import positive_float, positive_int  # noqa: E402
from interlingua.data.corpus import read_lines  # noqa: E402
from interlingua.records import read_records, validations  # noqa: E402

RECIPE = "recipes/multi30k/cpu/bilingual_en_de.yaml"
TRAIN_STEPS = 2000
TOLERANCE = 1e-3
"""How far a number of an answer under load may be from its reference (batched with others vs alone)."""
GRACEFUL_S = 30.0
"""What the service gives requests in flight after SIGTERM (`serve(graceful_timeout_s=...)`)."""
LONG_WORDS = 15
"""Sentences of at least this many words are the 'long' ones of the heavy requests."""

MIX = {  # kind: weight (how often a client picks it)
    "translate_greedy": 20, "translate_beam5": 15, "translate_beam5_top": 5, "translate_beam_max": 10,
    "translate_beam_max_x4": 5, "embed_mean": 12, "embed_heads": 5, "v1_embeddings": 5,
    "v1_embeddings_langid": 4, "attention": 4, "similarity": 4, "get_health": 2, "get_languages": 2,
    "get_model": 2,
}
DISCONNECT_MODES = ("head", "body", "sent")
"""Where the walking-away client stops: half of the head, half of the body, after the whole request."""
SENT_WAIT_S = 5.0
"""How long at most it waits for the answer to a whole request before walking away."""


# --- the pool of requests ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One distinct request: its kind, the bytes sent, and its answer when sent alone (the reference), as
    parsed and as it came (most answers under load are byte for byte the same, and cheaper to compare so)."""

    kind: str
    method: str
    path: str
    body: dict | None
    wire: bytes
    reference: object
    reference_bytes: bytes

    def right(self, answer: bytes) -> bool:
        return answer == self.reference_bytes or same(json.loads(answer), self.reference)


def http_request(method: str, path: str, body: dict | None) -> bytes:
    """A whole HTTP/1.1 request (keep-alive, the default) as bytes."""
    data = b"" if body is None else json.dumps(body).encode()
    head = f"{method} {path} HTTP/1.1\r\nHost: {HOST}\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    return (head + "\r\n").encode("ascii") + data


def build_bodies(kind: str, rng: random.Random, sentences: dict[str, list[str]], src: str, tgt: str,
                 beam_max: int) -> tuple[str, str, dict | None]:
    """(method, path, body) of one request of `kind`; `sentences` per language the model reads."""
    texts = sentences[src]
    long = [s for s in texts if len(s.split()) >= LONG_WORDS] or texts

    def some(n: int, pool: list[str] = texts) -> list[str]:
        return rng.sample(pool, n)

    langs = sorted(sentences)
    if kind == "translate_greedy":
        return "POST", "/translate", {"texts": some(1), "src": src, "tgt": tgt, "beam": 1}
    if kind == "translate_beam5":
        return "POST", "/translate", {"texts": some(rng.randint(1, 4)), "src": src, "tgt": tgt, "beam": 5}
    if kind == "translate_beam5_top":
        return "POST", "/translate", {"texts": some(2), "src": src, "tgt": tgt, "beam": 5, "beam_stop": "top"}
    if kind == "translate_beam_max":
        return "POST", "/translate", {"texts": some(1, long), "src": src, "tgt": tgt, "beam": beam_max}
    if kind == "translate_beam_max_x4":
        return "POST", "/translate", {"texts": some(4, long), "src": src, "tgt": tgt, "beam": beam_max}
    if kind == "embed_mean":
        lang = rng.choice(langs)
        return "POST", "/embed", {"texts": rng.sample(sentences[lang], rng.randint(1, 8)), "lang": lang}
    if kind == "embed_heads":
        lang = rng.choice(langs)
        return "POST", "/embed", {"texts": rng.sample(sentences[lang], rng.randint(1, 2)), "lang": lang,
                                  "pooling": "heads"}
    if kind == "v1_embeddings":
        lang = rng.choice(langs)
        return "POST", "/v1/embeddings", {"input": rng.sample(sentences[lang], rng.randint(1, 4)),
                                          "model": "interlingua", "language": lang}
    if kind == "v1_embeddings_langid":
        lang = rng.choice(langs)
        return "POST", "/v1/embeddings", {"input": rng.sample(sentences[lang], 2), "model": "interlingua"}
    if kind == "attention":
        lang = rng.choice(langs)
        return "POST", "/attention", {"text": rng.choice(sentences[lang]), "lang": lang}
    if kind == "similarity":
        chosen = [rng.choice(langs) for _ in range(3)]
        return "POST", "/similarity", {"texts": [rng.choice(sentences[lang]) for lang in chosen], "langs": chosen}
    if kind.startswith("get_"):
        return "GET", "/" + kind[len("get_"):], None
    raise ValueError(f"unknown kind {kind}")


def make_pool(port: int, sentences: dict[str, list[str]], src: str, tgt: str, beam_max: int, distinct: int,
              seed: int) -> dict[str, list[Entry]]:
    """`distinct` requests per kind of MIX (one for the GETs), each answered once, alone: its reference."""
    rng = random.Random(seed)
    pool: dict[str, list[Entry]] = {}
    for kind in MIX:
        entries = []
        for _ in range(1 if kind.startswith("get_") else distinct):
            method, path, body = build_bodies(kind, rng, sentences, src, tgt, beam_max)
            conn = http.client.HTTPConnection(HOST, port, timeout=300)
            try:
                conn.request(method, path, None if body is None else json.dumps(body).encode(),
                             {"Content-Type": "application/json"})
                response = conn.getresponse()
                answer = response.read()
            finally:
                conn.close()
            if response.status != 200:
                raise RuntimeError(f"{kind}: {path} answered {response.status} when sent alone: {answer[:500]!r}")
            entries.append(Entry(kind, method, path, body, http_request(method, path, body), json.loads(answer),
                                 answer))
        pool[kind] = entries
    return pool


def same(answer: object, reference: object, tol: float = TOLERANCE) -> bool:
    """Whether an answer equals its reference: the same structure, texts, integers and booleans, and
    every other number within `tol`."""
    if isinstance(reference, dict):
        return isinstance(answer, dict) and answer.keys() == reference.keys() and \
            all(same(answer[k], reference[k], tol) for k in reference)
    if isinstance(reference, list):
        return isinstance(answer, list) and len(answer) == len(reference) and \
            all(same(a, r, tol) for a, r in zip(answer, reference))
    if isinstance(reference, float) and not isinstance(answer, bool) and isinstance(answer, int | float):
        return abs(answer - reference) <= tol
    return type(answer) is type(reference) and answer == reference


def output_length(pool: dict[str, list[Entry]]) -> dict:
    """Words of the greedy references' translations against their sources' words: trained enough?"""
    src = out = 0
    for entry in pool["translate_greedy"]:
        src += sum(len(t.split()) for t in entry.body["texts"])
        out += sum(len(t.split()) for t in entry.reference["translations"])
    return {"source_words": src, "translation_words": out, "ratio": round(out / src, 3) if src else None}


# --- the accounting ------------------------------------------------------------------------------------


@dataclass
class Window:
    """What finished in one window of time: the requests (as serve_load's Tally) and the disconnects."""

    tally: Tally = field(default_factory=Tally)
    kinds: Counter = field(default_factory=Counter)
    disconnects: Counter = field(default_factory=Counter)

    def add(self, kind: str, outcome: str | None, latency_s: float) -> None:
        """One finished request: `outcome` None (a right answer), "429", or the error's name."""
        self.kinds[kind] += 1
        if outcome is None:
            self.tally.latencies_s.append(latency_s)
        elif outcome == "429":
            self.tally.refused_s.append(latency_s)
        else:
            self.tally.errors[outcome] += 1


def window_line(index: int, window: Window, seconds: float, sample: dict) -> dict:
    """The JSON line of window `index` (`seconds` long) with the server's `sample` taken at its end."""
    stats = summary(window.tally, seconds)
    stats.pop("mean_ms")
    return {"bench": "serve_soak", "line": "window", "window": index, "t_end_s": round((index + 1) * seconds, 1),
            **stats, "requests_by_kind": dict(sorted(window.kinds.items())),
            "disconnects": sum(window.disconnects.values()), "disconnects_by_mode": dict(window.disconnects),
            **sample}


def rss_growth(samples: list[tuple[float, float]], after_s: float = 60.0) -> dict:
    """RSS growth from the first sample at or after `after_s` (t, MiB) to the last one and to the largest
    later one, in percent, and the least-squares slope of the later samples (MiB a minute: the trend
    under the samples' ups and downs); None where the run was too short to have a later sample."""
    later = [(t, rss) for t, rss in samples if t >= after_s]
    if len(later) < 2:
        return {"rss_mib_at_1min": later[0][1] if later else None, "rss_mib_last": samples[-1][1] if samples else None,
                "rss_growth_pct": None, "rss_growth_max_pct": None, "rss_trend_mib_per_min": None}
    base = later[0][1]
    mean_t = sum(t for t, _ in later) / len(later)
    mean_rss = sum(r for _, r in later) / len(later)
    slope = sum((t - mean_t) * (r - mean_rss) for t, r in later) / sum((t - mean_t) ** 2 for t, _ in later)
    return {"rss_mib_at_1min": base, "rss_mib_last": later[-1][1], "rss_mib_max": max(r for _, r in later),
            "rss_growth_pct": round(100 * (later[-1][1] - base) / base, 2),
            "rss_growth_max_pct": round(100 * (max(r for _, r in later) - base) / base, 2),
            "rss_trend_mib_per_min": round(60 * slope, 2)}


# --- the load --------------------------------------------------------------------------------------------


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response: (status, lower-cased headers, body); the body by Content-Length or chunks."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    status = int(head[0].split()[1])
    headers = {}
    for line in head[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        return status, headers, await reader.readexactly(int(headers["content-length"]))
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            body += (await reader.readexactly(size + 2))[:-2]
        await reader.readuntil(b"\r\n")
        return status, headers, body
    return status, headers, await reader.read()


class Soak:
    """The clients, the walking-away client and the sampler, in one event loop against one server."""

    def __init__(self, server: Server, pool: dict[str, list[Entry]], clients: int, seconds: float, window_s: float,
                 timeout_s: float, seed: int, out: str | None, common: dict):
        self.server, self.pool, self.clients = server, pool, clients
        self.seconds, self.window_s, self.timeout_s, self.seed = seconds, window_s, timeout_s, seed
        self.out, self.common = out, common
        self.kinds, self.weights = list(pool), [MIX[k] for k in pool]
        self.windows: dict[int, Window] = {}
        self.n_windows = max(1, round(seconds / window_s))
        self.total = Tally()  # every window's requests
        self.drain = Window()  # requests in flight at SIGTERM
        self.stopping = False
        self.in_flight: set[int] = set()
        self.at_sigterm: set[int] = set()
        self.next_id = 0
        self.t0 = 0.0
        self._cpu: float | None = None
        self.rss_samples: list[tuple[float, float]] = []
        self.lines: list[dict] = []

    def _window(self, now: float) -> Window:
        """The window of a request finished at `now` (the last one until SIGTERM)."""
        index = min(int((now - self.t0) // self.window_s), self.n_windows - 1)
        return self.windows.setdefault(index, Window())

    def _finish(self, request_id: int, kind: str, outcome: str | None, latency_s: float) -> None:
        self.in_flight.discard(request_id)
        if request_id in self.at_sigterm:
            self.drain.add(kind, outcome, latency_s)
        else:
            self._window(time.perf_counter()).add(kind, outcome, latency_s)

    async def client(self, index: int) -> None:
        rng = random.Random(self.seed * 100_003 + index)
        reader: asyncio.StreamReader | None = None
        writer: asyncio.StreamWriter | None = None
        while not self.stopping:
            entry = rng.choice(self.pool[rng.choices(self.kinds, self.weights)[0]])
            if writer is None:
                try:
                    reader, writer = await asyncio.open_connection(HOST, self.server.port)
                except OSError as err:
                    self._window(time.perf_counter()).add(entry.kind, f"connect: {type(err).__name__}", 0.0)
                    await asyncio.sleep(0.1)
                    continue
                if self.stopping:
                    break
            # No await between the check of `stopping` and the write: a request is either written before
            # SIGTERM (and so in flight) or never.
            request_id, self.next_id = self.next_id, self.next_id + 1
            t0 = time.perf_counter()
            writer.write(entry.wire)
            self.in_flight.add(request_id)
            outcome, retry_after, close = None, 0.0, False
            try:
                status, headers, data = await asyncio.wait_for(read_response(reader), self.timeout_s)
                close = headers.get("connection", "").lower() == "close"
                if status == 429:
                    outcome, retry_after = "429", float(headers.get("retry-after") or 1)
                elif status != 200:
                    outcome = f"HTTP {status}"
                elif not entry.right(data):
                    outcome = f"wrong answer: {entry.kind}"
            except asyncio.TimeoutError:
                outcome, close = "client timeout", True
            except asyncio.IncompleteReadError as err:
                outcome, close = ("closed before the answer" if not err.partial else "answer cut short"), True
            except Exception as err:  # reset, refused, not JSON, not HTTP...: an error of this request
                outcome, close = type(err).__name__, True
            self._finish(request_id, entry.kind, outcome, time.perf_counter() - t0)
            if close:
                writer.close()
                reader = writer = None
            if retry_after and not self.stopping:
                await asyncio.sleep(min(retry_after, max(0.0, self.t0 + self.seconds - time.perf_counter())))
        if writer is not None:
            writer.close()

    async def walk_away(self, number: int) -> None:
        """Disconnect number `number`: a heavy request abandoned at DISCONNECT_MODES[number % 3], with a
        reset every other time."""
        mode = DISCONNECT_MODES[number % len(DISCONNECT_MODES)]
        reset = (number // len(DISCONNECT_MODES)) % 2 == 1
        wire = self.pool["translate_beam_max_x4"][number % len(self.pool["translate_beam_max_x4"])].wire
        head_end = wire.index(b"\r\n\r\n") + 4
        cut = {"head": head_end // 2, "body": head_end + (len(wire) - head_end) // 2, "sent": len(wire)}[mode]
        name = f"{mode}, {'reset' if reset else 'closed'}"
        try:
            reader, writer = await asyncio.open_connection(HOST, self.server.port)
            writer.write(wire[:cut])
            await writer.drain()
            if mode == "sent":
                await asyncio.sleep(random.Random(number).uniform(0.0, SENT_WAIT_S))
            if reset:
                writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                           struct.pack("ii", 1, 0))
            writer.close()
        except OSError as err:
            self._window(time.perf_counter()).add("disconnect", f"disconnecting client: {type(err).__name__}", 0.0)
            return
        self._window(time.perf_counter()).disconnects[name] += 1

    async def walker(self) -> None:
        """Once a second, a client that walks away mid-request (each in a task of its own)."""
        tasks = set()
        number = 0
        while not self.stopping:
            task = asyncio.create_task(self.walk_away(number))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            number += 1
            await asyncio.sleep(max(0.0, self.t0 + number - time.perf_counter()))
        if tasks:
            await asyncio.wait(tasks)

    def sample(self) -> dict:
        """The server's memory and CPU seconds (since the last sample), the load, requests in flight."""
        cpu = self.server.cpu_s()
        cpu_s = None if cpu is None or self._cpu is None else round(cpu - self._cpu, 2)
        self._cpu = cpu
        return {"rss_mib": self.server.rss_mib(), "vmhwm_mib": _status_mib(self.server.process.pid, "VmHWM"),
                "server_cpu_s": cpu_s, "loadavg_1min": round(os.getloadavg()[0], 2), "in_flight": len(self.in_flight)}

    def close_window(self, index: int) -> None:
        """Sample the server and write window `index`'s line."""
        sample = self.sample()
        if sample["rss_mib"] is not None:
            self.rss_samples.append(((index + 1) * self.window_s, sample["rss_mib"]))
        window = self.windows.pop(index, Window())
        self.total.latencies_s += window.tally.latencies_s
        self.total.refused_s += window.tally.refused_s
        self.total.errors.update(window.tally.errors)
        line = window_line(index, window, self.window_s, sample)
        self.lines.append(line)
        append_result(self.out, {**self.common, **line})

    async def run(self) -> dict:
        """The load for `seconds`, a line per window, then SIGTERM: what happened to the requests in flight."""
        self.t0 = time.perf_counter()
        self._cpu = self.server.cpu_s()
        clients = [asyncio.create_task(self.client(i)) for i in range(self.clients)]
        walker = asyncio.create_task(self.walker())
        for index in range(self.n_windows):
            await asyncio.sleep(max(0.0, self.t0 + (index + 1) * self.window_s - time.perf_counter()))
            if self.server.process.poll() is not None:
                raise RuntimeError(f"the server exited ({self.server.process.returncode}) during the load:\n"
                                   + self.server.log_tail())
            self.close_window(index)
        # The end, in the same step of the loop as the last window's sample (no client can write in
        # between): stop sending, note what is in flight, SIGTERM.
        self.stopping = True
        self.at_sigterm = set(self.in_flight)
        self.server.process.send_signal(signal.SIGTERM)
        t_sigterm = time.perf_counter()
        done, pending = await asyncio.wait(clients, timeout=GRACEFUL_S + self.timeout_s)
        for task in pending:
            task.cancel()
        await walker
        unanswered = len(self.at_sigterm & self.in_flight)
        loop = asyncio.get_running_loop()
        try:
            exit_code = await loop.run_in_executor(None, self.server.process.wait, GRACEFUL_S + 30)
        except subprocess.TimeoutExpired:
            exit_code = None
        exit_s = round(time.perf_counter() - t_sigterm, 2)
        drain = summary(self.drain.tally, 1.0)
        return {"in_flight": len(self.at_sigterm), "answered_right": drain["answered"],
                "refused_429": drain["refused_429"], "errors": drain["errors"], "error_kinds": drain["error_kinds"],
                "no_answer_in_time": unanswered, "last_answer_p99_ms": drain["p99_ms"], "max_ms": drain["max_ms"],
                "server_exit_code": exit_code, "server_exit_s": exit_s}


# --- the model --------------------------------------------------------------------------------------------


def trained_model(train_dir: Path, steps: int) -> tuple[Path, dict]:
    """The checkpoint this bench serves when no --model is given: trained here the first time."""
    best = train_dir / "best.pt"
    info = {"recipe": RECIPE, "train_dir": str(train_dir), "max_steps": steps}
    if best.is_file():
        return best, {**info, **training_facts(train_dir), "trained_now": False}
    if not (ROOT / "data" / "multi30k" / "corpus.yaml").is_file():
        subprocess.run([sys.executable, "-m", "interlingua.cli", "data", "multi30k", "--from",
                        str(ROOT.parent / "shared" / "data" / "multi30k"), "--dest", str(ROOT / "data" / "multi30k")],
                       cwd=ROOT, check=True)
    print(f"training the model to serve ({steps} steps of {RECIPE}) into {train_dir}", file=sys.stderr)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "interlingua.cli", "train", RECIPE, "--set", f"work_dir={train_dir}",
                    "--set", f"train.max_steps={steps}", "--set", f"train.valid_every={max(1, steps // 2)}"],
                   cwd=ROOT, check=True)
    if not best.is_file():
        raise RuntimeError(f"training ended without {best}")
    return best, {**info, **training_facts(train_dir), "trained_now": True,
                  "train_wall_s": round(time.perf_counter() - t0, 1)}


def training_facts(train_dir: Path) -> dict:
    """The last step and the last validation of a run's metrics.jsonl."""
    facts: dict = {}
    try:
        records = read_records(train_dir / "metrics.jsonl")
        if steps := [r["step"] for r in records if "step" in r]:
            facts["steps_trained"] = steps[-1]
        if found := validations(records):
            last = found[-1]
            facts["last_validation"] = {"step": last.step, "mean_bleu": last.mean_bleu, "mean_loss": last.mean_loss}
    except (OSError, ValueError):
        pass
    return facts


# --- the command ----------------------------------------------------------------------------------------


def service_beam_max(port: int) -> int:
    """The largest beam POST /translate takes, from the service's own /openapi.json."""
    _, schema = get_json(port, "/openapi.json")
    return int(schema["components"]["schemas"]["TranslateRequest"]["properties"]["beam"]["maximum"])


def read_sentences(data: Path, langs: list[str]) -> dict[str, list[str]]:
    """Multi30k test sentences of each language the model reads (where the file exists)."""
    out = {}
    for lang in langs:
        path = data / f"test_2016_flickr.{lang}.gz"
        if path.is_file():
            out[lang] = [s for s in read_lines(path) if s.strip()]
    return out


def log_findings(log: str) -> dict:
    """Tracebacks and WARNING / ERROR lines of the server's log (the first few distinct ones)."""
    flagged = [line for line in log.splitlines() if re.match(r"\s*(WARNING|ERROR|CRITICAL)\b", line)]
    return {"tracebacks": log.count("Traceback"), "warning_or_error_lines": len(flagged),
            "first_warnings": list(dict.fromkeys(flagged))[:5]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=positive_float, default=10.0, help="length of the load (default 10)")
    ap.add_argument("--clients", type=positive_int, default=200, help="concurrent keep-alive clients (default 200)")
    ap.add_argument("--model", default=None, help="checkpoint to serve (default: train one, see --train-dir)")
    ap.add_argument("--train-dir", default=str(ROOT / "runs" / "bench" / "serve_soak_en_de"),
                    help="where the model is trained when no --model is given (reused when it holds best.pt)")
    ap.add_argument("--train-steps", type=positive_int, default=TRAIN_STEPS)
    ap.add_argument("--data", default=str(ROOT / "data" / "multi30k"), help="folder of test_2016_flickr.<lang>.gz")
    ap.add_argument("--threads", type=positive_int, default=1, help="the server's torch threads")
    ap.add_argument("--max-concurrent-requests", type=positive_int, default=None,
                    help="the server's admission bound (default: the service's, 512)")
    ap.add_argument("--window", type=positive_float, default=30.0, help="seconds per result line (default 30)")
    ap.add_argument("--distinct", type=positive_int, default=16, help="distinct requests per kind")
    ap.add_argument("--timeout", type=positive_float, default=180.0, help="seconds a client waits for one answer")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--note", default="", help="added to the record's note (which states cores and load)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "serve_soak.jsonl"))
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)

    if args.model:
        model, model_info = Path(args.model).resolve(), {}
        if not model.is_file():
            raise SystemExit(f"no checkpoint at {args.model}")
    else:
        model, model_info = trained_model(Path(args.train_dir).resolve(), args.train_steps)
    load_before = os.getloadavg()
    with running_server(str(model), args.threads, 0.0, 64, startup_s=300.0, stop_s=GRACEFUL_S + 15,
                        max_concurrent_requests=args.max_concurrent_requests) as server:
        _, langs = get_json(server.port, "/languages")
        src, tgt = next((pair for pair in langs["trained"] if pair[0] != pair[1]), langs["trained"][0])
        sentences = read_sentences(Path(args.data), langs["languages"])
        if src not in sentences:
            raise SystemExit(f"no test_2016_flickr.{src}.gz in {args.data}")
        beam_max = service_beam_max(server.port)
        t0 = time.perf_counter()
        pool = make_pool(server.port, sentences, src, tgt, beam_max, args.distinct, args.seed)
        bound = args.max_concurrent_requests or 512
        common = {"bench": "serve_soak", "model": str(model), "clients": args.clients, "minutes": args.minutes,
                  "admission_bound": bound}
        print(f"{sum(map(len, pool.values()))} distinct requests answered alone in "
              f"{time.perf_counter() - t0:.0f} s; {args.clients} clients for {args.minutes:g} min", file=sys.stderr)
        soak = Soak(server, pool, args.clients, args.minutes * 60, args.window, args.timeout, args.seed, args.out,
                    common)
        client_cpu = time.process_time()
        sigterm = asyncio.run(soak.run())
        client_cpu = round(time.process_time() - client_cpu, 1)
        log = server.log.read_text(errors="replace")
        findings = log_findings(log)
        if findings["tracebacks"] or sigterm["server_exit_code"] != 0:
            kept = Path(tempfile.gettempdir()) / f"serve_soak_{time.strftime('%Y%m%d_%H%M%S')}.log"
            shutil.copyfile(server.log, kept)
            findings["log_kept"] = str(kept)
    totals = {**summary(soak.total, args.minutes * 60), **window_spread(soak.lines)}
    totals.pop("mean_ms")
    growth = rss_growth(soak.rss_samples)
    below_bound = args.clients < bound
    note = (f"{os.cpu_count()} CPU cores shared by server, clients and other processes; 1-min load average "
            f"{load_before[0]:.2f} before the start" + (f"; {args.note}" if args.note else ""))
    targets = {
        "no_errors_below_bound": (totals["errors"] == 0) if below_bound else None,
        "rss_flat_under_5pct": None if growth["rss_growth_pct"] is None else growth["rss_growth_pct"] < 5,
        "every_in_flight_answered_at_sigterm": sigterm["answered_right"] + sigterm["refused_429"]
        == sigterm["in_flight"],
        "server_exit_0_without_traceback": sigterm["server_exit_code"] == 0 and findings["tracebacks"] == 0,
    }
    append_result(args.out, {
        **common, "line": "summary", "note": note, "server": server.settings, "model_training": model_info,
        "src": src, "tgt": tgt, "beam_max": beam_max, "mix": MIX, "distinct_per_kind": args.distinct,
        "reference_output_length": output_length(pool), "window_s": args.window, "timeout_s": args.timeout,
        "cpu_count": os.cpu_count(), "loadavg_before": [round(x, 2) for x in load_before], **totals,
        "client_cpu_s": client_cpu, "server_cpu_s": round(sum(line["server_cpu_s"] or 0 for line in soak.lines), 1),
        **growth,
        "sigterm": sigterm, "server_log": findings, "targets": targets})


def window_spread(lines: list[dict]) -> dict:
    """Disconnects added up over the windows, and the lowest and highest of their p50 and p99."""
    out: dict = {"disconnects": sum(line["disconnects"] for line in lines)}
    for key in ("p50_ms", "p99_ms"):
        values = [line[key] for line in lines if line[key] is not None]
        out[f"{key}_windows_min_max"] = [min(values), max(values)] if values else None
    return out


if __name__ == "__main__":
    run_main(main)
