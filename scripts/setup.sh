#!/usr/bin/env bash
# Create .venv and install interlingua with its dependencies from PyPI, through uv (on a 2-core VM about 40 s
# against pip's 110, the same versions; pip where uv cannot be installed or cannot install them).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
EXTRAS=".[test,probing,tensorboard]"  # probing: spaCy parser for Tense/SubjNum
torch_version() { .venv/bin/python -c "import torch; print(torch.__version__.split('+')[0])" 2>/dev/null || true; }
# PyTorch 2.13.0. The build already installed is kept (uv would otherwise be free to fetch another, a CUDA one of
# several GB). Else a torch 2.13.0 wheel file in pip's local wheel folders (PIP_FIND_LINKS: a machine given its
# CPU build) goes into uv's one install below; else pip installs torch first, as pip is configured
# (PIP_INDEX_URL, PIP_FIND_LINKS, ..., which uv does not read).
torch_spec=""
for folder in ${PIP_FIND_LINKS:-}; do
  for wheel in "$folder"/torch-2.13.0[+-]*.whl; do
    if [ -f "$wheel" ]; then torch_spec=$wheel; fi
  done
done
installed=$(torch_version)
if [ -z "$installed" ] && [ -z "$torch_spec" ]; then
  .venv/bin/pip install -q "torch==2.13.0"
  installed=$(torch_version)
fi
if [ -n "$installed" ]; then torch_spec="torch==$installed"; fi
# --compile-bytecode as pip does (else the suite's first processes compile the packages, side by side: about
# 50 s more)
if .venv/bin/pip install -q uv >/dev/null 2>&1 \
    && .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python "$torch_spec" -e "$EXTRAS"; then
  :
else
  echo "setup: uv could not install the dependencies; installing them with pip" >&2
  [ -n "$installed" ] || .venv/bin/pip install -q "$torch_spec"
  .venv/bin/pip install -q -e "$EXTRAS"
fi
