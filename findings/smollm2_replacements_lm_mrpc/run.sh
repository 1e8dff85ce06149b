#!/usr/bin/env bash
# Replays this finding from the repository root into a scratch folder (default
# outputs/findings/smollm2_replacements_lm_mrpc), every input made there:
#   bash findings/smollm2_replacements_lm_mrpc/run.sh [--quick] [OUT]
# Full: one_seed/ (the one-seed lm_mrpc sweep, T = 128: averages with the corrections over 128 training blocks, taylor
# on the first 32, PAPA, mean output and mean_corrected at k = 0, 135, 270 on 64 held-out blocks; results.md/csv and
# papa-compare's mean_corrected − mean output) and optimal_seeds/ (the three-seed sweep, each seed's taylor ranking on
# its own 32 seeded blocks, with optimal_output beside, k = 0, 135, 270; results.md/csv/results_per_seed.csv and the
# two papa-compare tables). The optimal sweep runs in a fresh folder, making its own averages and rankings, where the
# original ran in a copy of the three-seed sweep of smollm2_rankers_lm_mrpc/ (the same stages, the same numbers).
# About 1.5 hours on 2 cores (the README: 34 min for one_seed; the three-seed sweep 32 min and the optimal runs 3-4 min
# each). --quick: T = 32, 4 training blocks (ranking on 2), 2 held-out blocks, k = 0 and 135, seed 1 alone: the same
# sweeps and tables, 83 s here under nice -n 10 at load 3 on 2 cores (28 s of CPU time).
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
if [ "$quick" = 1 ]; then
  budget=(--max_seq_length 32 --max_train_samples 4 --max_eval_samples 2 --ranker_max_samples 2); ks="0 135"; seeds="1"
else
  budget=(--max_train_samples 128 --max_eval_samples 64 --ranker_max_samples 32); ks="0 135 270"; seeds="1 2 3"
fi
mkdir -p "$out"
common=(--model_name_or_path smollm2 --task_name lm_mrpc --data_dir "$data" --ranker taylor "${budget[@]}")

# one seed (42): the replacements beside PAPA, and mean_corrected − mean output
# shellcheck disable=SC2086
[ -f "$out/one_seed/results.csv" ] || python papa_scripts/run_papa_sweep.py "${common[@]}" --static_heads_nums $ks \
    --controls mean_output mean_corrected --output_dir "$out/one_seed"
papa-compare "$out/one_seed" "$out/one_seed" --variant_a mean_corrected --variant_b mean_output \
    --output "$out/one_seed/compare_corrected_vs_mean.csv" > "$out/one_seed/compare_corrected_vs_mean.md"

# three seeds' rankings (each on its own seeded blocks), optimal_output beside the mean output and mean_corrected
# shellcheck disable=SC2086
[ -f "$out/optimal_seeds/results.csv" ] || python papa_scripts/run_papa_sweep.py "${common[@]}" \
    --static_heads_nums $ks --controls mean_output mean_corrected optimal_output --seeds $seeds --rank_per_seed \
    --ranker_sample seeded --output_dir "$out/optimal_seeds"
for other in mean_corrected mean_output; do
  papa-compare "$out/optimal_seeds" "$out/optimal_seeds" --variant_a optimal_output --variant_b "$other" \
      > "$out/optimal_seeds/optimal_output_vs_$other.md"
done
echo "replayed into $out"
