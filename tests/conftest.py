"""Shared fixtures: real Multi30k from ../shared/data, a tiny trained model on it, and tiny trained models of
every kind on a synthetic task, each trained once per session."""
from __future__ import annotations

import atexit
import os
import pickle
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
import torch
import yaml
from filelock import FileLock

from interlingua.config import parse_config
from interlingua.data.download import get_multi30k

REPO = Path(__file__).resolve().parents[1]
# ../shared/data, or where INTERLINGUA_SHARED_DATA points (a GPU machine has no ../shared: scripts/gpu-check.sh
# points it at the copy scripts/gpu-prepare.sh made)
SHARED_DATA = Path(os.environ.get("INTERLINGUA_SHARED_DATA") or REPO.parent / "shared" / "data")
MULTI30K = SHARED_DATA / "multi30k"

# In CI the shared data, the papers and the optional extras are always installed: a test that
# would skip for want of them is a suite that silently shrinks, so there it fails instead.
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# The measured precision choice (`precision: auto`) is cached per machine; tests keep theirs
# out of the user's cache (child processes inherit the variable).
# Removed when the process that made it exits (each pytest-xdist worker makes its own).
os.environ["INTERLINGUA_CACHE_DIR"] = tempfile.mkdtemp(prefix="interlingua-test-cache-")
atexit.register(shutil.rmtree, os.environ["INTERLINGUA_CACHE_DIR"], ignore_errors=True)


# setuptools' distutils shim asserts when inductor's C++ build imports distutils a second time in one process
# (a fresh venv's setuptools 84: the second compiled run of a test process fell back to eager); the tests use
# the standard library's distutils, which Python 3.11 still has.
os.environ.setdefault("SETUPTOOLS_USE_DISTUTILS", "stdlib")


def missing(reason: str) -> None:
    """Skip a test whose data or optional dependency is absent; fail it under CI=true."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: data-dependent tests must run, not skip)", pytrace=False)
    pytest.skip(reason)


def pytest_sessionfinish(session, exitstatus):
    """Under CI=true any skipped test (a skipif included) turns a green run red."""
    if not IN_CI or exitstatus != 0:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped:
        names = ", ".join(sorted({r.nodeid for r in skipped}))
        reporter.write_line(f"CI=true: {len(skipped)} test(s) skipped, which CI does not allow: {names}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_runtest_setup(item):
    """A test marked `cuda` (tests/test_cuda.py) fails where no CUDA GPU is visible, never skips: selected
    on purpose (`-m cuda`, scripts/gpu-check.sh), it must not pass by doing nothing. The README's test
    command deselects them (`-m "not cuda"`)."""
    if item.get_closest_marker("cuda") is not None and not torch.cuda.is_available():
        pytest.fail(f"{item.nodeid} is marked cuda and needs a CUDA GPU, but torch {torch.__version__} "
                    f"(CUDA build: {torch.version.cuda or 'none'}) sees none (CUDA_VISIBLE_DEVICES="
                    f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); run these on a GPU machine "
                    "(scripts/gpu-check.sh), or leave them out with -m \"not cuda\"", pytrace=False)


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(args: list[str], nproc: int = 2, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """torchrun with the rendezvous flags a multi-node launch uses (one node here), on loopback, one thread per
    process; its own files in a temporary folder (else a /tmp/torchelastic_* per launch). Returns what it did."""
    env = {**(os.environ if env is None else env), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    with tempfile.TemporaryDirectory() as logs:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(nproc),
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", "test",
               "--log-dir", logs, *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


# For the pytest processes that tests start: plugins those runs do not use, left unloaded (each costs about a
# second of start-up per process; the suite's own runs leave out schemathesis's by pyproject.toml's addopts)
QUIET_PLUGINS = ("-p", "no:schemathesis", "-p", "no:hypothesispytest")

# The test files of 6 s and more, longest first (seconds under pytest-xdist, 2026-11-28: 70 for test_distributed.py
# down to 6; test_compile.py, 28 s of CPU with inductor's cache warm, takes about 78 s cold, as on a new machine):
# scripts/test.sh hands whole files to its two processes in this order (--no-loadscope-reorder), then the short
# rest as collected, so that no long file runs alone at the end.
LONGEST_FIRST = ("test_distributed.py", "test_kinds_matrix.py", "test_compile.py", "test_gpu_study_script.py",
                 "test_synthetic.py", "test_experiment.py", "test_gpu_scripts.py", "test_sentence_eval_probing.py",
                 "test_resume.py", "test_sentence_eval_suites.py", "test_cli.py", "test_int8.py",
                 "test_work_dir_lock.py", "test_zero_shot_study.py", "test_serve.py", "test_output_targets.py",
                 "test_environment_faults.py", "test_extension.py", "test_fuzz.py", "test_suite_guard.py",
                 "test_tensorboard.py", "test_docs.py", "test_page.py", "test_serve_limits.py", "test_token_batches.py",
                 "test_encoder_analysis.py", "test_checkpoint.py", "test_agreement.py", "test_wheel.py")


def pytest_collection_modifyitems(config, items):
    """The files of `LONGEST_FIRST` first, in its order; the rest as collected."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: tests keep their order in a file


# Tiny models gain nothing from a second thread, and one thread stays fast when the machine is busy.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def one_thread():
    """Every test starts with one thread: `--threads N` run through `main()` and CTranslate2's translators (they
    share torch's OpenMP) leave the count they set for the rest of the process. Reset after each test too, so
    that the session's models, trained when a test first asks for them, are trained with one thread as well."""
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(1)


def write_multiway_corpus(root: Path, name: str, texts: dict[str, dict[str, list[str]]]) -> Path:
    """A corpus YAML over `texts` (split -> language -> lines), one file per split and language."""
    splits: dict[str, dict[str, str]] = {}
    for split, by_lang in texts.items():
        splits[split] = {}
        for lang, lines in by_lang.items():
            (root / f"{split}.{lang}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            splits[split][lang] = f"{split}.{lang}"
    corpus = root / "corpus.yaml"
    corpus.write_text(yaml.safe_dump({"name": name, "languages": list(next(iter(texts.values()))), "splits": splits}),
                      encoding="utf-8")
    return corpus


def tiny_config(corpus: Path, work_dir: Path, **sections) -> dict:
    """A model small enough to train for seconds; sections override parts of it."""
    cfg = {
        "name": "tiny",
        "corpus": str(corpus),
        "work_dir": str(work_dir),
        "preprocess": {"vocab_size": 400, "max_train_sentences": 200, "max_valid_sentences": 40, "max_len": 40},
        "directions": {"mode": "bilingual", "pairs": [["en", "de"]]},
        "model": {"embed_dim": 48, "encoder": {"hidden": 64, "layers": 1}, "bridge": {"heads": 4, "hidden": 32},
                  "decoder": {"hidden": 64, "layers": 1}, "dropout": 0.0},
        # no curves.png: drawing it took about a fifth of a tiny run's time (tests that look at it turn it on);
        # fp32, not `auto`: on a CPU with native bf16 `auto` chooses by timing a probe, so a test comparing numbers
        # could train in bf16 in one run and fp32 in the next (the tests of `auto` ask for it)
        "train": {"max_steps": 30, "valid_every": 1000, "log_every": 10, "batch_size": 20, "lr": 0.005, "seed": 7,
                  "curves": False, "precision": "fp32"},
    }
    for key, value in sections.items():
        cfg[key] = {**cfg.get(key, {}), **value} if isinstance(value, dict) else value
    return cfg


Built = TypeVar("Built")


def built_once(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory, name: str,
               build: Callable[[Path], Built]) -> Built:
    """`build(folder)` once per test run, shared by pytest-xdist's worker processes (scripts/test.sh runs the suite
    in two): the first worker to ask builds it under a file lock in the folder all workers' temporary folders share,
    and pickles what it returns there; the others wait and read that. A failed build leaves nothing behind, so the
    next worker to ask tries again (and fails with the same error). Without xdist: built in a folder of its own."""
    if not hasattr(config, "workerinput"):
        return build(tmp_path_factory.mktemp(name))
    shared = tmp_path_factory.getbasetemp().parent / "built-once"
    shared.mkdir(exist_ok=True)
    result = shared / f"{name}.pickle"
    with FileLock(str(shared / f"{name}.lock")):
        if not result.is_file():
            folder = shared / name
            folder.mkdir()
            built = build(folder)
            result.write_bytes(pickle.dumps(built))
            return built
    return pickle.loads(result.read_bytes())


@pytest.fixture(scope="session")
def multi30k_corpus(request, tmp_path_factory) -> Path:
    if not (MULTI30K / "train.en.gz").is_file():
        missing("../shared/data/multi30k is not available")
    return built_once(request.config, tmp_path_factory, "m30k", lambda folder: get_multi30k(folder, MULTI30K))


@pytest.fixture(scope="session")
def trained_model(request, multi30k_corpus, tmp_path_factory) -> Path:
    """en<->de + de->de tiny bridge model, overfitted on 200 lines (about 20 s on 2 cores)."""
    from interlingua.training.trainer import train

    def build(work: Path) -> Path:
        cfg = parse_config(tiny_config(multi30k_corpus, work,
                                       directions={"mode": "explicit", "pairs": [["en", "de"], ["de", "en"]],
                                                   "monolingual": True},
                                       train={"max_steps": 600, "valid_every": 600, "batch_size": 25, "lr": 0.01}))
        return train(cfg).best_checkpoint
    return built_once(request.config, tmp_path_factory, "trained", build)


@pytest.fixture(scope="session")
def untrained_model(request, trained_model, tmp_path_factory) -> Path:
    """trained_model's architecture and vocabularies with freshly initialised weights: \
a model folder that learned nothing."""
    from interlingua.inference.api import load
    return built_once(request.config, tmp_path_factory, "untrained",
                      lambda folder: load(trained_model).untrained_like(seed=1).save(folder / "model"))


# --- tiny trained models of every kind, each trained once per session ------------------------------------------
#
# The synthetic task (in the manner of Sockeye's sequence-copy tests): language `xa` writes sentences of 2-6
# words drawn from eight word types `a`..`h`; its translation in `xb` is the same sentence reversed, each word
# mapped to a fixed `xb` word (`a`->`1`, ..., `h`->`8`). Every word is one subword, so token accuracy is
# measured on words. Train, validation and test splits are generated (seeded); no test or validation sentence
# occurs in the training split.

SOURCE_WORDS = list("abcdefgh")
TARGET_WORD = {w: str(i) for i, w in enumerate(SOURCE_WORDS, start=1)}
SPLIT_SIZES = {"train": 2000, "val": 50, "test": 200}
KIND_STEPS = 300
"""Training steps of every kind's model unless its entry in `KINDS` says otherwise."""

# One line per combination of kinds: the `--set` overrides that select it (name: encoder-bridge-decoder).
# A kind that needs other settings (learning rate, steps) to learn the task sets them here too.
KINDS: dict[str, dict] = {
    "bilstm-attention-lstm": {"model.encoder.type": "bilstm", "model.bridge.type": "attention",
                              "model.decoder.type": "lstm"},
    "bilstm-attention-lstm_feed": {"model.encoder.type": "bilstm", "model.bridge.type": "attention",
                                   "model.decoder.type": "lstm", "model.decoder.input_feed": True},
    "bilstm-none-lstm": {"model.encoder.type": "bilstm", "model.bridge.type": "none", "model.decoder.type": "lstm"},
    "bilstm-none-lstm_feed": {"model.encoder.type": "bilstm", "model.bridge.type": "none", "model.decoder.type": "lstm",
                              "model.decoder.input_feed": True},
    "transformer-attention-transformer": {"model.encoder.type": "transformer", "model.bridge.type": "attention",
                                          "model.decoder.type": "transformer", "model.encoder.positions": "learned",
                                          "model.decoder.positions": "learned", "train.lr": 0.001},
    "transformer-none-transformer": {"model.encoder.type": "transformer", "model.bridge.type": "none",
                                     "model.decoder.type": "transformer", "train.lr": 0.001},
    "transformer-none-transformer_tied": {"model.encoder.type": "transformer", "model.bridge.type": "none",
                                          "model.encoder.heads": 4, "model.decoder.type": "transformer",
                                          "model.decoder.heads": 4, "model.decoder.hidden": 32,
                                          "model.decoder.tie_embeddings": True, "train.lr": 0.001,
                                          "train.max_steps": 600, "train.valid_every": 600},
    "bilstm-attention-transformer": {"model.encoder.type": "bilstm", "model.bridge.type": "attention",
                                     "model.decoder.type": "transformer", "model.decoder.positions": "learned",
                                     "train.lr": 0.003},
    "bilstm-ntdv-lstm": {"model.encoder.type": "bilstm", "model.bridge.type": "ntdv", "model.bridge.heads": 8,
                         "model.bridge.hidden": 64, "model.decoder.type": "lstm", "train.max_steps": 600,
                         "train.valid_every": 600},
}


def target_of(source: str) -> str:
    return " ".join(TARGET_WORD[w] for w in reversed(source.split()))


@pytest.fixture(scope="session")
def synthetic_corpus(request, tmp_path_factory) -> Path:
    """Multi-way corpus YAML with train/val/test files of `xa` sentences and their `xb` translations."""
    return built_once(request.config, tmp_path_factory, "kinds_corpus", _write_synthetic_corpus)


def _write_synthetic_corpus(root: Path) -> Path:
    import random
    rng = random.Random(3)

    def sentence() -> str:
        return " ".join(rng.choice(SOURCE_WORDS) for _ in range(rng.randint(2, 6)))

    held_out: set[str] = set()
    texts = {}
    for split in ("test", "val", "train"):
        lines: list[str] = []
        while len(lines) < SPLIT_SIZES[split]:
            s = sentence()
            if split != "train" or s not in held_out:
                lines.append(s)
        held_out.update(lines)
        texts[split] = lines
    return write_multiway_corpus(root, "reverse_map", {split: {"xa": lines, "xb": [target_of(s) for s in lines]}
                                                       for split, lines in texts.items()})


def kind_config_yaml(corpus: Path, work_dir: Path) -> Path:
    """The tiny xa -> xb experiment every kind trains (its kind set with `--set`), written beside `work_dir`."""
    cfg = tiny_config(corpus, work_dir,
                      preprocess={"vocab_size": 50, "max_train_sentences": None, "max_valid_sentences": 50,
                                  "max_len": 20},
                      directions={"mode": "bilingual", "pairs": [["xa", "xb"]]},
                      model={"embed_dim": 32, "bridge": {"heads": 8, "hidden": 32}},
                      train={"max_steps": KIND_STEPS, "valid_every": KIND_STEPS, "log_every": 100, "batch_size": 32,
                             "lr": 0.01, "seed": 1, "threads": 1, "precision": "fp32"})
    cfg["name"] = "kinds"
    path = work_dir.parent / "experiment.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


@dataclass(frozen=True)
class TrainedKind:
    checkpoint: Path
    """best.pt of the run."""
    printed: str
    """What `interlingua train` wrote to stdout."""


class KindModels:
    """Each kind of `KINDS` trained on the synthetic task through `interlingua train`, the first time a test asks
    for it; every later test of the session gets the same checkpoint (tests only read it)."""

    def __init__(self, corpus: Path, config: pytest.Config, tmp_path_factory: pytest.TempPathFactory):
        self.corpus, self.config, self.tmp_path_factory = corpus, config, tmp_path_factory
        self._trained: dict[str, TrainedKind] = {}

    def __getitem__(self, name: str) -> TrainedKind:
        if name not in self._trained:
            self._trained[name] = built_once(self.config, self.tmp_path_factory, f"kind-{name}",
                                             lambda folder: self._train(name, folder))
        return self._trained[name]

    def _train(self, name: str, folder: Path) -> TrainedKind:
        import contextlib
        import io
        import json

        from interlingua.cli import main
        config = kind_config_yaml(self.corpus, folder / "run")
        sets = [arg for key, value in KINDS[name].items() for arg in ("--set", f"{key}={json.dumps(value)}")]
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            code = main(["train", str(config), *sets])
        assert code == 0, f"interlingua train of kind {name} exited {code}:\n{printed.getvalue()[-3000:]}"
        return TrainedKind(folder / "run" / "best.pt", printed.getvalue())


@pytest.fixture(scope="session")
def kind_models(request, synthetic_corpus, tmp_path_factory) -> KindModels:
    """Tiny models of every kind of `KINDS` (about 3-6 s each on 2 cores, trained on first use)."""
    return KindModels(synthetic_corpus, request.config, tmp_path_factory)


@pytest.fixture(scope="session")
def letter_code_transformer(request, tmp_path_factory) -> Path:
    """The shared Transformer of a letter-for-letter code between xa and xb (tests/test_export_ctranslate2.py:
    `train_letter_code_transformer`), for the CTranslate2 export and the shortlist tests."""
    from test_export_ctranslate2 import train_letter_code_transformer
    return built_once(request.config, tmp_path_factory, "letter_code", train_letter_code_transformer)
