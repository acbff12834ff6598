#!/usr/bin/env bash
# On a GPU machine (one command, about 8 minutes on one H100 by design): the CUDA tests, a short training
# per precision with an exact-resume check, torchrun on nccl, throughput and peak memory; everything it
# learns goes to one folder: --out DIR, else $OUT, else runs/gpu-check/out (at most 8 files of at most 16 MiB:
# install.log, pytest.log, train.log, metrics.jsonl, summary.json, summary.md). Needs nothing from outside:
# it installs the wheels scripts/gpu-prepare.sh put in .whl/ into .site/ and reads .gpu-data/. Other
# arguments pass through to bench/gpu_check.py (--device, --tiny, --budget-s, --skip, --precisions, ...).
# Exit status 1 when a step failed; each step's result and error are in summary.json. See docs/GPU.md.
set -uo pipefail
cd "$(dirname "$0")/.."
GPU_CHECK_T0=$(date +%s.%N)
export GPU_CHECK_T0
out=${OUT:-}
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --out=*) out=${1#--out=}; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
out=${out:-runs/gpu-check/out}
mkdir -p "$out"
PY=${PYTHON:-python3}
wheels=${GPU_CHECK_WHEELS:-.whl}
site=${GPU_CHECK_SITE:-.site}
case "$site" in /*) ;; *) site="$PWD/$site" ;; esac
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
{
  echo "date $(date -Iseconds), $(uname -srm), $("$PY" -V 2>&1)"
  if compgen -G "$wheels/*.whl" > /dev/null; then
    echo "\$ $PY -m pip install --no-index --no-deps --upgrade --target $site $wheels/*.whl"
    "$PY" -m pip install --no-index --no-deps --upgrade --quiet --disable-pip-version-check --target "$site" \
      "$wheels"/*.whl 2>&1
    echo "exit $?"
  else
    echo "no wheels in $wheels (scripts/gpu-prepare.sh makes them): using what is installed"
  fi
  echo "installed after $("$PY" -c 'import os, time; print(round(time.time() - float(os.environ["GPU_CHECK_T0"]), 1))') s"
  "$PY" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'GPU', torch.cuda.is_available() and torch.cuda.get_device_name(0))" 2>&1
  "$PY" -c "import pydantic, fastapi, starlette, uvicorn, langid, sentence_splitter; print('pydantic', pydantic.VERSION, 'fastapi', fastapi.__version__)" 2>&1
} > "$out/install.log" 2>&1
tail -n 4 "$out/install.log"
exec "$PY" bench/gpu_check.py --out "$out" "${args[@]}"
