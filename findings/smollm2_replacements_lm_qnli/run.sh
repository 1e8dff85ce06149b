#!/usr/bin/env bash
# Replays this finding from the repository root into a scratch folder (default
# outputs/findings/smollm2_replacements_lm_qnli), every input made there:
#   bash findings/smollm2_replacements_lm_qnli/run.sh [--quick] [OUT]
# Full: one_seed/ (the one-seed lm_qnli sweep, T = 128: averages with the corrections over 128 training blocks, taylor
# on the first 32, PAPA, mean output and mean_corrected at k = 0, 135, 270 on 64 held-out blocks; results.md/csv/png and
# compare_corrected_vs_mean.csv), optimal/ (the same sweep with optimal_output, in a fresh folder; then optimal_output
# trained four epochs at k = 135, its eval_results.json and compare_runs.py's optimal_4_epochs_vs_sweep.txt),
# optimal_seeds/ (the three seeds' taylor rankings, each on its own 32 seeded blocks, k = 0 and 135 with optimal_output,
# in a folder holding the optimal sweep's averages) and optimal_seeds/all_heads/ (k = 0 and 270, in a folder holding
# copies of the latter's averages and runs), each with its two papa-compare tables, and the averaging benchmark's
# averaging_mean_corrections_cpu.md (machine timings: they will differ). Not rebuilt:
# one_seed/head_replacements_2blocks.* (made by a driver script not kept in the repository). About 2.5 hours on
# 2 cores (the README's times: 23 + 31 + 12 + 30 + 11 min, the benchmark 27 min). --quick: T = 32, 4 training blocks
# (ranking on 2), 2 held-out blocks, k = 0 and 135 (0 and 270 for all_heads), seed 1 alone, a one-batch benchmark: the
# same programs and tables, 138 s here under nice -n 10 at load 3 on 2 cores (63 s of CPU time).
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
if [ "$quick" = 1 ]; then
  T=32; train=4; rank=2; held=2; ks="0 135"; seeds="1"
  bench=(--avg_seq_len 32 --batch_size 2 --avg_batches 1 --avg_repeats 1)
else
  T=128; train=128; rank=32; held=64; ks="0 135 270"; seeds="1 2 3"
  bench=(--avg_seq_len 128 --batch_size 16 --avg_batches 4 --avg_repeats 3)
fi
mkdir -p "$out"
common=(--model_name_or_path smollm2 --task_name lm_qnli --data_dir "$data" --max_seq_length "$T" --ranker taylor
        --ranker_max_samples "$rank" --max_train_samples "$train" --max_eval_samples "$held")
copy_stages() {  # from, to, then the stage folders (globs) to copy where the target has none: the sweep keeps them
  local from=$1 to=$2 name src; shift 2
  mkdir -p "$to"
  for name in "$@"; do
    for src in "$from"/$name; do
      if [ -d "$src" ] && [ ! -e "$to/$(basename "$src")" ]; then cp -r "$src" "$to/"; fi
    done
  done
}

# 1. one seed (42): PAPA, the mean output and mean_corrected, and mean_corrected − mean output
# shellcheck disable=SC2086
[ -f "$out/one_seed/results.csv" ] || python papa_scripts/run_papa_sweep.py "${common[@]}" --static_heads_nums $ks \
    --controls mean_output mean_corrected --output_dir "$out/one_seed"
papa-compare "$out/one_seed" "$out/one_seed" --variant_a mean_corrected --variant_b mean_output \
    --output "$out/one_seed/compare_corrected_vs_mean.csv" > "$out/one_seed/compare_corrected_vs_mean.md"

# 2. optimal_output at the sweep's budget (a fresh folder), then trained four epochs at k = 135
opt="$out/optimal"
# shellcheck disable=SC2086
[ -f "$opt/results.csv" ] || python papa_scripts/run_papa_sweep.py "${common[@]}" --static_heads_nums $ks \
    --controls mean_output mean_corrected optimal_output --output_dir "$opt"
[ -f "$out/optimal4_k_135/eval_results.json" ] || python papa_scripts/run_papa_glue.py --model_name_or_path smollm2 \
    --task_name lm_qnli --data_dir "$data/glue/QNLI" --do_train --do_eval --max_seq_length "$T" \
    --per_device_train_batch_size 8 --per_device_eval_batch_size 16 --num_train_epochs 4 --learning_rate 0.001 \
    --lr_scheduler_type constant --evaluation_strategy no --save_strategy no --max_train_samples "$train" \
    --max_eval_samples "$held" --seed 42 --grad_for_classifier_and_static_only true --static_heads_dir "$opt/avgs" \
    --sorting_heads_dir "$opt/sort" --static_heads_num 135 --replace_heads_with mean_output \
    --output_dir "$out/optimal4_k_135"
python findings/smollm2_best_of/compare_runs.py "$opt" "$out/optimal4_k_{k}" --label optimal_4_epochs --ks 135 \
    > "$opt/optimal_4_epochs_vs_sweep.txt"

# 3. optimal_output under the three seeds' rankings at ½ (beside the optimal sweep's averages), then with all heads
# shellcheck disable=SC2206
seeded=(--controls mean_output mean_corrected optimal_output --seeds $seeds --rank_per_seed --ranker_sample seeded)
copy_stages "$opt" "$out/optimal_seeds" avgs
[ -f "$out/optimal_seeds/results.csv" ] || python papa_scripts/run_papa_sweep.py "${common[@]}" \
    --static_heads_nums 0 135 "${seeded[@]}" --output_dir "$out/optimal_seeds"
copy_stages "$out/optimal_seeds" "$out/optimal_seeds/all_heads" avgs "sort_seed_*" "*_seed_*"
[ -f "$out/optimal_seeds/all_heads/results.csv" ] || python papa_scripts/run_papa_sweep.py "${common[@]}" \
    --static_heads_nums 0 270 "${seeded[@]}" --output_dir "$out/optimal_seeds/all_heads"
for sweep in "$out/optimal_seeds" "$out/optimal_seeds/all_heads"; do
  for other in mean_corrected mean_output; do
    papa-compare "$sweep" "$sweep" --variant_a optimal_output --variant_b "$other" \
        > "$sweep/optimal_output_vs_$other.md"
  done
done

# 4. what the corrections cost: the averaging pass with --mean_corrections against the plain pass (machine timings)
[ -f "$out/averaging_mean_corrections_cpu.md" ] || papa-benchmark --model_name_or_path smollm2 \
    --skip inference training "${bench[@]}" --threads 1 --json "$out/averaging_mean_corrections_cpu.json"
echo "replayed into $out"
