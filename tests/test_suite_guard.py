"""Under CI=true a test that would skip for want of data fails the run instead of shrinking it."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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


def _run_pytest(tmp_path: Path, body: str, ci: bool) -> subprocess.CompletedProcess:
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_probe.py").write_text(body)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = "true"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("body", [MISSING_DATA, SKIPIF], ids=["missing", "skipif"])
def test_skip_is_allowed_locally_and_fails_under_ci(tmp_path, body):
    local = _run_pytest(tmp_path, body, ci=False)
    assert local.returncode == 0, local.stdout + local.stderr
    assert "1 passed, 1 skipped" in local.stdout
    ci = _run_pytest(tmp_path, body, ci=True)
    assert ci.returncode == 1, ci.stdout + ci.stderr
    assert "CI=true" in ci.stdout
