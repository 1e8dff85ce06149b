#!/usr/bin/env bash
# Replays this finding from the repository root into a scratch folder (default outputs/findings/gemma3_lm_qnli),
# every input made there:
#   bash findings/gemma3_lm_qnli/run.sh [--quick] [OUT]
# Full: the README's three sweeps of Gemma-3-270M on lm_qnli (T = 128, averages on 128 training blocks, 32 held-out
# blocks, k = 0 18 36 54 72): taylor on 32 blocks with two random orders and the mean output; the same sweep again
# with λ beside taylor and five random orders (its finished stages kept: results.md, results.csv, results.png,
# head_scores_taylor.csv, head_scores_lambda.csv); taylor with the uniform control in a fresh folder
# (results_uniform.md, .csv). About 2 hours on 2 cores (the README's runs: 32 + 16 + 41 + 25 minutes).
# --quick: T = 32, averages on 4 blocks, taylor on 2, 8 held-out blocks, k = 0 and 36, two random orders in both
# sweeps, and the uniform sweep seeded with the first one's ranking and PAPA runs (the sweep keeps them):
# about 3 minutes on an idle machine (from its stages' CPU time; 6.6 minutes measured on 2 cores shared with other
# jobs, load average 6-8), the same commands and stages.
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
if [ "$quick" = 1 ]; then T=32; ks="0 36"; train=4; rank=2; evals=8; orders=2
else T=128; ks="0 18 36 54 72"; train=128; rank=32; evals=32; orders=5; fi
mkdir -p "$out"
# shellcheck disable=SC2206
common=(--model_name_or_path gemma3 --task_name lm_qnli --data_dir "$data" --max_seq_length "$T"
        --static_heads_nums $ks --ranker_max_samples "$rank" --max_train_samples "$train" --max_eval_samples "$evals")

# 1. taylor (one forward and backward on the first 32 training blocks), two random orders, the mean output
python papa_scripts/run_papa_sweep.py "${common[@]}" --ranker taylor --random_orders 2 --controls mean_output \
    --output_dir "$out/gemma3_lm_qnli"
# 2. the same sweep with λ beside taylor and five random orders: every finished stage kept
python papa_scripts/run_papa_sweep.py "${common[@]}" --ranker taylor lambda --random_orders "$orders" \
    --controls random_order mean_output --output_dir "$out/gemma3_lm_qnli"
# 3. the uniform control, taylor's heads, in a fresh folder (--quick: seeded with sweep 1's ranking and PAPA runs,
# which it keeps; its averages, without the mean outputs, are made again)
if [ "$quick" = 1 ] && [ ! -d "$out/gemma3_lm_qnli_uniform" ]; then
  mkdir -p "$out/gemma3_lm_qnli_uniform"
  cp -r "$out/gemma3_lm_qnli/sort" "$out/gemma3_lm_qnli"/k_* "$out/gemma3_lm_qnli_uniform/"
fi
python papa_scripts/run_papa_sweep.py "${common[@]}" --ranker taylor --controls uniform \
    --output_dir "$out/gemma3_lm_qnli_uniform"

# the committed files' names, side by side in OUT
cp "$out/gemma3_lm_qnli/results.md" "$out/gemma3_lm_qnli/results.csv" "$out/gemma3_lm_qnli/results.png" "$out/"
cp "$out/gemma3_lm_qnli/sort/head_scores.csv" "$out/head_scores_taylor.csv"
cp "$out/gemma3_lm_qnli/sort_lambda/head_scores.csv" "$out/head_scores_lambda.csv"
cp "$out/gemma3_lm_qnli_uniform/results.md" "$out/results_uniform.md"
cp "$out/gemma3_lm_qnli_uniform/results.csv" "$out/results_uniform.csv"
echo "replayed into $out"
