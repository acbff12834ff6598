#!/usr/bin/env bash
# Set up (idempotent) and run the test suite on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
.venv/bin/ruff check interlingua tests bench   # lint (pyproject.toml [tool.ruff]); fails the run
.venv/bin/mypy interlingua                     # types (pyproject.toml [tool.mypy]); fails the run
.venv/bin/python -m pytest tests -rs "$@"  # -rs lists every skip; under CI=true a skip fails the run
