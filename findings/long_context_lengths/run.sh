#!/usr/bin/env bash
# Replays this finding from the repository root into a scratch folder (default outputs/findings/long_context_lengths),
# every input made here:
#   bash findings/long_context_lengths/run.sh [--quick] [OUT]
# Full: for lm_qnli and lm_mrpc, the sweep at T = 1 024 (16 training blocks, 2 a step, 8 evaluated, batch 2) and at
# T = 128 (128 training blocks, 64 evaluated), k = 0, 135, 270 (each with its averages, its own λ ranking and each
# k's predictions: <task>_t<T>/), k = 135 at each length with the other length's ranking (k_135_other_ranking/),
# and lengths.py's tables lm_qnli.md and lm_mrpc.md: about 1 h 30 min on 2 cores (the README's 14:36-16:08 UTC,
# shared with the test suite and a benchmark). --quick: lm_qnli only, T = 128 against T = 32 (2 training blocks,
# 2 and 8 evaluated, the same 256 tokens), k = 0 and 135, the same scripts and table: 10 min 12 s at load 12-13
# here, niced (about 1 minute a sweep at load 8).
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
here=findings/long_context_lengths
if [ "$quick" = 1 ]; then
  tasks="lm_qnli"; long=128; short=32; long_train=2; long_eval=2; short_train=2; short_eval=8; ks="0 135"
  short_batch=8
else
  tasks="lm_qnli lm_mrpc"; long=1024; short=128; long_train=16; long_eval=8; short_train=128; short_eval=64
  ks="0 135 270"; short_batch=16
fi
mkdir -p "$out"

for task in $tasks; do
  L="$out/${task}_t$long" S="$out/${task}_t$short"
  # the two sweeps: averages, λ ranking, k constant heads (the short one at the sweep's default batch, 8 a step)
  # shellcheck disable=SC2086
  [ -f "$L/results.csv" ] || python papa_scripts/run_papa_sweep.py --model_name_or_path smollm2 --task_name "$task" \
      --data_dir "$data" --max_seq_length "$long" --max_train_samples "$long_train" --max_eval_samples "$long_eval" \
      --static_heads_nums $ks --per_device_train_batch_size 2 --extra_args="--per_device_eval_batch_size 2" \
      --output_dir "$L"
  # shellcheck disable=SC2086
  [ -f "$S/results.csv" ] || python papa_scripts/run_papa_sweep.py --model_name_or_path smollm2 --task_name "$task" \
      --data_dir "$data" --max_seq_length "$short" --max_train_samples "$short_train" --max_eval_samples "$short_eval" \
      --static_heads_nums $ks --output_dir "$S"
  # k = 135 at each length with the other length's ranking
  [ -f "$S/k_135_other_ranking/eval_predictions.jsonl" ] || python papa_scripts/run_papa_glue.py \
      --model_name_or_path smollm2 --task_name "$task" --data_dir "$data" --do_eval --max_seq_length "$short" \
      --per_device_eval_batch_size "$short_batch" --max_eval_samples "$short_eval" --static_heads_num 135 \
      --static_heads_dir "$S/avgs" --sorting_heads_dir "$L/sort" --save_strategy no --save_total_limit 0 \
      --report_to none --output_dir "$S/k_135_other_ranking"
  [ -f "$L/k_135_other_ranking/eval_predictions.jsonl" ] || python papa_scripts/run_papa_glue.py \
      --model_name_or_path smollm2 --task_name "$task" --data_dir "$data" --do_eval --max_seq_length "$long" \
      --per_device_eval_batch_size 2 --max_eval_samples "$long_eval" --static_heads_num 135 \
      --static_heads_dir "$L/avgs" --sorting_heads_dir "$S/sort" --save_strategy no --save_total_limit 0 \
      --report_to none --output_dir "$L/k_135_other_ranking"
  # the table: the two lengths over the same tokens, chunk by chunk
  python "$here/lengths.py" --long "$L" --short "$S" \
      --also "k_135:k_135_other_ranking:k_135, both ranked at T = $long" \
             "k_135_other_ranking:k_135:k_135, both ranked at T = $short" --out "$out/$task.md"
done
echo "replayed into $out"
