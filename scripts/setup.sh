#!/usr/bin/env bash
# Create .venv and install interlingua with its dependencies. PyTorch comes first, pinned to
# the CPU build so that no CUDA packages are pulled in; everything else from PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/pip install -q "torch==2.13.0"
.venv/bin/pip install -q -e ".[test,probing,tensorboard]"  # probing: spaCy parser for Tense/SubjNum
