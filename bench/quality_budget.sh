#!/usr/bin/env bash
# Quality per CPU budget, en->de at the papers' bilingual sizes: OpenNMT-py, interlingua with
# the attention bridge, interlingua without it, each trained for BUDGET_MIN minutes on this
# machine one after the other, then scored on test_2016_flickr (lowercased BLEU / chrF, greedy
# and beam 5) with translation speed. Results: bench/results/quality_budget.jsonl and the
# peer's $PEER_DIR/results/eval.txt.
#
# Usage (from the project root): BUDGET_MIN=40 bash bench/quality_budget.sh [peer] [ours]
set -euo pipefail
cd "$(dirname "$0")/.."
BUDGET_MIN="${BUDGET_MIN:-40}"
PEER_DIR="${PEER_DIR:-$HOME/.cache/interlingua-peers}"
DATA="${DATA:-$(cd .. && pwd)/shared/data/multi30k}"
OUT=bench/results/quality_budget.jsonl
WORK=runs/bench_quality_${BUDGET_MIN}min
export OMP_NUM_THREADS=2
STAGES="${*:-peer ours}"

if [[ " $STAGES " == *" peer "* ]]; then
  PEER_DIR="$PEER_DIR" BUDGET_S=$((BUDGET_MIN * 60)) DATA="$DATA" bash ../shared/peers/opennmt.sh train eval
  cp "$PEER_DIR/results/eval.txt" "bench/results/opennmt_eval_${BUDGET_MIN}min_$(date +%F).txt"
fi

if [[ " $STAGES " == *" ours "* ]]; then
  .venv/bin/interlingua data multi30k --dest "$WORK/multi30k" --from "$DATA"
  for bridge in attention none; do
    rm -rf "$WORK/$bridge"
    .venv/bin/interlingua train recipes/paper_bilingual_en_de.yaml \
      --set corpus="$(pwd)/$WORK/multi30k/corpus.yaml" --set work_dir="$WORK/$bridge" \
      --set model.bridge.type=$bridge --set train.max_minutes="$BUDGET_MIN" \
      --set train.valid_every=500 --set preprocess.max_valid_sentences=300 --set train.threads=2
    .venv/bin/python bench/translate_speed.py --model "$WORK/$bridge/best.pt" --data "$DATA" --out "$OUT"
  done
fi
