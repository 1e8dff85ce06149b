#!/usr/bin/env bash
# Replays this finding's SmolLM2 results from the repository root into a scratch folder (default
# outputs/findings/long_context_retrieval), every input made here:
#   bash findings/long_context_retrieval/run.sh [--quick] [OUT]
# Full: the stock baseline at 1 024-8 192 tokens (50 keys), the 2 048 grid (five rankers of K/V groups, Toeplitz
# constants of 16 pass-key examples, ¼ ½ ¾, 50 keys), five random orders (20 keys), the rankings applied at 4 096
# and 8 192 (gates and the random orders at ½, 10-20 keys), the figures and paired tables: about 14 hours on 2 cores
# (the 8 192-token evaluations take a minute a key). --quick: T = 512 (and 1 024), 2 keys, gates and taylor with 2
# steps, one random order, k = 0 and ½: about 5 minutes, the same commands and scripts.
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
here=findings/long_context_retrieval
if [ "$quick" = 1 ]; then
  T=512; lengths="512 1024"; long="1024"; keys=2; few=2; train=2; rank=2; steps=2; orders=1; ks="0 135"
  rankers="gates taylor"
else
  T=2048; lengths="1024 2048 4096 8192"; long="4096 8192"; keys=50; few=20; train=16; rank=8; steps=32; orders=5
  ks="0 66 135 204"; rankers="gates taylor retrieval loo iterative_taylor"
fi
mkdir -p "$out"
evaluate() {  # folder, T, keys, then the run's own flags
  local folder=$1 length=$2 count=$3; shift 3
  [ -f "$folder/eval_predictions.jsonl" ] || python papa_scripts/run_papa_glue.py --model_name_or_path smollm2 \
      --task_name passkey --do_eval --max_seq_length "$length" --max_eval_samples "$count" \
      --per_device_eval_batch_size 1 --report_to none --output_dir "$folder" "$@"
}

# 1. the stock baseline at each length, its heatmap and table
for L in $lengths; do evaluate "$out/stock/smollm2_t$L" "$L" "$keys"; done
python "$here/heatmap.py" --runs "smollm2=$out/stock/smollm2_t{T}" --lengths $lengths \
    --out "$out/stock_heatmap.png" --table "$out/stock/stock.md"

# 2. the grid at T: Toeplitz constants, every ranker of K/V groups, random orders, k = ks
# shellcheck disable=SC2086
python papa_scripts/run_papa_sweep.py --model_name_or_path smollm2 --task_name passkey --max_seq_length "$T" \
    --max_train_samples "$train" --max_eval_samples "$keys" --ranker_max_samples "$rank" --ranker_steps "$steps" \
    --ranker $rankers --random_orders "$orders" --rank_kv_groups --static_heads_nums $ks --constants toeplitz \
    --output_dir "$out/smollm2_t$T"
grid="$out/smollm2_t$T"
runs=()
for ranker in $rankers; do
  if [ "$ranker" = "${rankers%% *}" ]; then runs+=("$ranker=$grid/k_{k}"); else runs+=("$ranker=$grid/${ranker}_k_{k}"); fi
done
# the random orders of K/V groups, as the sweep's --random_orders draws them (seed 42, order i), each at ½, fewer keys
python - "$grid" "$orders" <<'PY'
import json, os, sys
from papa.run_folders import random_order_dir
from papa.sweep.controls import random_order
grid, orders = sys.argv[1], int(sys.argv[2])
for i in range(1, orders + 1):
    os.makedirs(os.path.join(grid, random_order_dir(i)), exist_ok=True)
    with open(os.path.join(grid, random_order_dir(i), "sorted_heads.json"), "w") as f:
        json.dump(random_order(30, 9, 42, i, group=3), f)  # SmolLM2: 30 layers, 9 query heads on 3 K/V heads
PY
for i in $(seq 1 "$orders"); do
  order=random_order; [ "$i" = 1 ] || order="random_order_$i"
  evaluate "$grid/random_orders/order_${i}_k135" "$T" "$few" --static_heads_dir "$grid/avgs" --constants toeplitz \
      --static_heads_num 135 --sorting_heads_dir "$grid/$order"
done
python "$here/accuracy_vs_k.py" --ks $ks --stock "$grid/k_0" --runs "${runs[@]}" \
    --out "$out/smollm2_t${T}_accuracy_vs_k.png" --table "$out/smollm2_t${T}_accuracy_vs_k.md"

# 3. the rankings and constants of T applied at longer lengths: gates' half against each random order's
first=${rankers%% *}
for L in $long; do
  evaluate "$out/smollm2_t$L/${first}_k135" "$L" "$few" --static_heads_dir "$grid/avgs" --constants toeplitz \
      --static_heads_num 135 --sorting_heads_dir "$grid/sort"
  compare=()
  for i in $(seq 1 "$orders"); do
    order=random_order; [ "$i" = 1 ] || order="random_order_$i"
    evaluate "$out/smollm2_t$L/order_${i}_k135" "$L" "$few" --static_heads_dir "$grid/avgs" --constants toeplitz \
        --static_heads_num 135 --sorting_heads_dir "$grid/$order"
    compare+=("order $i=$out/smollm2_t$L/order_${i}_k135")
  done
  python "$here/compare.py" --reference "stock=$out/stock/smollm2_t$L" \
      --runs "$first ½=$out/smollm2_t$L/${first}_k135" "${compare[@]}" --out "$out/smollm2_t${L}_half.md"
done
echo "replayed into $out"
