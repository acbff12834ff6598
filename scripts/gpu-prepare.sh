#!/usr/bin/env bash
# On a machine with internet: put into ignored folders of the project what a GPU machine without it needs
# for scripts/gpu-check.sh and scripts/gpu-study.sh: wheels for its Python 3.12 (x86-64, manylinux) in
# .whl/, Multi30k in .gpu-data/multi30k/, and .gpu-data/manifest.json (files, sizes, SHA-256, versions).
# Idempotent; fails when the project and both folders come to more than 64 MiB. See docs/TESTING.md, "Checking on a GPU".
# Arguments pass through to bench/gpu_prepare.py (--wheels, --data, --multi30k, --limit-mib, --extras).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
exec "$PY" bench/gpu_prepare.py "$@"
