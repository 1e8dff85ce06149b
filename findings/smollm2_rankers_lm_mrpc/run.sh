#!/usr/bin/env bash
# Replays this finding from the repository root into a scratch folder (default
# outputs/findings/smollm2_rankers_lm_mrpc), every input made there:
#   bash findings/smollm2_rankers_lm_mrpc/run.sh [--quick] [OUT]
# Full (lm_mrpc, T = 128: averages over 128 training blocks, rankers on 32 of them, 64 held-out blocks, k = 0, 68, 135,
# 203, 270): five_rankers/ (λ, taylor and iterative taylor beside five random orders: results.md/csv/png) and
# five_rankers_loo_gates/ (loo and gates, 32 steps, beside the same five orders: the committed results_loo_gates.*),
# each ranking's head_scores.csv copied to five_rankers/head_scores_<ranker>.csv; taylor_seeds/ (three seeds'
# rankings on their own 32 seeded blocks, the mean output and mean_corrected beside: results.*, vs_random_orders.md by
# seeds_vs_random.py against the loo/gates sweep's orders, mean_corrected_vs_mean_output.md by papa-compare); then
# iterative_taylor_seeds/, loo_seeds/ and gates_seeds/ (each in a folder holding taylor_seeds/'s averages and k = 0
# runs, as they ran: results.*, vs_random_orders.md), with each seed's head_scores_<ranker>_seed_<s>.csv. About
# 7 hours on 2 cores (the README's times: 45 + 88 + 32 min, loo's seeds 3 200-3 400 s each, iterative taylor's
# 410-440 s, gates' 680-710 s, and their evaluations). --quick: T = 32, 4 training blocks (ranking on 2, gates 2
# steps), 2 held-out blocks, k = 0 and 135, two random orders (a sweep adds none for one), seed 1 alone: the same
# sweeps and tables, 224 s here under nice -n 10 at load 3 on 2 cores (51 s of CPU time).
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
here=findings/smollm2_rankers_lm_qnli  # seeds_vs_random.py
if [ "$quick" = 1 ]; then
  T=32; train=4; rank=2; held=2; steps=2; orders=2; ks="0 135"; compared="135"; seeds="1"
else
  T=128; train=128; rank=32; held=64; steps=32; orders=5; ks="0 68 135 203 270"; compared="68 135 203"; seeds="1 2 3"
fi
mkdir -p "$out"
common=(--model_name_or_path smollm2 --task_name lm_mrpc --data_dir "$data" --max_seq_length "$T"
        --ranker_max_samples "$rank" --max_train_samples "$train" --max_eval_samples "$held")
# shellcheck disable=SC2206
seeded=(--seeds $seeds --rank_per_seed --ranker_sample seeded)
copy_stages() {  # from, to, then the stage folders (globs) to copy where the target has none: the sweep keeps them
  local from=$1 to=$2 name src; shift 2
  mkdir -p "$to"
  for name in "$@"; do
    for src in "$from"/$name; do
      if [ -d "$src" ] && [ ! -e "$to/$(basename "$src")" ]; then cp -r "$src" "$to/"; fi
    done
  done
}

# 1. five rankers in two sweeps, each beside the same five random orders (drawn from --seed alone)
# shellcheck disable=SC2086
[ -f "$out/five_rankers/results.csv" ] || python papa_scripts/run_papa_sweep.py "${common[@]}" --static_heads_nums $ks \
    --ranker lambda taylor iterative_taylor --random_orders "$orders" --ranker_steps "$steps" \
    --output_dir "$out/five_rankers"
# shellcheck disable=SC2086
[ -f "$out/five_rankers_loo_gates/results.csv" ] || python papa_scripts/run_papa_sweep.py "${common[@]}" \
    --static_heads_nums $ks --ranker loo gates --random_orders "$orders" --ranker_steps "$steps" \
    --output_dir "$out/five_rankers_loo_gates"
for ranker in lambda taylor iterative_taylor; do
  sort=sort_$ranker; [ "$ranker" != lambda ] || sort=sort
  cp "$out/five_rankers/$sort/head_scores.csv" "$out/five_rankers/head_scores_$ranker.csv"
done
cp "$out/five_rankers_loo_gates/sort/head_scores.csv" "$out/five_rankers/head_scores_loo.csv"
cp "$out/five_rankers_loo_gates/sort_gates/head_scores.csv" "$out/five_rankers/head_scores_gates.csv"

# 2. three seeds' taylor rankings, the replacements beside; each seed against the five orders
# shellcheck disable=SC2086
[ -f "$out/taylor_seeds/results.csv" ] || python papa_scripts/run_papa_sweep.py "${common[@]}" --static_heads_nums $ks \
    --ranker taylor --controls mean_output mean_corrected "${seeded[@]}" --output_dir "$out/taylor_seeds"
papa-compare "$out/taylor_seeds" "$out/taylor_seeds" --variant_a mean_corrected --variant_b mean_output \
    > "$out/taylor_seeds/mean_corrected_vs_mean_output.md"

# 3. every loss-based ranker with three seeds, each beside taylor_seeds/'s averages and k = 0 runs
for ranker in taylor iterative_taylor loo gates; do
  S=$out/${ranker}_seeds
  if [ "$ranker" != taylor ]; then
    copy_stages "$out/taylor_seeds" "$S" avgs "k_0_seed_*"
    flags=(--ranker "$ranker"); [ "$ranker" != gates ] || flags+=(--ranker_steps "$steps")
    # shellcheck disable=SC2086
    [ -f "$S/results.csv" ] || python papa_scripts/run_papa_sweep.py "${common[@]}" --static_heads_nums $ks \
        "${flags[@]}" "${seeded[@]}" --output_dir "$S"
  fi
  for s in $seeds; do cp "$S/sort_seed_$s/head_scores.csv" "$S/head_scores_${ranker}_seed_$s.csv"; done
  # shellcheck disable=SC2086
  python "$here/seeds_vs_random.py" "$S" --ks $compared --orders_from "$out/five_rankers_loo_gates" \
      --out "$S/vs_random_orders.md" > /dev/null
done
echo "replayed into $out"
