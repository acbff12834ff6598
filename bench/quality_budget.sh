#!/usr/bin/env bash
# Quality per CPU budget, en->de at the papers' bilingual sizes. Three runs share the machine
# at the same time, one thread each, for the same wall-clock budget: OpenNMT-py (the peer's
# own script with its thread count set to 1), interlingua with the attention bridge, and
# interlingua without it. Running them side by side gives each the same share of the CPU,
# whatever else the machine is doing. Then each is scored on test_2016_flickr (lowercased
# BLEU / chrF, greedy and beam 5) with translation speed, one after the other, 2 threads.
#
# Settings per model, chosen by step-matched probes at these sizes (bench/results/2026-11-22.md):
# - no bridge: OpenNMT-py's U(-0.1, 0.1) initialisation (`model.param_init=0.1`; dev BLEU 18.0 vs
#   9.8 with PyTorch's default after 400 CPU-scale steps), Adam 4e-4 as the peer;
# - bridge: PyTorch's initialisation (U(+-0.1) cost it dev 11.8 -> 6.5), Adam 2e-3 and the
#   penalty off (`train.penalty_weight=0`): after 900 steps dev BLEU 17.6, against 8.3 with the
#   penalty and 4.5 at Adam 4e-4. Early in training the penalty pulls the heads apart before the
#   decoder knows what it needs from them; the papers found it worth +0.1 BLEU at convergence;
# - both: the training softmax over each batch's target types + 1,024 random ones
#   (`train.softmax_sample=1024`): 1.3x faster steps and better BLEU at equal steps
#   (bench/softmax_sample.sh). SOFTMAX_SAMPLE=0 gives the full softmax.
# Override with NONE_ARGS / ATTENTION_ARGS (extra `--set` options for each of our runs).
#
# Usage (from the project root): BUDGET_MIN=40 bash bench/quality_budget.sh
# Results: bench/results/quality_budget.jsonl (ours), bench/results/opennmt_eval_*.txt (peer).
set -euo pipefail
cd "$(dirname "$0")/.."
BUDGET_MIN="${BUDGET_MIN:-40}"
PEER_DIR="${PEER_DIR:-$HOME/.cache/interlingua-peers}"
DATA="${DATA:-$(cd .. && pwd)/shared/data/multi30k}"
OUT=bench/results/quality_budget.jsonl
WORK=runs/bench_quality_${BUDGET_MIN}min
PEER1=$(mktemp --suffix=.sh)
# The peer saves every 250 steps by default, so its last checkpoint can be ~250 steps short of
# where its budget ended; every 100 keeps it close while costing little time.
sed -e 's/OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2/OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1/' \
    -e 's/^save_checkpoint_steps: 250$/save_checkpoint_steps: 100/' \
  ../shared/peers/opennmt.sh > "$PEER1"

.venv/bin/interlingua data multi30k --dest "$WORK/multi30k" --from "$DATA"
source bench/_our_settings.sh
SOFTMAX_SAMPLE="${SOFTMAX_SAMPLE:-1024}"
NONE_ARGS="${NONE_ARGS:-$OUR_NONE_SETTINGS} --set train.softmax_sample=$SOFTMAX_SAMPLE"
ATTENTION_ARGS="${ATTENTION_ARGS:-$OUR_ATTENTION_SETTINGS} --set train.softmax_sample=$SOFTMAX_SAMPLE"
train_ours() {
  local extra
  if [ "$1" = none ]; then extra=$NONE_ARGS; else extra=$ATTENTION_ARGS; fi
  rm -rf "$WORK/$1"
  OMP_NUM_THREADS=1 .venv/bin/interlingua train recipes/paper_bilingual_en_de.yaml \
    --set corpus="$(pwd)/$WORK/multi30k/corpus.yaml" --set work_dir="$WORK/$1" \
    --set model.bridge.type="$1" --set train.max_minutes="$BUDGET_MIN" \
    --set train.valid_every=500 --set preprocess.max_valid_sentences=300 --set train.threads=1 $extra \
    > "$WORK.$1.log" 2>&1
}
PEER_DIR="$PEER_DIR" BUDGET_S=$((BUDGET_MIN * 60)) DATA="$DATA" bash "$PEER1" train > "$WORK.peer.log" 2>&1 &
train_ours attention &
train_ours none &
wait
PEER_DIR="$PEER_DIR" DATA="$DATA" bash ../shared/peers/opennmt.sh eval >> "$WORK.peer.log" 2>&1
cp "$PEER_DIR/results/eval.txt" "bench/results/opennmt_eval_${BUDGET_MIN}min_$(date +%F_%H%M).txt"
for bridge in attention none; do
  .venv/bin/python bench/translate_speed.py --model "$WORK/$bridge/best.pt" --data "$DATA" --out "$OUT"
done
