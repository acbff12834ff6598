#!/usr/bin/env bash
# Set up (idempotent) and run the test suite on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# one thread per test process (two run side by side, below): BLAS threads that spin beside a second process
# made numpy's SVD checks 3.5x slower
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# bytecode caches written (__pycache__/, git-ignored) even where PYTHONDONTWRITEBYTECODE is set: the suite starts
# about a hundred Python processes and a few child pytests, and without them each compiled the package again and
# each pytest rewrote the test modules' asserts again (about 5 s of every collection of the whole suite)
unset PYTHONDONTWRITEBYTECODE
.venv/bin/ruff check interlingua tests bench   # lint (pyproject.toml [tool.ruff]); fails the run
# types (pyproject.toml [tool.mypy]): mypy (about 25 s of one core without its cache) runs niced beside the docs
# build and the suite, on the CPU time they leave (the suite's two processes keep the cores about 90% busy); its
# report and exit status come after the suite's, and either failing fails the run
mypy_log=$(mktemp)
nice -n 19 .venv/bin/mypy interlingua >"$mypy_log" 2>&1 &
mypy_pid=$!
trap 'kill "$mypy_pid" 2>/dev/null || true; rm -f "$mypy_log"' EXIT
# the documentation site (mkdocs.yml): --strict turns a broken link, anchor or API reference into a failure
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict -d .site-docs   # not --quiet: it hides the warnings --strict counts
set +e
# -rs lists every skip (under CI=true a skip fails the run); -m "not cuda" leaves out the tests that need a
# CUDA GPU (tests/test_cuda.py, run by scripts/gpu-check.sh on a GPU machine): neither run nor skipped.
# -n: one process per core (pytest-xdist; TEST_WORKERS to choose, 0 for one process), each test file in one of them
# (--dist loadfile: a file's module fixtures are built once), in the order tests/conftest.py gives (the longest
# files first; --no-loadscope-reorder, else xdist starts the files with the most tests first); the session's tiny
# models are shared (conftest.py)
.venv/bin/python -m pytest tests -rs -m "not cuda" -n "${TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
tests_status=$?
wait "$mypy_pid"
mypy_status=$?
set -e
echo "mypy interlingua:"
cat "$mypy_log"
if [ "$tests_status" -ne 0 ]; then exit "$tests_status"; fi
exit "$mypy_status"
