#!/usr/bin/env bash
# requires: lm_eval
# Replays this finding from the repository root into a scratch folder
# (default outputs/findings/smollm2_lm_eval_zero_shot):
#   bash findings/smollm2_lm_eval_zero_shot/run.sh [--quick] [OUT]
# Full: its inputs first, the lm_qnli sweep's averages and taylor ranking (RUN in the README: the five-rankers sweep
# of findings/smollm2_rankers_lm_qnli/, T = 128, averages over 128 training blocks, taylor on the first 32), made
# here by that sweep's command with taylor alone (--ranker taylor: its ranking is sort/, the five-rankers sweep's
# sort_taylor/; on today's code 8 of its 270 places swap between near-tied heads against
# findings/smollm2_rankers_lm_qnli/five_rankers/head_scores_taylor.csv, its first 68 and 135 heads the same) and k =
# 0 68 135 evaluated on its 64 held-out blocks; then the README's command: SmolLM2 through lm-eval's model type papa,
# zero-shot, the first 50 dev documents of papa_sst2, papa_cola, papa_mrpc, papa_qnli and papa_wnli at k = 0, 68,
# 135, into OUT/lm_eval_runs/, and OUT/results.md and results.csv (this folder's). About 40 minutes on 2 cores (the
# README: about 8 min per k for k = 0 and 135, 18 for k = 68, on a shared machine; the sweep about 5 minutes).
# --quick: the same two steps on 8 training blocks (taylor on 4, 4 held-out blocks), k = 0 and 135, 2 documents per
# task: 5.5 minutes on a machine loaded 11-13 on its 2 cores (lm-eval's start-up and bootstrap most).
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
if [ "$quick" = 1 ]; then
  sweep=(--ranker_max_samples 4 --max_train_samples 8 --max_eval_samples 4); ks="0 135"; limit=2
else
  sweep=(--ranker_max_samples 32 --max_train_samples 128 --max_eval_samples 64); ks="0 68 135"; limit=50
fi
mkdir -p "$out"
run="$out/smollm2_rankers_qnli"
# RUN: the lm_qnli averages (T = 128) and taylor's ranking; the sweep skips every stage that is up to date
# shellcheck disable=SC2086
python papa_scripts/run_papa_sweep.py --model_name_or_path smollm2 --task_name lm_qnli --data_dir "$data" \
    --static_heads_nums $ks --ranker taylor "${sweep[@]}" --output_dir "$run"
# the README's command (a k scored into OUT/lm_eval_runs/k_<k>/ is read back, not redone)
# shellcheck disable=SC2086
python findings/smollm2_lm_eval_zero_shot/findings.py --static_heads_dir "$run/avgs" --sorting_heads_dir "$run/sort" \
    --data_dir "$data" --limit "$limit" --tasks papa_sst2 papa_cola papa_mrpc papa_qnli papa_wnli --ks $ks \
    --work_dir "$out/lm_eval_runs" --out_dir "$out"
echo "replayed into $out (results.md, results.csv; compare with findings/smollm2_lm_eval_zero_shot/)"
