#!/usr/bin/env bash
# Quality per CPU budget, en->de at the papers' bilingual sizes. Three trainings share the
# machine at the same time, one thread each, under the same wall-clock budget: OpenNMT-py (the
# peer's own script with its thread count set to 1), interlingua with the attention bridge, and
# interlingua without it. Running them side by side gives each the same share of the CPU,
# whatever else the machine is doing.
#
# The three are treated alike:
# - clock: each runs under `timeout --signal=TERM $BUDGET_S`, started together; the budget
#   counts everything from process start (imports, data loading, model building, checkpoint
#   saves). Data preparation (the peer's `prep` stage, our `interlingua prepare`) is done
#   before the clock starts, on both sides.
# - checkpoint: both are scored at their last checkpoint. Ours validates only once, after the
#   budget (SIGTERM ends the step, then it validates and saves last.pt); the peer saves every
#   50 steps (its script's 250, changed here), so its last checkpoint is at most 49 steps short
#   of where it stopped. Both step counts are recorded.
# - speed: steps from the wall-clock stamps of both sides' log lines, every 25 steps
#   (bench/budget_summary.py); translation of test_2016_flickr timed interleaved, fresh processes
#   on both sides, same clock rule, same scorer (bench/translate_vs_peer.py).
#
# Settings of our models, chosen by step-matched probes at these sizes (bench/results/2026-11-22.md),
# live in bench/_our_settings.sh: no bridge: OpenNMT-py's U(-0.1, 0.1) initialisation, Adam 4e-4
# as the peer; bridge: PyTorch's initialisation, Adam 2e-3, the penalty off; both: the training
# softmax over each batch's target types + 1,024 random ones (`train.softmax_sample=1024`;
# SOFTMAX_SAMPLE=0 gives the full softmax). Override with NONE_ARGS / ATTENTION_ARGS (extra
# `--set` options for each of our runs).
#
# Usage (from the project root, after `PEER_DIR=... bash ../shared/peers/opennmt.sh setup prep`):
#   BUDGET_MIN=40 PEER_DIR=... bash bench/quality_budget.sh
# Results, appended to bench/results/quality_budget.jsonl: one "budget" line per run (steps in
# the budget, steps/s), then translate_vs_peer's "pass" and "summary" lines (sentences/s, BLEU,
# chrF, greedy and beam 5); the peer's step lines in bench/results/opennmt_budget_<date>_<time>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
BUDGET_MIN="${BUDGET_MIN:-40}"
BUDGET_S=$((BUDGET_MIN * 60))
PEER_DIR="${PEER_DIR:-$HOME/.cache/interlingua-peers}"
DATA="${DATA:-$(cd .. && pwd)/shared/data/multi30k}"
OUT=bench/results/quality_budget.jsonl
WORK=runs/bench_quality_${BUDGET_MIN}min
PEER1=$(mktemp --suffix=.sh)
sed -e 's/OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2/OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1/' \
    -e 's/^save_checkpoint_steps: 250$/save_checkpoint_steps: 50/' \
    -e 's/^report_every: 100$/report_every: 25/' \
  ../shared/peers/opennmt.sh > "$PEER1"
for edit in "OMP_NUM_THREADS=1 MKL_NUM_THREADS=1" "save_checkpoint_steps: 50" "report_every: 25"; do
  grep -q "$edit" "$PEER1" || { echo "the peer's script changed: could not set '$edit'" >&2; exit 1; }
done
[ -f "$PEER_DIR/data/test_2016_flickr.sp.en" ] || { echo "run PEER_DIR=$PEER_DIR bash ../shared/peers/opennmt.sh setup prep first" >&2; exit 1; }

.venv/bin/interlingua data multi30k --dest "$WORK/multi30k" --from "$DATA"
source bench/_our_settings.sh
SOFTMAX_SAMPLE="${SOFTMAX_SAMPLE:-1024}"
NONE_ARGS="${NONE_ARGS:-$OUR_NONE_SETTINGS} --set train.softmax_sample=$SOFTMAX_SAMPLE"
ATTENTION_ARGS="${ATTENTION_ARGS:-$OUR_ATTENTION_SETTINGS} --set train.softmax_sample=$SOFTMAX_SAMPLE"
our_args() {  # bridge type -> the `--set` options of that run
  local extra
  if [ "$1" = none ]; then extra=$NONE_ARGS; else extra=$ATTENTION_ARGS; fi
  echo "--set corpus=$(pwd)/$WORK/multi30k/corpus.yaml --set work_dir=$WORK/$1 --set model.bridge.type=$1" \
       "--set train.max_steps=100000000 --set train.valid_every=100000000 --set train.log_every=25" \
       "--set preprocess.max_valid_sentences=300 --set train.threads=1 $extra"
}
train_ours() {
  # shellcheck disable=SC2046  # our_args is a word list of `--set key=value`
  OMP_NUM_THREADS=1 timeout --signal=TERM "$BUDGET_S" .venv/bin/python bench/train_logged.py \
    recipes/paper_bilingual_en_de.yaml $(our_args "$1") > "$WORK.$1.log" 2>&1 || true
}
for bridge in attention none; do
  rm -rf "$WORK/$bridge"
  # shellcheck disable=SC2046
  .venv/bin/interlingua prepare recipes/paper_bilingual_en_de.yaml $(our_args "$bridge")
done

START=$(date +%s.%N)
PEER_DIR="$PEER_DIR" BUDGET_S=$BUDGET_S DATA="$DATA" bash "$PEER1" train > "$WORK.peer.log" 2>&1 &
train_ours attention &
train_ours none &
wait

.venv/bin/python bench/budget_summary.py --start "$START" --budget-s "$BUDGET_S" \
  --peer-log "$PEER_DIR/results/budget_stdout.log" \
  --ours "bridge=$WORK/attention/metrics.jsonl" --ours "none=$WORK/none/metrics.jsonl" --out "$OUT"
.venv/bin/python bench/translate_vs_peer.py --peer-dir "$PEER_DIR" --data "$DATA" \
  --ours "bridge=$WORK/attention/last.pt" --ours "none=$WORK/none/last.pt" --out "$OUT"
