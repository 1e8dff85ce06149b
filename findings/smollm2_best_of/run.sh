#!/usr/bin/env bash
# Replays this finding from the repository root into a scratch folder (default outputs/findings/smollm2_best_of),
# every input made there:
#   bash findings/smollm2_best_of/run.sh [--quick] [OUT]
# Full: lm_qnli_one_seed/ (the one-seed lm_qnli sweep of smollm2_replacements_lm_qnli/ with optimal_output, T = 128:
# averages with the corrections over 128 training blocks, taylor on the first 32; best_of chosen on the first 2 and on
# the first 8 training blocks, each evaluated at k = 135 and 270 on 64 held-out blocks: best_of.csv, eval_results.json
# and compare_runs.py's best_of_<n>blocks_compare.txt), then lm_qnli_seeds/ and lm_mrpc_seeds/ (each task's three-seed
# sweep at k = 0, 135, 270 with the mean output and mean_corrected, each seed's choice on 8 seeded blocks under its
# own ranking and its runs at k = 135 and 270: the sweep's results, each seed's best_of.csv, best_of_compare.txt,
# per_head_table.md, and lm_qnli's mean_corrected_vs_mean_output.md). Both choices of lm_qnli_one_seed/ read the
# optimal sweep's averages and ranking (the same files as the plain sweep's, which the 2-block choice read). Not
# rebuilt: choices.txt (no script that writes it is kept). About 6 hours on 2 cores (the README's times: the sweep
# 31 min, the choices 23 and 41 min, 33-35 min per seed's choice, six of them, beside the two three-seed sweeps).
# --quick: T = 32, 4 training blocks (ranking on 2), 2 held-out blocks, k = 0 and 135; one choice, on 1 block, in
# step 1 (the 8-block choice is the same command); in step 2 lm_qnli and seed 1 alone (a choice scores 3 x 270 heads
# alone, a minute of CPU even so): the same programs and tables, 173 s here under nice -n 10 at load 3 on 2 cores
# (133 s of CPU time).
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
here=findings/smollm2_best_of
if [ "$quick" = 1 ]; then
  T=32; train=4; rank=2; held=2; ks="0 135"; best_ks="135"; choices="1"; seeded_blocks=1; seeds="1"; tasks="lm_qnli"
else
  T=128; train=128; rank=32; held=64; ks="0 135 270"; best_ks="135 270"; choices="2 8"; seeded_blocks=8
  seeds="1 2 3"; tasks="lm_qnli lm_mrpc"
fi
mkdir -p "$out"
sweep_flags=(--model_name_or_path smollm2 --data_dir "$data" --max_seq_length "$T" --ranker taylor
             --ranker_max_samples "$rank" --max_train_samples "$train" --max_eval_samples "$held")
set_common() {  # task, its GLUE folder, the averages: the sweep's own flags of a ranking or probing run
  common=(--model_name_or_path smollm2 --task_name "$1" --data_dir "$data/glue/$2" --max_seq_length "$T"
          --per_device_train_batch_size 8 --per_device_eval_batch_size 16 --overwrite_output_dir --num_train_epochs 1.0
          --learning_rate 0.001 --lr_scheduler_type constant --evaluation_strategy no --save_strategy no
          --static_heads_dir "$3" --save_total_limit 0 --max_train_samples "$train")
}
best_of() {  # choice folder, ranking folder, the runs' prefix and suffix, the sweep's ranking, seed, the choice's flags
  local choice=$1 ranking=$2 runs=$3 suffix=$4 sort=$5 seed=$6 k; shift 6
  [ -f "$choice/best_of.csv" ] || python papa_scripts/run_papa_glue.py "${common[@]}" --seed "$seed" --do_train \
      --output_dir "$choice" --sort_calculating True --ranker taylor --best_of true "$@"
  mkdir -p "$ranking"  # the sweep's ranking with the choice (the choice run's own ranking is unused)
  cp "$sort/sorted_heads.json" "$choice/best_of.csv" "$ranking/"
  for k in $best_ks; do
    [ -f "${runs}_k_$k$suffix/eval_results.json" ] || python papa_scripts/run_papa_glue.py "${common[@]}" \
        --seed "$seed" --do_eval --max_eval_samples "$held" --output_dir "${runs}_k_$k$suffix" --static_heads_num "$k" \
        --sorting_heads_dir "$ranking" --replace_heads_with best_of
  done
}

# 1. lm_qnli, one seed (42): the sweep's ranking, best_of chosen on its first 2 and first 8 training blocks
S=$out/lm_qnli_one_seed/sweep
# shellcheck disable=SC2086
[ -f "$S/results.csv" ] || python papa_scripts/run_papa_sweep.py "${sweep_flags[@]}" --task_name lm_qnli \
    --static_heads_nums $ks --controls mean_output mean_corrected optimal_output --output_dir "$S"
set_common lm_qnli QNLI "$S/avgs"
for blocks in $choices; do
  dir=$out/lm_qnli_one_seed/${blocks}blocks
  best_of "$dir/choice" "$dir/ranking" "$dir/bestof" "" "$S/sort" 42 --ranker_max_samples "$blocks"
  label=best_of; [ "$blocks" != 8 ] || label="best_of (8-block choice)"
  # shellcheck disable=SC2086
  python "$here/compare_runs.py" "$S" "$dir/bestof_k_{k}" --label "$label" --ks $best_ks \
      > "$out/lm_qnli_one_seed/best_of_${blocks}blocks_compare.txt"
done

# 2. three seeds on both tasks: each seed's choice on 8 blocks drawn with it, under that seed's taylor ranking
for task in $tasks; do
  S=$out/${task}_seeds
  # shellcheck disable=SC2086
  [ -f "$S/results.csv" ] || python papa_scripts/run_papa_sweep.py "${sweep_flags[@]}" --task_name "$task" \
      --static_heads_nums $ks --controls mean_output mean_corrected --seeds $seeds --rank_per_seed \
      --ranker_sample seeded --output_dir "$S"
  glue=QNLI; [ "$task" = lm_qnli ] || glue=MRPC
  set_common "$task" "$glue" "$S/avgs"
  chosen=()
  for s in $seeds; do
    best_of "$S/bestof_choice_seed_$s" "$S/bestof_ranking_seed_$s" "$S/bestof" "_seed_$s" "$S/sort_seed_$s" "$s" \
        --ranker_max_samples "$seeded_blocks" --ranker_sample seeded
    chosen+=("$S/bestof_choice_seed_$s/best_of.csv")
  done
  # shellcheck disable=SC2086
  python "$here/compare_runs.py" "$S" "$S/bestof_k_{k}_seed_{seed}" --seeds $seeds --task "$task" --ks $best_ks \
      > "$S/best_of_compare.txt"
  python "$here/per_head_table.py" "${chosen[@]}" --profiles "$S/sort_seed_1/head_scores.csv" > "$S/per_head_table.md"
  if [ "$task" = lm_qnli ]; then
    papa-compare "$S" "$S" --variant_a mean_corrected --variant_b mean_output > "$S/mean_corrected_vs_mean_output.md"
  fi
done
echo "replayed into $out"
