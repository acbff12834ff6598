"""The package as users get it: a wheel built from the repository, installed apart from it, run from a
folder outside it. It must hold everything it names (the service's page, the data checksums), run
without the repository's layout (no `../shared`, no `recipes/`), and put data where `evaluate` and the
demo look for it (the demo's own run from there: tests/test_cli.py).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import MULTI30K, missing

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel's contents installed into a folder of their own: (that folder)."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"  # a copy: setuptools writes build/ and egg-info into the tree it builds
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "interlingua", source / "interlingua",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(root / "dist"), str(source)], capture_output=True, text=True, timeout=300,
                           cwd=root)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (root / "dist").glob("interlingua-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for packaged in ("interlingua/serving/page/index.html", "interlingua/data/checksums/xnli.sha256",
                     "interlingua/cli.py"):
        assert packaged in names, packaged
    assert not any(name.startswith(("tests/", "bench/", "recipes/")) for name in names)
    site = root / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target",
                           str(site), str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return site


def _run(site: Path, cwd: Path, *args: str, env: dict[str, str] | None = None,
         pre: tuple[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m interlingua.cli ARGS` from the installed copy in `cwd` (after writing `pre`: name, text)."""
    if pre is not None:
        (cwd / pre[0]).write_text(pre[1], encoding="utf-8")
    environ = {k: v for k, v in os.environ.items() if k != "INTERLINGUA_DATA"}
    environ.update(PYTHONPATH=str(site), PYTHONSAFEPATH="1", **(env or {}))
    return subprocess.run([sys.executable, "-m", "interlingua.cli", *args], cwd=cwd, env=environ,
                          capture_output=True, text=True, timeout=600)


def test_the_installed_wheel_runs_outside_the_repository(installed, trained_model, tmp_path):
    """The installed copy (not the checkout) answers `--help`, puts `data multi30k` in ./data (where the
    demo and `evaluate` look) and translates with a trained model, from a folder outside the repository."""
    if not (MULTI30K / "train.en.gz").is_file():
        missing("../shared/data/multi30k is not available")
    where = subprocess.run([sys.executable, "-c", "import interlingua; print(interlingua.__file__)"], cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": str(installed), "PYTHONSAFEPATH": "1"},
                           capture_output=True, text=True, timeout=120)
    assert where.stdout.strip().startswith(str(installed)), where.stdout + where.stderr
    helped = _run(installed, tmp_path, "--help")
    assert helped.returncode == 0 and "translate" in helped.stdout, helped.stderr[-2000:]

    got = _run(installed, tmp_path, "data", "multi30k", "--from", str(MULTI30K))
    assert got.returncode == 0, got.stderr[-2000:]
    assert (tmp_path / "data" / "multi30k" / "train.en.gz").is_file()
    assert (tmp_path / "data" / "multi30k" / "corpus.yaml").is_file()

    translated = _run(installed, tmp_path, "translate", "--model", str(trained_model), "--src", "en", "--tgt", "de",
                      "--beam", "1", "-i", str(tmp_path / "in.txt"), pre=("in.txt", "a man is riding a bike .\n"))
    assert translated.returncode == 0 and translated.stdout.strip(), translated.stderr[-2000:]


def test_the_data_folder_follows_its_environment_variable(installed, tmp_path):
    """`$INTERLINGUA_DATA` moves where `interlingua data` writes (and where the demo and `evaluate` read)."""
    if not (MULTI30K / "train.en.gz").is_file():
        missing("../shared/data/multi30k is not available")
    elsewhere = tmp_path / "elsewhere"
    env = {"INTERLINGUA_DATA": str(elsewhere)}
    got = _run(installed, tmp_path, "data", "multi30k", "--from", str(MULTI30K), env=env)
    assert got.returncode == 0, got.stderr[-2000:]
    assert (elsewhere / "multi30k" / "corpus.yaml").is_file() and not (tmp_path / "data").exists()
