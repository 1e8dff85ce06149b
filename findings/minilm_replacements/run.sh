#!/usr/bin/env bash
# Replays this finding from the repository root into a scratch folder (default outputs/findings/minilm_replacements):
#   bash findings/minilm_replacements/run.sh [--quick] [OUT]
# Full: the README's sweep on SST-2 and on NER (../shared/data or DATA_DIR): the frozen MiniLM, the first 1 200
# training and 500 validation examples, T = 64, k = 0, 36 and 63, the heads ranked by taylor on the first 256
# training examples, the mean output, mean_corrected, optimal_output and best_of controls (best_of choosing on the
# same 256): <task>/results.md, results.csv, best_of.csv (copied from the sweep's sort/best_of.csv) and
# per_head_table.md (findings/smollm2_best_of/per_head_table.py, the profiles from the sweep's own taylor ranking run,
# sort/head_scores.csv, which averaged the same data as the minilm_rankers_vs_random sweeps the committed table took
# them from). About 1 hour on 2 shared cores (the README's runs: SST-2 28 min, NER 34 min). The sweeps keep every
# finished stage: a second call only rewrites the tables. --quick: 64 training and 32 validation examples, taylor and
# best_of on the first 8, T = 32, one epoch, k = 0 and 36, both tasks, the same controls and tables, two stages at a
# time: 73 s on 2 cores shared with other jobs (load 3).
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
if [ "$quick" = 1 ]; then
  train=64; eval=32; rank=8; epochs=1; T=32; ks="0 36"
  launch=(--launcher local --max_parallel 2 --cpus_per_stage 1)
else
  train=1200; eval=500; rank=256; epochs=2; T=64; ks="0 36 63"
  launch=()
fi
mkdir -p "$out"

for task in sst2 ner; do
  # shellcheck disable=SC2086
  python papa_scripts/run_papa_sweep.py --task_name "$task" --data_dir "$data" --ranker taylor \
      --controls mean_output mean_corrected optimal_output best_of --ranker_max_samples "$rank" \
      --max_train_samples "$train" --max_eval_samples "$eval" --num_train_epochs "$epochs" --sort_num_train_epochs 1 \
      --learning_rate 1e-3 --static_heads_nums $ks --max_seq_length "$T" --evaluation_strategy no \
      --per_device_eval_batch_size 64 --output_dir "$out/$task" "${launch[@]}"
  cp "$out/$task/sort/best_of.csv" "$out/$task/best_of.csv"
  python findings/smollm2_best_of/per_head_table.py "$out/$task/best_of.csv" \
      --profiles "$out/$task/sort/head_scores.csv" > "$out/$task/per_head_table.md"
done
echo "replayed into $out"
