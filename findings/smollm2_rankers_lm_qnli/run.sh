#!/usr/bin/env bash
# Replays this finding from the repository root into a scratch folder (default
# outputs/findings/smollm2_rankers_lm_qnli), every input made there:
#   bash findings/smollm2_rankers_lm_qnli/run.sh [--quick] [OUT]
# Full (lm_qnli, T = 128: averages over 128 training blocks, rankers on 32 of them, 64 held-out blocks, k = 0, 68, 135,
# 203, 270): five_rankers/ (λ, taylor, loo, iterative taylor and gates beside five random orders: results.*, each
# ranking's head_scores.csv as head_scores_<ranker>.csv, kept_dynamic_k135.md); taylor_seeds/ (three seeds' rankings on
# their own 32 seeded blocks with the mean output and mean_corrected, k = 0, 68, 135, 270: results.*, each seed's
# head_scores_taylor_seed_<s>.csv; then the same sweep with k = 203 and five random orders in place of the controls,
# taylor_seeds_random/, for vs_random_orders.md); gates_128_steps/ (in a folder holding that sweep's averages, k = 0 and
# orders) and gates_distill/ (holding the 128-step sweep's averages, k = 0, k = all and orders; its differences from
# the one-seed taylor sweep of smollm2_replacements_lm_qnli/, run here as taylor_one_seed/, and from the 128-step
# gates); iterative_taylor_seeds/, loo_seeds/, gates_seeds/ (each holding taylor_seeds_random/'s averages and k = 0
# runs) and gates_distill_seeds/ (holding gates_seeds/' averages, k = 0 and k = all), each seed against the same five
# orders (seeds_vs_random.py) and the distilled gates' papa-compare tables. About 10 hours on 2 cores (the README's
# times: 70 + 69 + 66 + 44 + 25 + 23 min, loo's seeds about 3 100 s each, iterative taylor's 400 s, gates' 640 s,
# the distilled gates' 1 230-1 540 s, and their evaluations). --quick: T = 32, 4 training blocks (ranking on 2, gates
# 2 steps, 4 for the "128-step" sweep), 2 held-out blocks, k = 0 and 135, two random orders (a sweep adds none for
# one), seed 1 alone: the same sweeps and tables, 4 min 42 s here under nice -n 10 at load 3 on 2 cores (80 s of
# CPU time).
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
here=findings/smollm2_rankers_lm_qnli
if [ "$quick" = 1 ]; then
  T=32; train=4; rank=2; held=2; steps=2; long_steps=4; orders=2; ks="0 135"; seed_ks="0 135"; compared="135"
  kept=135; seeds="1"; one_seed_ks="0 135"
else
  T=128; train=128; rank=32; held=64; steps=32; long_steps=128; orders=5; ks="0 68 135 203 270"
  seed_ks="0 68 135 270"; compared="68 135 203"; kept=135; seeds="1 2 3"; one_seed_ks="0 135 270"
fi
mkdir -p "$out"
common=(--model_name_or_path smollm2 --task_name lm_qnli --data_dir "$data" --max_seq_length "$T"
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
sweep() {  # output folder, then the sweep's own flags: skipped when its results exist
  local folder=$1; shift
  [ -f "$folder/results.csv" ] || python papa_scripts/run_papa_sweep.py "${common[@]}" "$@" --output_dir "$folder"
}
vs_orders() {  # sweep, markdown file: each seed's ranking against the orders of taylor_seeds_random/
  # shellcheck disable=SC2086
  python "$here/seeds_vs_random.py" "$1" --ks $compared --orders_from "$out/taylor_seeds_random" --out "$2" > /dev/null
}

# 1. five rankers and five random orders (drawn from --seed alone)
# shellcheck disable=SC2086
sweep "$out/five_rankers" --static_heads_nums $ks --ranker lambda taylor loo iterative_taylor gates \
    --random_orders "$orders" --ranker_steps "$steps"
for ranker in lambda taylor loo iterative_taylor gates; do
  sort=sort_$ranker; [ "$ranker" != lambda ] || sort=sort
  cp "$out/five_rankers/$sort/head_scores.csv" "$out/five_rankers/head_scores_$ranker.csv"
done
python "$here/kept_dynamic.py" "$out/five_rankers" "$kept" --out "$out/five_rankers/kept_dynamic_k$kept.md" > /dev/null

# 2. three seeds' taylor rankings with the replacements; the same with k = 203 and the random orders in their place
# shellcheck disable=SC2086
sweep "$out/taylor_seeds" --static_heads_nums $seed_ks --ranker taylor --controls mean_output mean_corrected \
    "${seeded[@]}"
for s in $seeds; do
  cp "$out/taylor_seeds/sort_seed_$s/head_scores.csv" "$out/taylor_seeds/head_scores_taylor_seed_$s.csv"
done
# shellcheck disable=SC2086
sweep "$out/taylor_seeds_random" --static_heads_nums $ks --ranker taylor --random_orders "$orders" "${seeded[@]}"
# shellcheck disable=SC2086
python "$here/seeds_vs_random.py" "$out/taylor_seeds_random" --ks $compared \
    --out "$out/taylor_seeds/vs_random_orders.md" > /dev/null

# 3. gates with four times the steps (seed 1, the first 32 blocks), beside the seeds sweep's averages, k = 0, orders
G=$out/gates_128_steps
copy_stages "$out/taylor_seeds_random" "$G" avgs k_0_seed_1 "random*_seed_1"
# shellcheck disable=SC2086
sweep "$G" --static_heads_nums $ks --ranker gates --ranker_steps "$long_steps" --random_orders "$orders" --seeds 1
cp "$G/sort/head_scores.csv" "$G/head_scores_gates.csv"
# shellcheck disable=SC2086
python "$here/seeds_vs_random.py" "$G" --ks $compared --out "$G/vs_random_orders.md" > /dev/null

# 4. gates with the distillation loss, beside the 128-step sweep's averages, k = 0, k = all and orders; against the
#    one-seed taylor sweep of smollm2_replacements_lm_qnli/ (its PAPA runs) and the 128-step gates
D=$out/gates_distill
copy_stages "$G" "$D" avgs "k_0_seed_1" "k_270_seed_1" "random*_seed_1"
# shellcheck disable=SC2086
sweep "$D" --static_heads_nums $ks --ranker gates --ranker_loss distill --ranker_steps "$steps" \
    --random_orders "$orders" --seeds 1
python "$here/kept_dynamic.py" "$D" "$kept" --out "$D/kept_dynamic_k$kept.md" > /dev/null
cp "$D/sort/head_scores.csv" "$D/head_scores.csv"
# shellcheck disable=SC2086
sweep "$out/taylor_one_seed" --static_heads_nums $one_seed_ks --ranker taylor --controls mean_output mean_corrected
papa-compare "$D" "$out/taylor_one_seed" > "$D/gates_distill_vs_taylor.md"
papa-compare "$D" "$G" > "$D/gates_distill_vs_gates_128_steps.md"

# 5. every loss-based ranker with three seeds, each beside taylor_seeds_random/'s averages and k = 0 runs; then the
#    distilled gates beside gates_seeds/' averages, k = 0 and k = all
for ranker in iterative_taylor loo gates gates_distill; do
  S=$out/${ranker}_seeds
  case $ranker in
    gates) flags=(--ranker gates --ranker_steps "$steps")
           copy_stages "$out/taylor_seeds_random" "$S" avgs "k_0_seed_*" ;;
    gates_distill) flags=(--ranker gates --ranker_loss distill --ranker_steps "$steps")
                   copy_stages "$out/gates_seeds" "$S" avgs "k_0_seed_*" "k_270_seed_*" ;;
    *) flags=(--ranker "$ranker"); copy_stages "$out/taylor_seeds_random" "$S" avgs "k_0_seed_*" ;;
  esac
  # shellcheck disable=SC2086
  sweep "$S" --static_heads_nums $ks "${flags[@]}" "${seeded[@]}"
  for s in $seeds; do cp "$S/sort_seed_$s/head_scores.csv" "$S/head_scores_${ranker}_seed_$s.csv"; done
  vs_orders "$S" "$S/vs_random_orders.md"
done
papa-compare "$out/gates_distill_seeds" "$out/gates_seeds" \
    > "$out/gates_distill_seeds/gates_distill_vs_gates_task_loss.md"
papa-compare "$out/gates_distill_seeds" "$out/iterative_taylor_seeds" \
    > "$out/gates_distill_seeds/gates_distill_vs_iterative_taylor.md"
echo "replayed into $out"
