#!/usr/bin/env bash
# Create .venv and install interlingua with its dependencies. PyTorch comes first, pinned to
# the CPU build so that no CUDA packages are pulled in; everything else from PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/pip install -q "torch==2.13.0"
EXTRAS=".[test,probing,tensorboard]"  # probing: spaCy parser for Tense/SubjNum
# The rest through uv (from PyPI; on a 2-core VM about 15 s against pip's 80, the same versions), with torch held
# at the build installed above (uv would otherwise be free to fetch another, a CUDA one of several GB), compiled to
# bytecode as pip does (else the suite's first processes compile it, side by side: about 50 s more); pip where uv
# cannot be installed or cannot install them.
torch_version=$(.venv/bin/python -c "from importlib.metadata import version; print(version('torch').split('+')[0])")
if .venv/bin/pip install -q uv >/dev/null 2>&1 \
    && .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python "torch==$torch_version" -e "$EXTRAS"; then
  :
else
  echo "setup: uv could not install the dependencies; installing them with pip" >&2
  .venv/bin/pip install -q -e "$EXTRAS"
fi
