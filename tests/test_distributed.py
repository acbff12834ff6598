"""Distributed training: torchrun processes on gloo train as one process with their combined batch.

Each torchrun launch starts real processes (two CPU ranks, gloo, one thread each); the models are
tiny and train a few steps without dropout, so that one process with the whole batch is the
reference the ranks must match (up to float summation order). The runs compared with one process
share one launch (`two_ranks`); the command line under torchrun has its own.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch._dynamo
import yaml
from conftest import tiny_config, torchrun
from test_work_dir_lock import leave_a_stale_lock

from interlingua.config import parse_config
from interlingua.data.batching import shard
from interlingua.errors import ConfigError
from interlingua.model_files.checkpoint import Checkpoint, read_checkpoint
from interlingua.training import compiled as compiled_mod
from interlingua.training.build import build_run
from interlingua.training.trainer import train
from interlingua.training.work_dir_lock import LOCK_NAME

# The model, seeds and batch of every run here; only the number of processes and micro-batches vary.
# Plain SGD, whose update is linear in the gradient: Adam's first steps divide the gradient by its
# own size, which turns float noise in a (nearly) zero gradient into a whole step of lr.
SECTIONS = {"directions": {"mode": "explicit", "pairs": [["en", "de"], ["de", "en"]]},
            "train": {"max_steps": 6, "valid_every": 3, "log_every": 3, "batch_size": 20, "lr": 0.05,
                      "optimizer": "sgd", "precision": "fp32", "threads": 1}}

# Run under torchrun: train with the library API, then save this rank's weights for the test to compare.
RANK_SCRIPT = """
import sys, torch
from interlingua.config import load_config
from interlingua.distributed import process_group
from interlingua.training.build import build_run
from interlingua.training.trainer import Trainer
cfg = load_config(sys.argv[1])
with process_group(cfg.train.device) as (dist, device):
    run = build_run(cfg, dist=dist, device=device)
    Trainer(run).train()
    torch.save(run.network.state_dict(), f"{sys.argv[2]}/rank{dist.rank}.pt")
"""

COMPILE_BACKEND = "aot_eager"
"""The backend of the compiled runs here: dynamo's graphs, DDP's split of them at its buckets and AOTAutograd's
backward, all as `train.compile` makes them, without inductor's C++ code generation (a cold compile of 2 ranks
cost about 30 s); test_compile.py checks inductor's own graphs against eager steps."""

# The same for several runs in turn in one launch (one process group): each config's rank weights are saved
# beside it.
RUNS_SCRIPT = """
import sys, torch
from pathlib import Path
from interlingua.config import load_config
from interlingua.distributed import process_group
from interlingua.training.build import build_run
from interlingua.training.trainer import Trainer
import torch._dynamo
from interlingua.training import compiled
compiled.inductor_backend = torch._dynamo.lookup_backend(COMPILE_BACKEND)
configs = [load_config(path) for path in sys.argv[1:]]
with process_group(configs[0].train.device) as (dist, device):
    for path, cfg in zip(sys.argv[1:], configs):
        run = build_run(cfg, dist=dist, device=device)
        Trainer(run).train()
        torch.save(run.network.state_dict(), Path(path).parent / f"rank{dist.rank}.pt")
""".replace("COMPILE_BACKEND", repr(COMPILE_BACKEND))
AGREEMENT = {"agreement": {"weight": 2.0, "loss": "contrastive", "temperature": 0.1}}
# A Transformer for the compiled runs (one graph a direction; the LSTM kinds' graphs break at every nn.LSTM,
# which multiplies the compile time)
TRANSFORMER = {"embed_dim": 32, "bridge": {"type": "none"},
               "encoder": {"type": "transformer", "layers": 1, "heads": 2, "ff_dim": 64},
               "decoder": {"type": "transformer", "layers": 1, "heads": 2, "ff_dim": 64}}
# one direction: one graph to compile (each more costs about 14 s with a cold compile cache on 2 cores)
ONE_DIRECTION = {"mode": "explicit", "pairs": [["en", "de"]]}
COMPILED = {"compile": True, "accumulate": 2, "model": TRANSFORMER, "directions": ONE_DIRECTION}
# English-centred with synthetic pairs for de<->fr, made through English by each rank for its part of the batch
SYNTHETIC = {"directions": {"mode": "pivot", "languages": ["de", "en", "fr"], "pivot": "en"},
             "synthetic": {"modes": ["pivot"], "rate": 1.0, "start_step": 2}}
TWO_RANK_RUNS = {"combined_batch": {"accumulate": 2}, "agreement": AGREEMENT,
                 "token_batches": {"batch_tokens": 1200, "accumulate": 2}, "compiled": COMPILED,
                 "synthetic": SYNTHETIC}
"""The runs two gloo ranks train in one launch (`two_ranks`), each compared with one process below."""


def _write_config(corpus: Path, work: Path, path: Path, model: dict | None = None, directions: dict | None = None,
                  **train) -> Path:
    sections = {**SECTIONS, "train": {**SECTIONS["train"], **train}}
    if directions is not None:
        sections["directions"] = directions
    cfg = tiny_config(corpus, work, **sections, **({"model": model} if model is not None else {}))
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def _torchrun(args: list[str], nproc: int = 2) -> subprocess.CompletedProcess:
    done = torchrun(args, nproc)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _assert_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.allclose(a[name], b[name], rtol=1e-5, atol=1e-6), (name, (a[name] - b[name]).abs().max())


def _trained_alone(corpus: Path, folder: Path, model: dict | None = None, **settings) -> Path:
    """One process trains the run with these settings into folder/run (its config at folder.yaml): the run
    folder, the reference a two-rank run is compared with."""
    cfg = yaml.safe_load(_write_config(corpus, folder / "run", folder.with_suffix(".yaml"), model,
                                       **settings).read_text())
    train(parse_config(cfg))
    return folder / "run"


def _rank_weights(ranks: Path) -> dict[str, torch.Tensor]:
    """Rank 0's weights at the end of a two-rank run, after checking that rank 1 ended with the very same."""
    rank0, rank1 = torch.load(ranks / "rank0.pt"), torch.load(ranks / "rank1.pt")
    assert all(torch.equal(rank0[k], rank1[k]) for k in rank0)
    return rank0


@pytest.fixture(scope="module")
def two_ranks(multi30k_corpus, tmp_path_factory) -> dict[str, Path]:
    """One torchrun launch of two ranks that trains each run of `TWO_RANK_RUNS` in turn: {name: its folder,
    holding cfg.yaml, run/ (what rank 0 wrote) and rank0.pt, rank1.pt (each rank's weights at the end)}."""
    root = tmp_path_factory.mktemp("two_ranks")
    configs = []
    for name, settings in TWO_RANK_RUNS.items():
        (root / name).mkdir()
        configs.append(_write_config(multi30k_corpus, root / name / "run", root / name / "cfg.yaml", **settings))
    script = root / "runs.py"
    script.write_text(RUNS_SCRIPT, encoding="utf-8")
    _torchrun([str(script), *map(str, configs)])
    return {name: root / name for name in TWO_RANK_RUNS}


@pytest.fixture(scope="module")
def one_process(multi30k_corpus, tmp_path_factory) -> Path:
    """The reference: one process, the whole batch of 20 pairs per step, 6 steps."""
    return _trained_alone(multi30k_corpus, tmp_path_factory.mktemp("one") / "alone")


def test_shards_cover_the_batch_once():
    idx = np.arange(11)
    parts = [shard(idx, 4, k) for k in range(4)]
    assert sorted(np.concatenate(parts).tolist()) == idx.tolist()
    assert [len(p) for p in parts] == [3, 3, 3, 2]


def test_a_batch_smaller_than_its_parts_is_refused(multi30k_corpus, tmp_path):
    cfg = parse_config(tiny_config(multi30k_corpus, tmp_path, train={"batch_size": 3, "accumulate": 4}))
    with pytest.raises(ConfigError, match="train.batch_size 3 .* 4 parts"):
        build_run(cfg)


def test_accumulated_micro_batches_equal_the_whole_batch(multi30k_corpus, one_process, tmp_path):
    """Three micro-batches (7 + 7 + 6 pairs, one backward each) give the update of one batch of 20."""
    run = _trained_alone(multi30k_corpus, tmp_path / "accumulated", accumulate=3)
    _assert_close(read_checkpoint(run / "last.pt")["model"], read_checkpoint(one_process / "last.pt")["model"])


def test_two_gloo_processes_equal_one_process_with_the_combined_batch(one_process, two_ranks):
    """Two ranks of 10 pairs each (5 + 5 with accumulate 2): identical weights on both ranks,
    equal to one process's with the 20 pairs; rank 0 alone wrote the files."""
    ranks = two_ranks["combined_batch"]
    rank0 = _rank_weights(ranks)
    _assert_close(rank0, read_checkpoint(one_process / "last.pt")["model"])
    _assert_close(read_checkpoint(ranks / "run" / "last.pt")["model"], rank0)


def test_two_gloo_processes_with_contrastive_agreement_equal_one_process(multi30k_corpus, two_ranks, tmp_path):
    """Contrastive agreement takes its negatives from the whole step batch: each rank gathers the
    other's sentence vectors (with their gradients), so two ranks of 10 pairs train as one process of 20."""
    one = _trained_alone(multi30k_corpus, tmp_path / "one", **AGREEMENT)
    ranks = two_ranks["agreement"]
    rank0 = torch.load(ranks / "rank0.pt")
    reference = read_checkpoint(one / "last.pt")["model"]
    _assert_close(rank0, reference)
    # and the agreement term did move the weights: without it they end elsewhere
    plain = _trained_alone(multi30k_corpus, tmp_path / "plain")
    other = read_checkpoint(plain / "last.pt")["model"]
    assert any(not torch.allclose(reference[k], other[k], rtol=1e-5, atol=1e-6) for k in reference)
    logged = [json.loads(line) for line in (ranks / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["agreement"] > 0 for r in logged if r["type"] == "train")


def test_torchrun_cli_validates_once_and_resumes_with_another_process_count(multi30k_corpus, one_process, tmp_path):
    """`interlingua train` under torchrun: one validation per validation step (not one per rank),
    one metrics log and (`train.tensorboard`) one TensorBoard event file, process 0's; the run stops at
    step 3, and goes on to step 6 with ONE process, ending where the one-process run ends. The work_dir's lock,
    left behind by a killed process, is taken over by process 0 alone and given back at the end."""
    config = _write_config(multi30k_corpus, tmp_path / "run", tmp_path / "cfg.yaml", tensorboard=True)
    dead = leave_a_stale_lock(tmp_path / "run")
    done = _torchrun(["-m", "interlingua.cli", "train", str(config), "--set", "train.max_steps=3"])
    assert done.stdout.count("trained 3 steps") == 1  # rank 0 reports
    assert done.stderr.count(f"taking over the stale lock of {(tmp_path / 'run').resolve()}: process {dead} ") == 1
    assert not (tmp_path / "run" / LOCK_NAME).exists()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["type"], r["step"]) for r in records] == [("train", 3), ("valid", 3)]
    assert Checkpoint.read(tmp_path / "run" / "last.pt").training.step == 3
    events = list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1, events
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    accumulated = EventAccumulator(str(events[0].parent))
    accumulated.Reload()
    logged = [(e.step, e.value) for e in accumulated.Scalars("train/loss")]
    assert logged == [(3, pytest.approx(records[0]["loss"], rel=1e-6))]

    from interlingua.cli import main
    assert main(["train", str(config), "--resume"]) == 0
    _assert_close(read_checkpoint(tmp_path / "run" / "last.pt")["model"],
                  read_checkpoint(one_process / "last.pt")["model"])
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["type"], r["step"]) for r in records] == [("train", 3), ("valid", 3), ("train", 6), ("valid", 6)]


def test_two_gloo_processes_with_token_batches_equal_one_process(multi30k_corpus, two_ranks, tmp_path):
    """`train.batch_tokens`: a step holds a batch of each direction; two ranks (x accumulate 2) take
    their parts of both and end with the weights of one process that trains the whole step."""
    one = _trained_alone(multi30k_corpus, tmp_path / "one", batch_tokens=1200)
    _assert_close(_rank_weights(two_ranks["token_batches"]), read_checkpoint(one / "last.pt")["model"])


def test_two_gloo_processes_compiled_equal_one_compiled_process(multi30k_corpus, two_ranks, tmp_path, monkeypatch):
    """`train.compile` on both sides: two ranks (x accumulate 2) through the compiled DDP module train as one
    compiled process with the whole batch (`COMPILE_BACKEND` on both sides)."""
    monkeypatch.setattr(compiled_mod, "inductor_backend", torch._dynamo.lookup_backend(COMPILE_BACKEND))
    one = _trained_alone(multi30k_corpus, tmp_path / "one", compile=True, model=TRANSFORMER,
                         directions=ONE_DIRECTION)
    _assert_close(_rank_weights(two_ranks["compiled"]), read_checkpoint(one / "last.pt")["model"])


def test_two_gloo_processes_with_synthetic_pairs_equal_one_process(multi30k_corpus, two_ranks, tmp_path):
    """`train.synthetic`: each rank makes its own part of the step's synthetic pairs, the same pairs one process
    makes (the logged counts and losses agree), and the weights are one process's up to float summation order
    (the made batches add terms to it)."""
    one = _trained_alone(multi30k_corpus, tmp_path / "one", **SYNTHETIC)
    ranks = two_ranks["synthetic"]
    rank0 = _rank_weights(ranks)
    reference = read_checkpoint(one / "last.pt")["model"]
    for name in rank0:
        assert torch.allclose(rank0[name], reference[name], rtol=1e-3, atol=1e-4), name

    def logged(work: Path) -> list[dict]:
        return [r for r in map(json.loads, (work / "metrics.jsonl").read_text().splitlines()) if r["type"] == "train"]
    two, single = logged(ranks / "run"), logged(one)
    assert [r.get("synthetic_pairs") for r in two] == [r.get("synthetic_pairs") for r in single]
    assert any(r.get("synthetic_pairs") for r in two)
    assert [r.get("synthetic_loss") for r in two] == pytest.approx([r.get("synthetic_loss") for r in single],
                                                                    rel=1e-4)


def _processes_with(env_line: str, tag: str) -> list[int]:
    """The pids of the processes whose environment holds `env_line` and this test's `tag`."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            lines = environ.read_bytes().split(b"\0")
        except OSError:
            continue
        if env_line.encode() in lines and f"INTERLINGUA_TEST_TAG={tag}".encode() in lines:
            found.append(int(environ.parent.name))
    return found


def test_a_killed_process_is_one_line_and_the_run_resumes(multi30k_corpus, tmp_path):
    """`interlingua train --processes 2` with process 1 killed by SIGKILL mid-run: no traceback, one line
    from process 0 (it saved last.pt: after the lost collective, or stopped by the launcher) and one from the
    launcher naming the dead process and its signal;
    the run then resumes with one process. The launcher leaves no folder of its own in the temporary folder."""
    import signal
    import time
    config = _write_config(multi30k_corpus, tmp_path / "run", tmp_path / "cfg.yaml", max_steps=100000, log_every=2,
                           valid_every=100000)
    tag = str(os.getpid())
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**os.environ, "INTERLINGUA_TEST_TAG": tag, "PYTHONUNBUFFERED": "1", "TMPDIR": str(temporary)}
    cli = [sys.executable, "-m", "interlingua.cli", "train", str(config)]
    launched = subprocess.Popen([*cli, "--processes", "2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    metrics = tmp_path / "run" / "metrics.jsonl"
    deadline = time.time() + 120
    while not (metrics.is_file() and metrics.read_text().count("\n") >= 2) and time.time() < deadline:
        assert launched.poll() is None, launched.communicate()
        time.sleep(0.2)
    victims = _processes_with("RANK=1", tag)
    assert len(victims) == 1, victims
    os.kill(victims[0], signal.SIGKILL)
    _, err = launched.communicate(timeout=120)
    assert launched.returncode == 2, err[-2000:]
    assert "Traceback" not in err, err[-3000:]
    assert "error: training process 1 of 2 was killed by SIGKILL" in err
    # process 0 either finds the lost collective first or is stopped by the launcher first (a race the load
    # decides): either way one line, and last.pt saved
    assert ("error: process 0 of 2: another training process stopped answering" in err and "saved" in err
            or "interrupted: SIGTERM" in err), err[-2000:]
    step = Checkpoint.read(tmp_path / "run" / "last.pt").training.step
    assert step >= 4
    assert not [p.name for p in temporary.iterdir() if p.name.startswith(("torchelastic_", "interlingua-launch-"))]
    # the resume is in this process (one process: nothing of the launcher to check, no second torch start)
    from interlingua.cli import main
    assert main(["train", str(config), "--resume", "--set", f"train.max_steps={step + 2}"]) == 0
    assert Checkpoint.read(tmp_path / "run" / "last.pt").training.step == step + 2
