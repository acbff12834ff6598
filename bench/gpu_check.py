"""Everything a few minutes on a GPU can show about the CUDA paths, as one command (`scripts/gpu-check.sh`).

In order, each step timed, each failure recorded (with its traceback's end) without stopping the rest:

1. `cuda_tests`: the tests marked `cuda` (tests/test_cuda.py) in a child pytest, skips counted as failures
   (CI=true); on the CPU (`--device cpu`) only collected, since they need a GPU.
2. `training`: the LSTM bridge and the shared Transformer, each in every precision (fp32, bf16, fp16 with
   its gradient scaler; the CPU has no fp16): a short run; the same run again (the yardstick of the
   device's own non-determinism); and the same run stopped by Ctrl-C inside a step's passes, then
   resumed. The resumed and repeated runs' weights are compared with the first's: bit-identical, or the
   largest difference. Training tokens/s (median of the log windows after the first) and peak GPU
   memory of each. Then the paper-size Transformer of recipes/multi30k/gpu/ (d_model 512, 5 + 5
   layers, 24,576-token batches) for a few steps per precision: tokens/s and peak memory.
3. `distributed`: `torchrun --standalone --nproc-per-node 1` of this file's worker, which joins a
   process group of its own (nccl on a GPU, gloo on the CPU: torchrun alone starts no group for one
   process) and trains the Transformer with contrastive agreement, whose all_gather is differentiable;
   its weights against the same run in one process.
4. `inference`: translation (greedy and beam 5) and sentence-embedding throughput of step 2's fp32
   models loaded in each precision, against fp32: sentences/s, the share of identical translations,
   the lowest cosine of the vectors, peak memory.
5. `summary.json` (environment, every step's result, time and error) and `summary.md` (the tables).

All of it goes to `--out` (at most 8 files: summary.json, summary.md, pytest.log, train.log,
metrics.jsonl and the shell's install.log, each cut to 16 MiB). `--tiny` runs the same code with tiny
models and corpora, in seconds on a CPU (`--device cpu --tiny`, in tests/test_gpu_scripts.py). Steps
that would start after `--budget-s` (counted from `GPU_T0`, the shell's start) are recorded as
not run.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import json
import logging
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MAX_FILE_BYTES = 16 * 2**20

# The two kinds of step 2: the LSTM bridge of recipes/multi30k/cpu/m2m.yaml and the shared Transformer of
# recipes/multi30k/cpu/zero_shot_converged/baseline.yaml (with the agreement of step 3 off).
LSTM_BRIDGE = {"embed_dim": 256, "encoder": {"type": "bilstm", "hidden": 256, "layers": 1},
               "bridge": {"type": "attention", "heads": 10, "hidden": 256},
               "decoder": {"type": "lstm", "hidden": 256, "layers": 1}, "dropout": 0.2}
TRANSFORMER = {"embed_dim": 128, "shared": True, "tag_position": "decoder_start", "bridge": {"type": "none"},
               "encoder": {"type": "transformer", "layers": 5, "heads": 4, "ff_dim": 512, "attention_dropout": 0.2,
                           "word_dropout": 0.1},
               "decoder": {"type": "transformer", "layers": 2, "heads": 4, "ff_dim": 512, "tie_embeddings": True,
                           "attention_dropout": 0.2, "word_dropout": 0.1, "language_embedding": "concat"},
               "dropout": 0.2}
PAPER_TRANSFORMER = {**TRANSFORMER, "embed_dim": 512,
                     "encoder": {**TRANSFORMER["encoder"], "heads": 8, "ff_dim": 2048},
                     "decoder": {**TRANSFORMER["decoder"], "layers": 5, "heads": 8, "ff_dim": 2048}}


@dataclass(frozen=True)
class Sizes:
    """How much of everything: the full sizes for a GPU, `TINY` for a dry run on the CPU."""

    train_sentences: int = 10_000
    vocab: int = 8000
    valid_sentences: int = 64
    batch_tokens: int = 4096
    steps: int = 60
    valid_every: int = 30
    log_every: int = 10
    stop_in_step: int = 43
    paper_steps: int = 25
    paper_batch_tokens: int = 24_576
    distributed_steps: int = 20
    test_sentences: int = 1000
    lstm: dict = field(default_factory=lambda: LSTM_BRIDGE)
    transformer: dict = field(default_factory=lambda: TRANSFORMER)
    paper: dict = field(default_factory=lambda: PAPER_TRANSFORMER)
    agreement_layer: int = 3


def _small(model: dict, dim: int) -> dict:
    out = copy.deepcopy(model)
    out["embed_dim"] = dim
    for slot in ("encoder", "decoder", "bridge"):
        part = out[slot]
        if "hidden" in part:
            part["hidden"] = dim
        if "heads" in part:
            part["heads"] = 2
        if "ff_dim" in part:
            part["ff_dim"] = 2 * dim
        if "layers" in part:
            part["layers"] = min(part["layers"], 2)
    return out


TINY = Sizes(train_sentences=200, vocab=300, valid_sentences=8, batch_tokens=600, steps=12, valid_every=6,
             log_every=3, stop_in_step=9, paper_steps=6, paper_batch_tokens=600, distributed_steps=4,
             test_sentences=16, lstm=_small(LSTM_BRIDGE, 32), transformer=_small(TRANSFORMER, 32),
             paper=_small(PAPER_TRANSFORMER, 48), agreement_layer=1)


KINDS = ("lstm_bridge", "transformer")


def precisions_for(device: str) -> list[str]:
    """fp32, bf16 and fp16 with its gradient scaler on a GPU; the CPU has no fp16."""
    return ["fp32", "bf16", "fp16"] if device.startswith("cuda") else ["fp32", "bf16"]


# --- output --------------------------------------------------------------------------------------------------


class Out:
    """The output folder: at most 8 files, each cut to 16 MiB (the end kept, where the errors are)."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def path(self, name: str) -> Path:
        return self.folder / name

    def write(self, name: str, text: str) -> Path:
        data = text.encode("utf-8")
        if len(data) > MAX_FILE_BYTES:
            data = b"[cut: the first bytes are left out]\n" + data[-(MAX_FILE_BYTES - 64):]
        path = self.path(name)
        path.write_bytes(data)
        return path

    def cap(self, name: str) -> None:
        path = self.path(name)
        if path.is_file() and path.stat().st_size > MAX_FILE_BYTES:
            self.write(name, path.read_bytes().decode("utf-8", "replace"))


@contextlib.contextmanager
def into_log(path: Path) -> Iterator[None]:
    """The library's log and anything written to stdout / stderr (progress bars) go to `path`."""
    with open(path, "a", encoding="utf-8") as f:
        handler = logging.StreamHandler(f)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        level = root.level
        root.setLevel(logging.INFO)
        try:
            with contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
                yield
        finally:
            root.removeHandler(handler)
            root.setLevel(level)


# --- the steps -----------------------------------------------------------------------------------------------


@dataclass
class Check:
    args: argparse.Namespace
    sizes: Sizes
    out: Out
    t0: float
    results: dict[str, Any] = field(default_factory=dict)

    @property
    def device(self) -> str:
        return self.args.device

    @property
    def precisions(self) -> list[str]:
        return [p for p in precisions_for(self.device) if not self.args.precisions or p in self.args.precisions]

    @property
    def kinds(self) -> list[str]:
        return [k for k in KINDS if not self.args.kinds or k in self.args.kinds]

    def left(self) -> float:
        return self.args.budget_s - (time.time() - self.t0)

    def train_log(self) -> contextlib.AbstractContextManager:
        return into_log(self.out.path("train.log"))

    def config(self, kind: str, work: Path, precision: str, **train: Any) -> dict[str, Any]:
        """The experiment config of one run of `kind` (lstm_bridge, transformer, paper)."""
        s = self.sizes
        model = {"lstm_bridge": s.lstm, "transformer": s.transformer, "paper": s.paper}[kind]
        return {
            "name": f"gpu_check_{kind}", "corpus": str(self.args.corpus), "work_dir": str(work),
            "preprocess": {"lowercase": False, "joint_vocab": True, "vocab_size": s.vocab, "max_len": 60,
                           "max_train_sentences": s.train_sentences, "max_valid_sentences": s.valid_sentences},
            "directions": {"mode": "explicit", "pairs": [["en", "de"], ["de", "en"]], "languages": ["en", "de"]},
            "model": copy.deepcopy(model),
            "train": {"optimizer": "adam", "adam_betas": [0.9, 0.98], "lr": 0.002, "lr_schedule": "inverse_sqrt",
                      "warmup_steps": 100, "label_smoothing": 0.1, "batch_tokens": s.batch_tokens,
                      "max_steps": s.steps, "valid_every": s.valid_every, "log_every": s.log_every, "seed": 1234,
                      "penalty_weight": 1.0 if kind == "lstm_bridge" else 0.0, "precision": precision,
                      "device": self.device, **train},
        }


def _parse(cfg: dict[str, Any]):
    from interlingua.config import parse_config
    return parse_config(cfg)


def _reset_peak() -> None:
    import torch
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def _peak_mib() -> float | None:
    import torch
    return round(torch.cuda.max_memory_allocated() / 2**20, 1) if torch.cuda.is_available() else None


def weight_difference(a: Path, b: Path) -> float:
    """The largest absolute difference between two checkpoints' weights (0.0: bit-identical)."""
    from interlingua.model_files.checkpoint import Checkpoint
    wa, wb = Checkpoint.read(a).weights, Checkpoint.read(b).weights
    if wa.keys() != wb.keys():
        raise ValueError(f"{a} and {b} hold different weights")
    return max((float((wa[k].double() - wb[k].double()).abs().max()) for k in wa if wa[k].numel()), default=0.0)


def _records(work: Path) -> list[dict[str, Any]]:
    from interlingua.training.metrics import MetricsLog
    return MetricsLog(work).records()


def loss_difference(a: Path, b: Path) -> float:
    """The largest difference between two runs' logged training losses, window by window."""
    la = [r["loss"] for r in _records(a) if r.get("type") == "train"]
    lb = [r["loss"] for r in _records(b) if r.get("type") == "train"]
    if len(la) != len(lb):
        return float("inf")
    return max((abs(x - y) for x, y in zip(la, lb)), default=0.0)


def tokens_per_second(work: Path) -> float | None:
    """Median training tokens/s (source + target) of the log windows after the first (its warm-up)."""
    rates = [r["tokens_per_s"] for r in _records(work) if r.get("type") == "train"]
    rates = rates[1:] or rates
    return round(statistics.median(rates), 1) if rates else None


def _append_metrics(check: Check, run: str, work: Path) -> None:
    with open(check.out.path("metrics.jsonl"), "a", encoding="utf-8") as f:
        for rec in _records(work):
            f.write(json.dumps({"run": run, **rec}) + "\n")


def verdict(resumed: float, noise: float) -> str:
    if resumed == 0.0:
        return "bit-identical"
    return f"differs by {resumed:.3g} (two uninterrupted runs: {'identical' if noise == 0 else f'{noise:.3g}'})"


@contextlib.contextmanager
def ctrl_c_in_step(step: int) -> Iterator[None]:
    """Ctrl-C inside the passes of training step `step` (after its forward and backward ran)."""
    from interlingua.training import trainer as trainer_mod
    original = trainer_mod.forward_backward
    calls = {"n": 0}

    def stopping(run, micro):
        calls["n"] += 1
        sums = original(run, micro)
        if calls["n"] == step:
            raise KeyboardInterrupt
        return sums

    trainer_mod.forward_backward = stopping
    try:
        yield
    finally:
        trainer_mod.forward_backward = original


def step_cuda_tests(check: Check) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "pytest", "tests/test_cuda.py", "-m", "cuda", "-p", "no:cacheprovider", "-rA",
           "-p", "no:schemathesis", "-p", "no:hypothesispytest", "-o", "addopts="]  # plugins the CUDA tests do not use
    collect = not check.device.startswith("cuda")
    if collect:
        cmd.append("--collect-only")
    env = {**os.environ, "CI": "true", "PYTHONUNBUFFERED": "1"}
    data = Path(check.args.corpus).parent.parent  # the folder holding multi30k/, for tests/conftest.py
    env.setdefault("INTERLINGUA_SHARED_DATA", str(data))
    timeout = max(30.0, min(check.left(), check.args.tests_timeout_s))
    t = time.time()
    try:
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as err:
        output = (err.stdout or b"").decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        output, code = output + f"\n[stopped after {timeout:.0f} s]\n", None
    check.out.write("pytest.log", f"$ {shlex.join(cmd)}\n{output}")
    tail = [line for line in output.strip().splitlines() if line.strip()][-1:] or [""]
    result: dict[str, Any] = {"command": shlex.join(cmd), "exit_code": code, "last_line": tail[0],
                              "seconds": round(time.time() - t, 1)}
    if collect:
        result["note"] = f"collected only: the tests need a CUDA GPU and the device is {check.device}"
        if code != 0:
            raise RuntimeError(f"collecting the cuda tests failed (exit {code}): {tail[0]}")
        return result
    result["counts"] = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|errors?|skipped)\b", tail[0])}
    failed = [line for line in output.splitlines() if line.startswith(("FAILED", "ERROR"))]
    result["failed"] = failed[:50]
    if code != 0:
        raise RuntimeError(f"the cuda tests did not all pass (exit {code}): {tail[0]}")
    return result


def step_training(check: Check) -> dict[str, Any]:
    from interlingua.data.prepare import prepare
    from interlingua.training.trainer import train
    s, work = check.sizes, check.args.work / "training"
    shutil.rmtree(work, ignore_errors=True)
    rows: list[dict[str, Any]] = []
    errors = []
    with check.train_log():
        data = prepare(_parse(check.config("transformer", work / "data", "fp32")))
        for kind in check.kinds:
            for precision in check.precisions:
                if check.left() < 20:
                    rows.append({"kind": kind, "precision": precision, "error": "not run: time budget spent"})
                    continue
                row: dict[str, Any] = {"kind": kind, "precision": precision}
                name = f"{kind}_{precision}"
                try:
                    straight, twin, stopped = (work / f"{name}_{w}" for w in ("straight", "twin", "stopped"))
                    _reset_peak()
                    t = time.time()
                    result = train(_parse(check.config(kind, straight, precision)), data=data)
                    row.update(seconds=round(time.time() - t, 1), steps=result.steps,
                               tokens_per_s=tokens_per_second(straight), peak_mib=_peak_mib(),
                               final_loss=[r["loss"] for r in _records(straight) if r.get("type") == "train"][-1],
                               dev_bleu=result.best_bleu)
                    train(_parse(check.config(kind, twin, precision)), data=data)
                    try:
                        with ctrl_c_in_step(s.stop_in_step):
                            train(_parse(check.config(kind, stopped, precision)), data=data)
                        raise RuntimeError(f"the run was not stopped in step {s.stop_in_step}")
                    except KeyboardInterrupt as err:
                        row["stop"] = str(err)
                    train(_parse(check.config(kind, stopped, precision)), resume=True, data=data)
                    noise = weight_difference(straight / "last.pt", twin / "last.pt")
                    resumed = weight_difference(straight / "last.pt", stopped / "last.pt")
                    row.update(resume_weight_diff=resumed, twin_weight_diff=noise,
                               resume_loss_diff=loss_difference(straight, stopped),
                               resume=verdict(resumed, noise))
                    _append_metrics(check, f"{name}_straight", straight)
                    _append_metrics(check, f"{name}_resumed", stopped)
                except Exception as err:  # noqa: BLE001 - recorded, and the next run goes on
                    row["error"] = _error(err)
                    errors.append(f"{name}: {row['error'].splitlines()[-1]}")
                rows.append(row)
        paper = []
        for precision in check.precisions:
            if check.left() < 20:
                paper.append({"kind": "paper", "precision": precision, "error": "not run: time budget spent"})
                continue
            row = {"kind": "paper", "precision": precision}
            try:
                run_dir = work / f"paper_{precision}"
                _reset_peak()
                t = time.time()
                result = train(_parse(check.config("paper", run_dir, precision, batch_tokens=s.paper_batch_tokens,
                                                   max_steps=s.paper_steps, valid_every=10 * s.paper_steps,
                                                   log_every=max(1, s.paper_steps // 5))), data=data)
                row.update(seconds=round(time.time() - t, 1), steps=result.steps,
                           tokens_per_s=tokens_per_second(run_dir), peak_mib=_peak_mib())
            except Exception as err:  # noqa: BLE001
                row["error"] = _error(err)
                errors.append(f"paper {precision}: {row['error'].splitlines()[-1]}")
            paper.append(row)
    out = {"runs": rows, "paper_size": paper}
    if errors:
        raise PartialFailure(out, "; ".join(errors))
    return out


WORKER = "--ddp-worker"


def ddp_worker(config: str, weights: str) -> None:
    """Under torchrun: join a process group (nccl on a GPU, gloo on the CPU) even for one process, train,
    save this rank's weights and what the group was."""
    import torch
    import torch.distributed as dist

    from interlingua.config import load_config
    from interlingua.distributed import Distributed
    from interlingua.training.build import build_run
    from interlingua.training.trainer import Trainer
    cfg = load_config(config)
    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    gpu = cfg.train.device.startswith("cuda")
    backend = "nccl" if gpu else "gloo"
    if gpu:
        torch.cuda.set_device(local)
    dist.init_process_group(backend)
    ctx = Distributed(rank, world, local, backend)
    run = build_run(cfg, dist=ctx, device=f"cuda:{local}" if gpu else "cpu")
    try:
        Trainer(run).train()
    finally:
        ctx.close()
    torch.save(run.network.state_dict(), weights)
    agreement = [r.get("agreement") for r in _records(Path(cfg.work_dir)) if r.get("type") == "train"]
    Path(weights).with_suffix(".json").write_text(json.dumps({"backend": backend, "world_size": world,
                                                              "agreement": agreement}))


def step_distributed(check: Check) -> dict[str, Any]:
    import torch

    from interlingua.training.trainer import train
    s, work = check.sizes, check.args.work / "distributed"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    precision = "bf16" if check.device.startswith("cuda") else "fp32"
    agreement = {"weight": 1.0, "loss": "contrastive", "negatives": "both", "layer": s.agreement_layer}

    def cfg(run_dir: Path) -> dict[str, Any]:
        return check.config("transformer", run_dir, precision, max_steps=s.distributed_steps,
                            valid_every=s.distributed_steps, log_every=max(1, s.distributed_steps // 4),
                            agreement=agreement)

    import yaml
    config = work / "ddp.yaml"
    config.write_text(yaml.safe_dump(cfg(work / "ddp")), encoding="utf-8")
    weights = work / "rank0.pt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
           "--log-dir", str(work / "torchrun-logs"), str(Path(__file__).resolve()), WORKER, str(config), str(weights)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    timeout = max(30.0, min(check.left(), 240.0))
    t = time.time()
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    with open(check.out.path("train.log"), "a", encoding="utf-8") as f:
        f.write(f"$ {shlex.join(cmd)}\n{done.stdout}{done.stderr}\n")
    seconds = round(time.time() - t, 1)
    if done.returncode != 0:
        raise RuntimeError(f"torchrun exited {done.returncode}: {(done.stderr or done.stdout).strip()[-800:]}")
    info = json.loads(weights.with_suffix(".json").read_text())
    with check.train_log():
        train(_parse(cfg(work / "one")))
    from interlingua.model_files.checkpoint import Checkpoint
    one = Checkpoint.read(work / "one" / "last.pt").weights
    ddp = torch.load(weights, map_location="cpu")
    diff = max(float((one[k].double() - ddp[k].double().cpu()).abs().max()) for k in one if one[k].numel())
    agreement_one = [r.get("agreement") for r in _records(work / "one") if r.get("type") == "train"]
    return {"command": shlex.join(cmd), "seconds": seconds, **info, "precision": precision,
            "agreement_one_process": agreement_one, "weight_diff_to_one_process": diff,
            "same_as_one_process": "bit-identical" if diff == 0 else f"differs by {diff:.3g}"}


def step_inference(check: Check) -> dict[str, Any]:
    import numpy as np

    from interlingua.data.corpus import read_lines
    from interlingua.inference.api import load
    s = check.sizes
    lines = read_lines(Path(check.args.corpus).parent / "test_2016_flickr.en.gz")[:s.test_sentences]
    rows = []
    errors = []
    for kind in check.kinds:
        ckpt = check.args.work / "training" / f"{kind}_fp32_straight" / "last.pt"
        if not ckpt.is_file():
            rows.append({"kind": kind, "error": f"no fp32 model from the training step ({ckpt})"})
            errors.append(kind)
            continue
        reference: dict[str, Any] = {}
        for precision in check.precisions:
            if check.left() < 10:
                rows.append({"kind": kind, "precision": precision, "error": "not run: time budget spent"})
                continue
            row: dict[str, Any] = {"kind": kind, "precision": precision}
            try:
                _reset_peak()
                model = load(ckpt, check.device, precision=precision)
                model.translate(lines[:8], "en", "de")  # warm-up: kernels, autotuning
                for beam in (1, 5):
                    t = time.perf_counter()
                    out = model.translate(lines, "en", "de", beam=beam)
                    dt = time.perf_counter() - t
                    row[f"beam{beam}_sentences_per_s"] = round(len(lines) / dt, 1)
                    row[f"beam{beam}_words_out_per_s"] = round(sum(len(x.split()) for x in out) / dt, 1)
                    if precision == "fp32":
                        reference[f"beam{beam}"] = out
                    row[f"beam{beam}_same_as_fp32"] = round(
                        sum(a == b for a, b in zip(out, reference[f"beam{beam}"])) / len(lines), 3)
                model.encode(lines[:8], "en")
                t = time.perf_counter()
                vectors = model.encode(lines, "en")
                row["embed_sentences_per_s"] = round(len(lines) / (time.perf_counter() - t), 1)
                if precision == "fp32":
                    reference["vectors"] = vectors
                ref = reference["vectors"]
                cos = (vectors * ref).sum(1) / np.maximum(np.linalg.norm(vectors, axis=1) * np.linalg.norm(ref, axis=1),
                                                         1e-12)
                row["embed_min_cosine_to_fp32"] = round(float(cos.min()), 5)
                row["peak_mib"] = _peak_mib()
            except Exception as err:  # noqa: BLE001
                row["error"] = _error(err)
                errors.append(f"{kind} {precision}: {row['error'].splitlines()[-1]}")
            rows.append(row)
    for row in rows:  # speed-ups against fp32, per kind
        base = next((r for r in rows if r["kind"] == row["kind"] and r.get("precision") == "fp32"), None)
        if base and "error" not in row and "error" not in base:
            for key in ("beam1_sentences_per_s", "beam5_sentences_per_s", "embed_sentences_per_s"):
                row[key.replace("_sentences_per_s", "_speedup")] = round(row[key] / base[key], 2)
    out = {"sentences": len(lines), "runs": rows}
    if errors:
        raise PartialFailure(out, "; ".join(errors))
    return out


class PartialFailure(Exception):
    """A step that failed in part: what it did measure is kept."""

    def __init__(self, result: dict[str, Any], message: str):
        super().__init__(message)
        self.result = result


def _error(err: BaseException) -> str:
    text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    return "\n".join(text.strip().splitlines()[-12:])


STEPS: dict[str, Callable[[Check], dict[str, Any]]] = {
    "cuda_tests": step_cuda_tests, "training": step_training, "distributed": step_distributed,
    "inference": step_inference,
}
MIN_SECONDS = {"cuda_tests": 30, "training": 30, "distributed": 20, "inference": 10}
"""A step is not started with less than this left of the budget."""


def environment(device: str) -> dict[str, Any]:
    import torch
    env: dict[str, Any] = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"), "host": platform.node(),
        "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
        "device": device, "command": shlex.join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                   gpus=torch.cuda.device_count(), bf16_supported=torch.cuda.is_bf16_supported(),
                   cudnn=torch.backends.cudnn.version())
    try:
        env["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                       text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        env["commit"] = None
    return env


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 0.01 and value else f"{value:,.2f}".rstrip("0").rstrip(".")
    return str(value)


def markdown(summary: dict[str, Any]) -> str:
    env = summary["environment"]
    lines = [f"# GPU check, {env['date']}", "",
             f"{env.get('gpu', env['device'])} ({env.get('gpu_memory_gib', '-')} GiB), torch {env['torch']}, "
             f"CUDA {env['cuda']}, Python {env['python']}, commit {env.get('commit') or '-'}, "
             f"sizes: {summary['sizes']}. Command: `{env['command']}`", "",
             "| step | ok | seconds | note |", "|---|---|---|---|"]
    for name, step in summary["steps"].items():
        note = step.get("error", "").splitlines()[-1] if step.get("error") else step.get("note", "")
        lines.append(f"| {name} | {'yes' if step['ok'] else 'NO'} | {_fmt(step.get('seconds'))} | {note} |")
    lines.append("")
    tests = summary["steps"].get("cuda_tests", {}).get("result") or {}
    if tests:
        lines += ["## CUDA tests", "", f"`{tests.get('command')}`: {tests.get('last_line')}", ""]
        lines += [f"- {line}" for line in tests.get("failed", [])] + [""]
    training = summary["steps"].get("training", {}).get("result") or {}
    if training:
        lines += ["## Training and resume", "",
                  "| kind | precision | steps | tokens/s | peak MiB | last loss | dev BLEU | resume after Ctrl-C |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in training.get("runs", []):
            lines.append(f"| {r['kind']} | {r['precision']} | {_fmt(r.get('steps'))} | {_fmt(r.get('tokens_per_s'))} "
                         f"| {_fmt(r.get('peak_mib'))} | {_fmt(r.get('final_loss'))} | {_fmt(r.get('dev_bleu'))} | "
                         f"{r.get('resume') or (r.get('error') or '').splitlines()[-1:]} |")
        lines += ["", "Paper-size Transformer (d_model 512, 5 + 5 layers), training throughput:", "",
                  "| precision | steps | tokens/s | peak MiB |", "|---|---|---|---|"]
        for r in training.get("paper_size", []):
            lines.append(f"| {r['precision']} | {_fmt(r.get('steps'))} | {_fmt(r.get('tokens_per_s'))} | "
                         f"{_fmt(r.get('peak_mib')) if 'error' not in r else r['error'].splitlines()[-1]} |")
        lines.append("")
    ddp = summary["steps"].get("distributed", {}).get("result") or {}
    if ddp:
        lines += ["## torchrun, one process", "",
                  f"backend {ddp.get('backend')}, world size {ddp.get('world_size')}, {ddp.get('precision')}, "
                  f"contrastive agreement; weights against one process without a group: "
                  f"{ddp.get('same_as_one_process')}; agreement loss per window {ddp.get('agreement')} "
                  f"(one process: {ddp.get('agreement_one_process')}).", ""]
    inference = summary["steps"].get("inference", {}).get("result") or {}
    if inference:
        lines += [f"## Translation and sentence vectors ({inference.get('sentences')} test sentences, en->de)", "",
                  "| kind | precision | greedy sent/s | x fp32 | same as fp32 | beam 5 sent/s | x fp32 | same as fp32 "
                  "| embed sent/s | x fp32 | min cosine | peak MiB |", "|---" * 12 + "|"]
        for r in inference.get("runs", []):
            if "error" in r:
                lines.append(f"| {r['kind']} | {r.get('precision', '-')} | {r['error'].splitlines()[-1]} |")
                continue
            lines.append("| " + " | ".join(_fmt(r.get(k)) for k in (
                "kind", "precision", "beam1_sentences_per_s", "beam1_speedup", "beam1_same_as_fp32",
                "beam5_sentences_per_s", "beam5_speedup", "beam5_same_as_fp32", "embed_sentences_per_s",
                "embed_speedup", "embed_min_cosine_to_fp32", "peak_mib")) + " |")
        lines.append("")
    return "\n".join(lines)


def run_check(args: argparse.Namespace) -> dict[str, Any]:
    t0 = float(os.environ.get("GPU_T0") or time.time())
    sizes = TINY if args.tiny else Sizes()
    out = Out(args.out)
    for name in ("pytest.log", "train.log", "metrics.jsonl"):
        out.path(name).unlink(missing_ok=True)
    check = Check(args, sizes, out, t0)
    from interlingua.training.metrics import MetricsLog
    MetricsLog.plot = lambda self, final=False: None  # no curves.png at all: metrics.jsonl holds the curves
    summary: dict[str, Any] = {"environment": environment(args.device), "sizes": "tiny" if args.tiny else "full",
                               "budget_s": args.budget_s, "steps": {}}
    install = out.path("install.log")
    if install.is_file():
        summary["install"] = install.read_text(encoding="utf-8", errors="replace")[-2000:]
    wanted = [s for s in STEPS if s not in (args.skip or [])]
    for name in wanted:
        record: dict[str, Any] = {"ok": False}
        if check.left() < MIN_SECONDS[name]:
            record["error"] = f"not run: {check.left():.0f} s of the {args.budget_s:.0f} s budget left"
        else:
            t = time.time()
            print(f"gpu-check: {name} ...", flush=True)
            try:
                record["result"] = STEPS[name](check)
                record["ok"] = True
            except PartialFailure as err:
                record["result"], record["error"] = err.result, str(err)
            except Exception as err:  # noqa: BLE001 - recorded; the next step runs
                record["error"] = _error(err)
            record["seconds"] = round(time.time() - t, 1)
            print(f"gpu-check: {name} {'ok' if record['ok'] else 'FAILED'} in {record['seconds']} s", flush=True)
        summary["steps"][name] = record
        summary["seconds"] = round(time.time() - t0, 1)
        out.write("summary.json", json.dumps(summary, indent=1, default=str))
        out.write("summary.md", markdown(summary))
    for name in ("train.log", "metrics.jsonl"):
        out.cap(name)
    return summary


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == WORKER:
        ddp_worker(*argv[1:3])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    ap.add_argument("--out", type=Path, default=None, help="output folder (default: $OUT, else runs/gpu-check/out)")
    ap.add_argument("--tiny", action="store_true", help="tiny models and corpora: the same steps in seconds")
    ap.add_argument("--corpus", type=Path, default=REPO / ".gpu-data" / "multi30k" / "corpus.yaml",
                    help="Multi30k corpus YAML (default .gpu-data/multi30k/corpus.yaml, from scripts/gpu-prepare.sh)")
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "gpu-check", help="folder for the runs")
    ap.add_argument("--budget-s", type=float, default=450.0,
                    help="steps are not started after this many seconds since GPU_T0 (default 450)")
    ap.add_argument("--tests-timeout-s", type=float, default=180.0, help="the most the cuda tests may take")
    ap.add_argument("--skip", nargs="*", choices=list(STEPS), help="steps to leave out")
    ap.add_argument("--precisions", nargs="*", choices=["fp32", "bf16", "fp16"],
                    help="only these precisions (default: fp32, bf16 and, on a GPU, fp16)")
    ap.add_argument("--kinds", nargs="*", choices=list(KINDS), help="only these kinds (default: both)")
    args = ap.parse_args(argv)
    args.out = args.out or Path(os.environ.get("OUT") or REPO / "runs" / "gpu-check" / "out")
    args.corpus = args.corpus.resolve()
    if not args.corpus.is_file():
        print(f"gpu-check: no corpus at {args.corpus}: run scripts/gpu-prepare.sh first (or give --corpus)",
              file=sys.stderr)
        return 2
    summary = run_check(args)
    failed = [n for n, s in summary["steps"].items() if not s["ok"]]
    print(f"gpu-check: {len(summary['steps']) - len(failed)} of {len(summary['steps'])} steps ok"
          + (f", failed: {', '.join(failed)}" if failed else "") + f"; {summary['seconds']} s; results in {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
