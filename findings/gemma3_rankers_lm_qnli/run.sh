#!/usr/bin/env bash
# Replays this finding from the repository root into a scratch folder (default
# outputs/findings/gemma3_rankers_lm_qnli), every input made there:
#   bash findings/gemma3_rankers_lm_qnli/run.sh [--quick] [OUT]
# Full: Gemma-3-270M on lm_qnli (T = 128, averages on 128 training blocks, 32 held-out blocks): the four loss-based
# rankers on the first 8 blocks (gates 16 steps) beside five random orders, k = 0 18 36 54 72 (four_rankers/:
# results.md, .csv, .png, each ranker's head_scores_*.csv); gates with the distillation loss in a folder holding
# that sweep's averages, k = 0 and random orders (results_gates_distill.md, .csv, head_scores_gates_distill.csv);
# then three seeds' rankings (each seed's own 8 blocks, --ranker_sample seeded; λ on all 128) of loo, taylor,
# iterative taylor, gates and λ at k = 0 18 36 54, each sweep in a folder holding loo's averages and k = 0 runs,
# each seed paired with the five orders by findings/smollm2_rankers_lm_qnli/seeds_vs_random.py (<ranker>_seeds/:
# results.md, .csv, results_per_seed.csv, vs_random_orders.md, head_scores_<ranker>_seed_<s>.csv). λ's three seeds
# run in one folder here (the README's ran seeds 1-2 and 3 in two folders side by side, then joined). About 5 hours
# on 2 cores (the README's runs: 66 + 9 + 58 + 18 + 31 + 39 + 48 minutes; the first reused gemma3_lm_qnli's
# averages and k = 0, made here). --quick: T = 32, averages on 4 blocks, rankers on 1, gates 2 steps, 8 held-out
# blocks, k = 0 and 36, two random orders, and of the seeds sweeps loo's alone with seed 1 (the other four are its
# command with another --ranker): about 4 minutes on an idle machine (from its stages' CPU time; 14.5 minutes
# measured on 2 cores shared with other jobs, load average 9-11), the same scripts and stages.
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
if [ "$quick" = 1 ]; then
  T=32; ks="0 36"; seed_ks="0 36"; pair_ks="36"; train=4; rank=1; steps=2; evals=8; orders=2; seeds="1"
  seeded="loo"
else
  T=128; ks="0 18 36 54 72"; seed_ks="0 18 36 54"; pair_ks="18 36 54"; train=128; rank=8; steps=16; evals=32
  orders=5; seeds="1 2 3"; seeded="loo taylor iterative_taylor gates lambda"
fi
mkdir -p "$out"
common=(--model_name_or_path gemma3 --task_name lm_qnli --data_dir "$data" --max_seq_length "$T"
        --max_train_samples "$train" --max_eval_samples "$evals")
seed_from() {  # a new sweep folder holding an earlier one's finished stages (the sweep keeps what is up to date)
  local dst=$1; shift
  [ -d "$dst" ] && return 0
  mkdir -p "$dst"
  cp -r "$@" "$dst/"
}
rankers="$out/gemma3_rankers"

# 1. the four loss-based rankers on the first 8 training blocks, beside five random orders
# shellcheck disable=SC2086
python papa_scripts/run_papa_sweep.py "${common[@]}" --static_heads_nums $ks \
    --ranker taylor loo iterative_taylor gates --random_orders "$orders" --ranker_max_samples "$rank" \
    --ranker_steps "$steps" --output_dir "$rankers"

# 2. gates with the distillation loss, in a folder holding sweep 1's averages, k = 0 and random orders
seed_from "$out/gemma3_gates_distill" "$rankers"/{avgs,k_0,random_order*,random*_k_*}
# shellcheck disable=SC2086
python papa_scripts/run_papa_sweep.py "${common[@]}" --static_heads_nums $ks --ranker gates --ranker_loss distill \
    --random_orders "$orders" --ranker_max_samples "$rank" --ranker_steps "$steps" \
    --output_dir "$out/gemma3_gates_distill"

# 3. three seeds' rankings of each ranker, paired with sweep 1's random orders
for ranker in $seeded; do
  case $ranker in
    loo) folder=gemma3_loo_seeds; flags=(--ranker_sample seeded) ;;
    taylor) folder=gemma3_taylor_seeds; flags=(--ranker_sample seeded) ;;
    iterative_taylor) folder=gemma3_itaylor_seeds; flags=(--ranker_sample seeded) ;;
    gates) folder=gemma3_gates_seeds; flags=(--ranker_sample seeded --ranker_steps "$steps") ;;
    lambda) folder=gemma3_lambda_seeds; flags=() ;;
  esac
  if [ "$ranker" = loo ]; then
    seed_from "$out/$folder" "$rankers/avgs"
  else
    seed_from "$out/$folder" "$out/gemma3_loo_seeds"/{avgs,k_0_seed_*}
  fi
  # shellcheck disable=SC2086
  python papa_scripts/run_papa_sweep.py "${common[@]}" --static_heads_nums $seed_ks --ranker "$ranker" --seeds $seeds \
      --rank_per_seed "${flags[@]}" --ranker_max_samples "$rank" --output_dir "$out/$folder"
  mkdir -p "$out/${ranker}_seeds"
  # shellcheck disable=SC2086
  python findings/smollm2_rankers_lm_qnli/seeds_vs_random.py "$out/$folder" --ks $pair_ks --orders_from "$rankers" \
      --out "$out/${ranker}_seeds/vs_random_orders.md"
  cp "$out/$folder"/results.{md,csv} "$out/$folder/results_per_seed.csv" "$out/${ranker}_seeds/"
  for s in $seeds; do
    cp "$out/$folder/sort_seed_$s/head_scores.csv" "$out/${ranker}_seeds/head_scores_${ranker}_seed_$s.csv"
  done
done

# the committed files' names, side by side in OUT
mkdir -p "$out/four_rankers"
cp "$rankers"/results.{md,csv,png} "$out/four_rankers/"
cp "$rankers/sort/head_scores.csv" "$out/four_rankers/head_scores_taylor.csv"
for ranker in loo iterative_taylor gates; do
  cp "$rankers/sort_$ranker/head_scores.csv" "$out/four_rankers/head_scores_$ranker.csv"
done
cp "$out/gemma3_gates_distill/results.md" "$out/four_rankers/results_gates_distill.md"
cp "$out/gemma3_gates_distill/results.csv" "$out/four_rankers/results_gates_distill.csv"
cp "$out/gemma3_gates_distill/sort/head_scores.csv" "$out/four_rankers/head_scores_gates_distill.csv"
echo "replayed into $out"
