#!/usr/bin/env bash
# Replays this finding from the repository root into a scratch folder (default outputs/findings/smollm2_probes):
#   bash findings/smollm2_probes/run.sh [--quick] [OUT]
# Full, in the order they ran:
# 1. the first run's sweep with the freeze-extract probe on repeat (this folder's repeat/sweep_freeze_extract/): its
#    command ran with --controls random_order and k = 0 ... 270, was stopped after k = 0 and re-run with
#    --static_heads_nums 0, which wrote the files; run here with --static_heads_nums 0 from the start (averages over
#    512 sentences, the λ ranking run, k = 0) and --controls random_order (whose seed-42 order the hand runs read; so
#    its sweep.json lists the control, the committed one none), into OUT/smollm2_repeat/;
# 2. the hand-run version, repeat/run.sh and run3-5.sh, sst2/run.sh and run2-4.sh as they ran (the last-token
#    classifier), the repeat chain beside the SST-2 chain, one torch thread each, into OUT/smollm2_repeat_lt/ and
#    OUT/smollm2_sst2_lt/, and their tables repeat/results.md and sst2/results.md (with .csv; made by hand then,
#    by probe_table.py now, in the same way; their figures are not remade) in those folders;
# 3. the sweep with --probe model_head on repeat and SST-2, two seeds (repeat_sweep/, sst2_sweep/ with sort/'s
#    sorted_heads.json, probes_summary.md, .csv, .png), into OUT/smollm2_probe/smollm2/repeat/, .../sst2/ and
#    OUT/smollm2_probe/summary.*.
# λ was the sweep's default ranker then; a decoder's default is now taylor, so both sweeps are given --ranker lambda.
# About 3 hours on 2 cores (the README's wall times on a shared machine: 25 min, about 1 hour for the hand runs two
# at a time, 1 h 46 min for the model_head sweep). --quick: the same three steps on 8 training and 8 evaluation
# examples, k = 0 and ½ in the sweeps, one seed; of the hand runs repeat's ranking run, k = 0 and PAPA's half,
# SST-2's averages, k = 0 and random half (before the k = 0 runs were added: 7 minutes on a machine loaded 11-14 on its 2 cores, most of it process start-up).
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
if [ "$quick" = 1 ]; then
  rep_n=8; rep_eval=8; sst_n=8; sst_eval=8; probe_n=8; probe_eval=8; seeds="1"; sweep_ks="0 135"
  # of the hand runs: repeat's ranking run, k = 0 and PAPA's half, SST-2's averages, k = 0 and random half
  rep_ks="0 135"; rep_random=""; sst_ks="0"; sst_random="135"; sst_sorted_ks=""
else
  rep_n=512; rep_eval=500; sst_n=256; sst_eval=256; probe_n=512; probe_eval=500; seeds="1 2"; sweep_ks="0 135 270"
  rep_ks="0 270 135 266 253"; rep_random="135 266 253"; sst_ks="0 270"; sst_random="135"; sst_sorted_ks="135 68"
fi
mkdir -p "$out"

# 1. the sweep's freeze-extract probe on repeat, k = 0
fe="$out/smollm2_repeat"
# shellcheck disable=SC2086
python papa_scripts/run_papa_sweep.py --model_name_or_path smollm2 --task_name repeat --ranker lambda \
    --static_heads_nums 0 --controls random_order --max_train_samples "$rep_n" --max_eval_samples "$rep_eval" \
    --num_train_epochs 2 --sort_num_train_epochs 1 --learning_rate 1e-3 --output_dir "$fe"

# 2. the runs by hand: the sweep's stages with the last-token classifier (no --use_freeze_extract_pooler)
failed() {  # a run's log: its end, then the chain stops
  tail -n 30 "$1"; echo "failed (log: $1)" >&2; return 1
}
repeat_chain() {  # repeat/run.sh, run3.sh, run4.sh, run5.sh
  local O="$out/smollm2_repeat_lt" k
  local common=(--model_name_or_path smollm2 --task_name repeat --max_seq_length 32 --per_device_train_batch_size 16
    --per_device_eval_batch_size 64 --overwrite_output_dir --num_train_epochs 1 --learning_rate 3e-3
    --lr_scheduler_type constant --evaluation_strategy no --save_strategy no --use_papa_preprocess
    --static_heads_dir "$fe/avgs" --save_total_limit 0 --seed 42 --max_train_samples "$rep_n"
    --max_eval_samples "$rep_eval")
  mkdir -p "$O/random_order"
  cp "$fe/random_order/sorted_heads.json" "$O/random_order/sorted_heads.json"  # the sweep's seed-42 order
  [ -f "$O/sort/sorted_heads.json" ] || python -m papa.cli.glue "${common[@]}" --do_train --output_dir "$O/sort" \
      --sort_calculating True > "$O/sort.log" 2>&1 || failed "$O/sort.log"
  for k in $rep_ks; do
    [ -f "$O/k_$k/eval_results.json" ] || python -m papa.cli.glue "${common[@]}" --do_train --do_eval \
        --grad_for_classifier_only true --static_heads_num "$k" --sorting_heads_dir "$O/sort" --output_dir "$O/k_$k" \
        > "$O/k_$k.log" 2>&1 || failed "$O/k_$k.log"
  done
  for k in $rep_random; do
    [ -f "$O/random_k_$k/eval_results.json" ] || python -m papa.cli.glue "${common[@]}" --do_train --do_eval \
        --grad_for_classifier_only true --static_heads_num "$k" --sorting_heads_dir "$O/random_order" \
        --output_dir "$O/random_k_$k" > "$O/random_k_$k.log" 2>&1 || failed "$O/random_k_$k.log"
  done
  python findings/smollm2_probes/probe_table.py "$O" --task_name repeat \
      --title "SmolLM2-135M on repeat (last-token probe)"
}
sst2_chain() {  # sst2/run.sh (its averages), run2.sh, run3.sh, run4.sh
  local O="$out/smollm2_sst2_lt" D="$data/glue/SST-2" k
  mkdir -p "$O/random_order"
  cp "$fe/random_order/sorted_heads.json" "$O/random_order/sorted_heads.json"  # the sweep's seed-42 order
  [ -f "$O/avgs/avgs.pt" ] || python -m papa.cli.glue_avgs --model_name_or_path smollm2 --task_name sst2 \
      --data_dir "$D" --max_length 64 --per_device_train_batch_size 8 --output_dir "$O/avgs" \
      --use_papa_preprocess true --pad_to_max_length --seed 42 --max_train_samples "$sst_n" \
      > "$O/avgs.log" 2>&1 || failed "$O/avgs.log"
  local common=(--model_name_or_path smollm2 --task_name sst2 --data_dir "$D" --max_seq_length 64
    --per_device_train_batch_size 16 --per_device_eval_batch_size 32 --overwrite_output_dir --num_train_epochs 1
    --learning_rate 3e-3 --lr_scheduler_type constant --evaluation_strategy no --save_strategy no
    --use_papa_preprocess --static_heads_dir "$O/avgs" --save_total_limit 0 --seed 42 --max_train_samples "$sst_n"
    --max_eval_samples "$sst_eval")
  local probe=(--do_train --do_eval --grad_for_classifier_only true)
  # run2.sh: k = 0 and all need no ranking (they ran with the random order), then the random half
  for k in $sst_ks; do
    [ -f "$O/k_$k/eval_results.json" ] || python -m papa.cli.glue "${common[@]}" "${probe[@]}" \
        --sorting_heads_dir "$O/random_order" --static_heads_num "$k" --output_dir "$O/k_$k" \
        > "$O/k_$k.log" 2>&1 || failed "$O/k_$k.log"
  done
  for k in $sst_random; do
    [ -f "$O/random_k_$k/eval_results.json" ] || python -m papa.cli.glue "${common[@]}" "${probe[@]}" \
        --sorting_heads_dir "$O/random_order" --static_heads_num "$k" --output_dir "$O/random_k_$k" \
        > "$O/random_k_$k.log" 2>&1 || failed "$O/random_k_$k.log"
  done
  # run3.sh and run4.sh: the ranking run (λ, 1 epoch), PAPA's half, then its quarter
  [ -z "$sst_sorted_ks" ] || [ -f "$O/sort/sorted_heads.json" ] || python -m papa.cli.glue "${common[@]}" \
      --do_train --output_dir "$O/sort" --sort_calculating True > "$O/sort.log" 2>&1 || failed "$O/sort.log"
  for k in $sst_sorted_ks; do
    [ -f "$O/k_$k/eval_results.json" ] || python -m papa.cli.glue "${common[@]}" "${probe[@]}" \
        --static_heads_num "$k" --sorting_heads_dir "$O/sort" --output_dir "$O/k_$k" \
        > "$O/k_$k.log" 2>&1 || failed "$O/k_$k.log"
  done
  python findings/smollm2_probes/probe_table.py "$O" --task_name sst2 \
      --title "SmolLM2-135M on SST-2 (last-token probe)"
}
# the two chains side by side, one torch thread each, as they ran
OMP_NUM_THREADS=1 repeat_chain & repeat_pid=$!
OMP_NUM_THREADS=1 sst2_chain & sst2_pid=$!
wait "$repeat_pid"
wait "$sst2_pid"

# 3. the sweep with the model's own last-token classifier, both tasks, two seeds, the random order and zero output
# shellcheck disable=SC2086
python papa_scripts/run_papa_sweep.py --model_name_or_path smollm2 --task_name repeat sst2 --data_dir "$data" \
    --probe model_head --ranker lambda --static_heads_nums $sweep_ks --controls random_order zero_output \
    --max_train_samples "$probe_n" --max_eval_samples "$probe_eval" --num_train_epochs 1 --sort_num_train_epochs 1 \
    --learning_rate 3e-3 --evaluation_strategy no --seeds $seeds \
    --launcher local --max_parallel 2 --cpus_per_stage 1 --output_dir "$out/smollm2_probe"
echo "replayed into $out (smollm2_repeat/, smollm2_repeat_lt/, smollm2_sst2_lt/, smollm2_probe/)"
