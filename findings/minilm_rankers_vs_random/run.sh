#!/usr/bin/env bash
# Replays this finding from the repository root into a scratch folder (default
# outputs/findings/minilm_rankers_vs_random):
#   bash findings/minilm_rankers_vs_random/run.sh [--quick] [OUT]
# Full: the frozen MiniLM on SST-2 and NER (../shared/data or DATA_DIR), the first 1 200 training and 500 validation
# examples, T = 64, k = 0, 63 and 68, five random orders. 1. One seed: SST-2 ranked by λ, taylor and loo, NER by λ
# and taylor (sst2/, ner/: results.md, results.csv, results.png, head_scores_<ranker>.csv copied from each ranking
# run, kept_dynamic_k63.md by findings/smollm2_rankers_lm_qnli/kept_dynamic.py). 2. Three seeds of taylor, each seed
# ranking with its own probe (<task>_taylor_seeds/). 3. λ, loo, iterative taylor and gates with three seeds, each in
# a folder holding a copy of the taylor sweep's avgs/, k = 0 runs and random orders' runs, as the README's run did
# (<task>_<ranker>_seeds/: results.md, results.csv, results_per_seed.csv, head_scores_<ranker>_seed_<s>.csv). About
# 10 hours on 2 shared cores (the stage times in the committed results.md files: loo's rankings alone 1-1.5 hours
# per task). The sweeps keep every finished stage: a second call only rewrites the tables.
# --quick: SST-2 only, 64 training and 32 validation examples, T = 32, one epoch, k = 0 and 63, two random orders,
# seed 1, the same three parts with the quicker rankers (1. λ and taylor; 3. λ and gates), two stages at a time:
# 91 s on 2 cores shared with other jobs (load 3; 204 s at load 5).
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
if [ "$quick" = 1 ]; then
  tasks="sst2"; train=64; eval=32; epochs=1; T=32; ks="0 63"; orders=2; seeds="1"; one="lambda taylor"
  others="lambda gates"
  launch=(--launcher local --max_parallel 2 --cpus_per_stage 1)
else
  tasks="sst2 ner"; train=1200; eval=500; epochs=2; T=64; ks="0 63 68"; orders=5; seeds="1 2 3"; one=""
  others="lambda loo iterative_taylor gates"
  launch=()
fi
mkdir -p "$out"
# shellcheck disable=SC2206
common=(--data_dir "$data" --random_orders "$orders" --max_train_samples "$train" --max_eval_samples "$eval"
        --num_train_epochs "$epochs" --sort_num_train_epochs 1 --learning_rate 1e-3 --static_heads_nums $ks
        --max_seq_length "$T" --evaluation_strategy no --per_device_eval_batch_size 64 "${launch[@]}")

for task in $tasks; do
  # 1. one seed: λ, taylor and loo (SST-2) or λ and taylor (NER) against the random orders
  if [ "$task" = sst2 ]; then rankers="lambda taylor loo"; else rankers="lambda taylor"; fi
  rankers="${one:-$rankers}"
  # shellcheck disable=SC2086
  python papa_scripts/run_papa_sweep.py --task_name "$task" --ranker $rankers "${common[@]}" --output_dir "$out/$task"
  for ranker in $rankers; do
    sort=sort; [ "$ranker" = "${rankers%% *}" ] || sort="sort_$ranker"
    cp "$out/$task/$sort/head_scores.csv" "$out/$task/head_scores_$ranker.csv"
  done
  python findings/smollm2_rankers_lm_qnli/kept_dynamic.py "$out/$task" 63 --out "$out/$task/kept_dynamic_k63.md"

  # 2. three seeds of taylor, each seed ranked with its own k = 0 probe
  taylor="$out/${task}_taylor_seeds"
  # shellcheck disable=SC2086
  python papa_scripts/run_papa_sweep.py --task_name "$task" --ranker taylor --seeds $seeds --rank_per_seed \
      "${common[@]}" --output_dir "$taylor"

  # 3. every other ranker with the same seeds, beside a copy of the taylor sweep's averages, k = 0 runs and random
  #    orders' runs (kept as up to date, so each ranker meets the same orders under the same seeds' probes)
  for ranker in taylor $others; do
    sweep="$out/${task}_${ranker}_seeds"
    if [ "$ranker" != taylor ]; then
      mkdir -p "$sweep"
      for part in "$taylor"/avgs "$taylor"/k_0_seed_* "$taylor"/random_order* "$taylor"/random*_k_*; do
        [ -e "$sweep/$(basename "$part")" ] || cp -a "$part" "$sweep/"
      done
      # shellcheck disable=SC2086
      python papa_scripts/run_papa_sweep.py --task_name "$task" --ranker "$ranker" --seeds $seeds --rank_per_seed \
          "${common[@]}" --output_dir "$sweep"
    fi
    for s in $seeds; do
      cp "$sweep/sort_seed_$s/head_scores.csv" "$sweep/head_scores_${ranker}_seed_$s.csv"
    done
  done
done
echo "replayed into $out"
