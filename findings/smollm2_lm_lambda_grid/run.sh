#!/usr/bin/env bash
# Replays this finding from the repository root into a scratch folder (default outputs/findings/smollm2_lm_lambda_grid):
#   bash findings/smollm2_lm_lambda_grid/run.sh [--quick] [OUT]
# Full: the README's grid command, SmolLM2 on lm_qnli and lm_mrpc (T = 128, 128 training and 64 held-out blocks),
# k = 0 68 135 203 270, the uniform, random-order and mean-output controls, three seeds each with its own λ ranking
# run. λ was the sweep's default then; a decoder's default is now taylor, so --ranker lambda is given here. It
# rebuilds OUT/smollm2/lm_qnli/ and OUT/smollm2/lm_mrpc/ (this folder's lm_qnli/ and lm_mrpc/: results.md, results.csv,
# results_per_seed.csv, ranking_stability.csv, sweep.json, the figures) and OUT/summary.md, .csv, .png: about 80
# minutes on 2 cores (the README: 53 min for lm_qnli beside other jobs, 27 min for lm_mrpc alone).
# --quick: the same grid on 8 training and 4 held-out blocks of 64 tokens, k = 0 and 135, one seed: 3 minutes on a
# machine loaded 11-12 on its 2 cores (most of it the stages' start-up).
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
if [ "$quick" = 1 ]; then
  size=(--static_heads_nums 0 135 --seeds 1 --max_train_samples 8 --max_eval_samples 4 --max_seq_length 64)
else
  size=(--static_heads_nums 0 68 135 203 270 --seeds 1 2 3 --max_train_samples 128 --max_eval_samples 64)  # T = 128
fi
mkdir -p "$out"
# the grid skips every stage that is up to date, so a second call only rewrites the tables
python papa_scripts/run_papa_sweep.py --model_name_or_path smollm2 --task_name lm_qnli lm_mrpc --data_dir "$data" \
    --ranker lambda --controls uniform random_order mean_output --rank_per_seed "${size[@]}" --output_dir "$out"
echo "replayed into $out (smollm2/lm_qnli/, smollm2/lm_mrpc/, summary.*: findings/smollm2_lm_lambda_grid/'s)"
