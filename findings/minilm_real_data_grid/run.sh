#!/usr/bin/env bash
# Replays this finding from the repository root into a scratch folder (default outputs/findings/minilm_real_data_grid):
#   bash findings/minilm_real_data_grid/run.sh [--quick] [OUT]
# Full: the README's grid, the frozen MiniLM on SST-2, NER and CoLA (../shared/data or DATA_DIR), the first 1 200
# training and 500 validation examples, T = 64, k = 0, 36 and 72, the uniform, random order and mean output controls,
# seeds 1 2 3 with one ranking run, two stages at a time: summary.md, summary.csv, summary.png and each task's
# <task>_results_per_seed.csv (copied from all-MiniLM-L6-v2/<task>/results_per_seed.csv, beside each task's
# results.md): about 57 minutes on 2 cores (the README's re-run). The sweep keeps every finished stage, so a second
# call only rewrites the summary. --quick: SST-2 and NER, 64 training and 32 validation examples, T = 32, one epoch,
# k = 0 and 36, seed 1, the same controls and summary: 44 s on 2 cores shared with other jobs (load 3; 112 s at load 6),
# the same command and files.
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
if [ "$quick" = 1 ]; then
  tasks="sst2 ner"; train=64; eval=32; epochs=1; T=32; ks="0 36"; seeds="1"
else
  tasks="sst2 ner cola"; train=1200; eval=500; epochs=2; T=64; ks="0 36 72"; seeds="1 2 3"
fi
mkdir -p "$out"

# shellcheck disable=SC2086
python papa_scripts/run_papa_sweep.py --task_name $tasks --data_dir "$data" \
    --controls uniform random_order mean_output --output_dir "$out" \
    --max_train_samples "$train" --max_eval_samples "$eval" --num_train_epochs "$epochs" --sort_num_train_epochs 1 \
    --learning_rate 1e-3 --static_heads_nums $ks --max_seq_length "$T" \
    --evaluation_strategy no --per_device_eval_batch_size 64 --seeds $seeds \
    --launcher local --max_parallel 2 --cpus_per_stage 1

# the committed per-seed tables, named as in this folder
for task in $tasks; do
  cp "$out/all-MiniLM-L6-v2/$task/results_per_seed.csv" "$out/${task}_results_per_seed.csv"
done
echo "replayed into $out"
