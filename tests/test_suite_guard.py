"""Under CI=true a test that would skip for want of data fails the run instead of shrinking it."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import QUIET_PLUGINS

CONFTEST = Path(__file__).with_name("conftest.py")

MISSING_DATA = """
from conftest import missing

def test_needs_data():
    missing("../shared/data/nothing is not available")

def test_runs():
    assert True
"""

SKIPIF = """
import pytest

@pytest.mark.skipif(True, reason="no data")
def test_marked():
    pass

def test_runs():
    assert True
"""


PROBES = {"missing": MISSING_DATA, "skipif": SKIPIF}


@pytest.fixture(scope="module")
def probes(tmp_path_factory) -> Path:
    """A folder with the suite's conftest.py and one test file per way of skipping."""
    root = tmp_path_factory.mktemp("probes")
    shutil.copy(CONFTEST, root / "conftest.py")
    for name, body in PROBES.items():
        (root / f"test_probe_{name}.py").write_text(body)
    return root


def _run_pytest(root: Path, target: Path, ci: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = "true"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *QUIET_PLUGINS,
                           str(target)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_skips_are_allowed_locally(probes):
    local = _run_pytest(probes, probes, ci=False)
    assert local.returncode == 0, local.stdout + local.stderr
    assert "2 passed, 2 skipped" in local.stdout
    assert "nothing is not available" in local.stdout and "no data" in local.stdout  # one skip of each kind


@pytest.mark.parametrize("name", sorted(PROBES))
def test_a_skip_fails_the_run_under_ci(probes, name):
    ci = _run_pytest(probes, probes / f"test_probe_{name}.py", ci=True)
    assert ci.returncode == 1, ci.stdout + ci.stderr
    assert "CI=true" in ci.stdout
