"""Shared fixtures: real Multi30k from ../shared/data, and one tiny trained model per session."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch
import yaml

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
os.environ["INTERLINGUA_CACHE_DIR"] = tempfile.mkdtemp(prefix="interlingua-test-cache-")


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


# Tiny models gain nothing from a second thread, and one thread stays fast when the machine is busy.
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
        "train": {"max_steps": 30, "valid_every": 1000, "log_every": 10, "batch_size": 20, "lr": 0.005, "seed": 7},
    }
    for key, value in sections.items():
        cfg[key] = {**cfg.get(key, {}), **value} if isinstance(value, dict) else value
    return cfg


@pytest.fixture(scope="session")
def multi30k_corpus(tmp_path_factory) -> Path:
    if not (MULTI30K / "train.en.gz").is_file():
        missing("../shared/data/multi30k is not available")
    return get_multi30k(tmp_path_factory.mktemp("m30k"), MULTI30K)


@pytest.fixture(scope="session")
def trained_model(multi30k_corpus, tmp_path_factory) -> Path:
    """en<->de + de->de tiny bridge model, overfitted on 200 lines (about 20 s on 2 cores)."""
    from interlingua.training.trainer import train
    work = tmp_path_factory.mktemp("trained")
    cfg = parse_config(tiny_config(multi30k_corpus, work,
                                   directions={"mode": "explicit", "pairs": [["en", "de"], ["de", "en"]],
                                               "monolingual": True},
                                   train={"max_steps": 600, "valid_every": 600, "batch_size": 25, "lr": 0.01}))
    result = train(cfg)
    return result.best_checkpoint


@pytest.fixture(scope="session")
def untrained_model(trained_model, tmp_path_factory) -> Path:
    """trained_model's architecture and vocabularies with freshly initialised weights: \
a checkpoint that learned nothing."""
    from interlingua.inference.api import load
    from interlingua.modules.checkpoint import read_checkpoint, save_atomic
    payload = read_checkpoint(trained_model)
    payload.pop("training", None)
    payload["model"] = load(trained_model).untrained_like(seed=1)._network.state_dict()
    path = tmp_path_factory.mktemp("untrained") / "best.pt"
    save_atomic(payload, path)
    return path
