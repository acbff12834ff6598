#!/usr/bin/env bash
# Does target-vocabulary sampling (`train.softmax_sample`) hold quality at equal steps?
# Four en->de trainings at the papers' bilingual sizes run side by side, one thread each, for
# the same number of steps: no bridge and bridge (each with the quality bench's settings), each
# with the full softmax and with the sampled one. Then, for each run: dev BLEU at each validation
# (every STEPS/2 steps) and its training speed while all four were training (bench/run_summary.py,
# from the wall-clock stamps bench/train_logged.py puts on every log line), and test_2016_flickr
# BLEU / chrF, greedy, of its last checkpoint (bench/translate_speed.py).
#
# Usage (from the project root): STEPS=600 SAMPLE=1024 bash bench/softmax_sample.sh
# Results: bench/results/softmax_sample.jsonl; each run's metrics in runs/bench_softmax_sample/.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS="${STEPS:-600}"
SAMPLE="${SAMPLE:-1024}"
DATA="${DATA:-$(cd .. && pwd)/shared/data/multi30k}"
WORK=runs/bench_softmax_sample
.venv/bin/interlingua data multi30k --dest "$WORK/multi30k" --from "$DATA"
train() {  # bridge sample extra-args...
  local bridge=$1 sample=$2; shift 2
  rm -rf "$WORK/${bridge}_$sample"
  OMP_NUM_THREADS=1 .venv/bin/python bench/train_logged.py recipes/paper_bilingual_en_de.yaml \
    --set corpus="$(pwd)/$WORK/multi30k/corpus.yaml" --set work_dir="$WORK/${bridge}_$sample" \
    --set model.bridge.type="$bridge" --set train.max_steps="$STEPS" --set train.softmax_sample="$sample" \
    --set train.valid_every=$((STEPS / 2)) --set train.log_every=25 --set preprocess.max_valid_sentences=300 \
    --set train.threads=1 "$@" \
    > "$WORK/${bridge}_$sample.log" 2>&1
}
source bench/_our_settings.sh
# shellcheck disable=SC2086  # the settings are word lists of `--set key=value`
train none 0 $OUR_NONE_SETTINGS &
train none "$SAMPLE" $OUR_NONE_SETTINGS &
train attention 0 $OUR_ATTENTION_SETTINGS &
train attention "$SAMPLE" $OUR_ATTENTION_SETTINGS &
wait
.venv/bin/python bench/run_summary.py --out bench/results/softmax_sample.jsonl \
  --run "none_0=$WORK/none_0" --run "none_$SAMPLE=$WORK/none_$SAMPLE" \
  --run "attention_0=$WORK/attention_0" --run "attention_$SAMPLE=$WORK/attention_$SAMPLE"
for run in none_0 "none_$SAMPLE" attention_0 "attention_$SAMPLE"; do
  .venv/bin/python bench/translate_speed.py --model "$WORK/$run/last.pt" --data "$DATA" --beams 1 --reps 1 \
    --out bench/results/softmax_sample.jsonl
done
