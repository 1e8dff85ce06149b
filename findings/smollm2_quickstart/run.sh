#!/usr/bin/env bash
# Replays this finding from the repository root into a scratch folder (default outputs/findings/smollm2_quickstart):
#   bash findings/smollm2_quickstart/run.sh [--quick] [OUT]
# Full: the README's quick-start command, SmolLM2 on lm_mrpc (MRPC's news sentences, T = 128), averages over 128
# training blocks, the decoder's default ranker (taylor), k = 0, 135, 236, 253, 270 evaluated on 64 held-out blocks:
# results.md and results.csv as committed here, about 3.3 minutes alone on 2 cores (5.5 beside two other jobs: the
# README). --quick: the same command on 8 training and 4 held-out blocks of 64 tokens, k = 0, 135, 270: 100 s on a
# machine loaded 11 on its 2 cores (80 s of stages).
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
if [ "$quick" = 1 ]; then
  size=(--max_train_samples 8 --max_eval_samples 4 --max_seq_length 64 --static_heads_nums 0 135 270)
else
  size=(--max_train_samples 128 --max_eval_samples 64)  # T = 128 and k = 0 135 236 253 270: the sweep's defaults
fi
mkdir -p "$out"
# the sweep skips every stage that is up to date, so a second call only rewrites the tables
python papa_scripts/run_papa_sweep.py --model_name_or_path smollm2 --task_name lm_mrpc --data_dir "$data" \
    "${size[@]}" --output_dir "$out"
echo "replayed into $out (results.md, results.csv; compare with findings/smollm2_quickstart/)"
