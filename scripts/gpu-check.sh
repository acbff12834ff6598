#!/usr/bin/env bash
# On a GPU machine (one command, about 4 minutes on one H200 as measured): the CUDA tests, a short training
# per precision with an exact-resume check, torchrun on nccl, throughput and peak memory; everything it
# learns goes to one folder: --out DIR, else $OUT, else runs/gpu-check/out (at most 8 files of at most 16 MiB:
# install.log, pytest.log, train.log, metrics.jsonl, summary.json, summary.md). Needs nothing from outside:
# it installs the wheels scripts/gpu-prepare.sh put in .whl/ into .site/ and reads .gpu-data/. Other
# arguments pass through to bench/gpu_check.py (--device, --tiny, --budget-s, --skip, --precisions, ...).
# Exit status 1 when a step failed; each step's result and error are in summary.json. See docs/TESTING.md, "Checking on a GPU".
set -uo pipefail
cd "$(dirname "$0")/.."
GPU_T0=$(date +%s.%N)
export GPU_T0
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
source scripts/gpu-env.sh "$out/install.log"
exec "$PY" bench/gpu_check.py --out "$out" ${args[@]+"${args[@]}"}
