#!/usr/bin/env bash
# Create .venv and install interlingua with its dependencies from PyPI, through uv (on a 2-core VM about 35 s
# against pip's 110, the same versions; pip where uv cannot be installed or cannot install them).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
EXTRAS=".[test,probing,tensorboard]"  # probing: spaCy parser for Tense/SubjNum
# PyTorch 2.13.0: the build already installed, if any (kept: uv would otherwise be free to fetch another, a CUDA
# one of several GB); else a torch 2.13.0 wheel in pip's local wheel folders (PIP_FIND_LINKS: a machine given
# its CPU build); else PyPI's.
torch_spec="torch==2.13.0"
for folder in ${PIP_FIND_LINKS:-}; do
  for wheel in "$folder"/torch-2.13.0[+-]*.whl; do
    if [ -f "$wheel" ]; then torch_spec=$wheel; fi
  done
done
installed=$(.venv/bin/python -c "import torch; print(torch.__version__.split('+')[0])" 2>/dev/null || true)
if [ -n "$installed" ]; then torch_spec="torch==$installed"; fi
# --compile-bytecode as pip does (else the suite's first processes compile the packages, side by side: about
# 50 s more)
if .venv/bin/pip install -q uv >/dev/null 2>&1 \
    && .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python "$torch_spec" -e "$EXTRAS"; then
  :
else
  echo "setup: uv could not install the dependencies; installing them with pip" >&2
  [ -n "$installed" ] || .venv/bin/pip install -q "torch==2.13.0"
  .venv/bin/pip install -q -e "$EXTRAS"
fi
