# Per-model settings of our en->de paper-size runs in the quality benches, chosen by step-matched
# probes (bench/results/2026-11-22.md); sourced by quality_budget.sh and softmax_sample.sh so
# both train the same models.
# - no bridge: OpenNMT-py's U(-0.1, 0.1) initialisation, Adam 4e-4 as the peer;
# - bridge: PyTorch's initialisation, Adam 2e-3, the penalty off.
OUR_NONE_SETTINGS="--set model.param_init=0.1"
OUR_ATTENTION_SETTINGS="--set train.lr=0.002 --set train.penalty_weight=0"
