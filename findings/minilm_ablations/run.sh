#!/usr/bin/env bash
# Replays this finding from the repository root into a scratch folder (default outputs/findings/minilm_ablations):
#   bash findings/minilm_ablations/run.sh [--quick] [OUT]
# Full: the README's grid, the frozen MiniLM on SST-2, NER and CoLA (../shared/data or DATA_DIR), the first 1 200
# training and 500 validation examples, T = 64, k = 0, 36 and 72, the random order, zero output, first token and
# trained constant controls, seeds 1 2 3 each with its own ranking run, two stages at a time: summary.md, summary.csv,
# summary.png, ranking_stability.csv (between tasks), and this folder's sst2/, ner/, cola/ as
# all-MiniLM-L6-v2/<task>/ (results.md, results.csv, results_per_seed.csv, ranking_stability.csv between seeds,
# sweep.json, the figures). About 4 hours on 2 shared cores (the README's run: SST-2 2 h 8 min, NER and CoLA
# 1 h 50 min, beside a SmolLM2 sweep). The sweep keeps every finished stage: a second call only rewrites the tables.
# --quick: SST-2 and NER, 64 training and 32 validation examples, T = 32, one epoch, k = 0 and 36, seed 1 with its
# own ranking run, the same controls and tables: 61 s on 2 cores shared with other jobs (load 3; 119 s at load 6).
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
    --controls random_order zero_output first_token trained_constant --output_dir "$out" \
    --max_train_samples "$train" --max_eval_samples "$eval" --num_train_epochs "$epochs" --sort_num_train_epochs 1 \
    --learning_rate 1e-3 --static_heads_nums $ks --max_seq_length "$T" \
    --evaluation_strategy no --per_device_eval_batch_size 64 --seeds $seeds --rank_per_seed \
    --launcher local --max_parallel 2 --cpus_per_stage 1
echo "replayed into $out (per task: $out/all-MiniLM-L6-v2/<task>/)"
