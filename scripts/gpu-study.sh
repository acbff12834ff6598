#!/usr/bin/env bash
# On a GPU machine (one command of at most 9 minutes; run it again to go on): paper 004's Table 5 core,
# Baseline and Residual at the CPU recipe's model size with GPU-sized token batches, both trained at once
# until their dev loss stops improving. Training stops 2.5 minutes before the end with SIGTERM (last.pt
# saved); the runs stay in runs/gpu-study (--work) and the next command resumes them. Each command scores
# what there is: supervised, zero-shot and pivot BLEU (cased and lowercased), off-target rates, dev curves,
# into --out DIR, else $OUT, else runs/gpu-study/out (study.md, study.json, study_dev_curves.png,
# metrics_<row>.jsonl, study.log, install.log; never a checkpoint). Other arguments pass through to
# bench/gpu_study.py (--device, --tiny, --minutes, --rows, --set KEY=VALUE, ...). See docs/TESTING.md, "Checking on a GPU".
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
out=${out:-runs/gpu-study/out}
mkdir -p "$out"
source scripts/gpu-env.sh "$out/install.log"
exec "$PY" bench/gpu_study.py --out "$out" ${args[@]+"${args[@]}"}
