#!/usr/bin/env bash
# Replays this finding from the repository root into a scratch folder (default outputs/findings/long_context_reach):
#   bash findings/long_context_reach/run.sh [--quick] [OUT]
# Full: SmolLM2 at T = 2 048, Toeplitz constants averaged on 16 pass-key examples, round 6's gates ranking of K/V
# groups (findings/long_context_retrieval/smollm2_t2048/sort_gates), ½ and ¾ of the groups with each constant kind
# at reaches 64, 256, 1 024 and 2 048, 20 keys each, the stock model on the same keys; the cache after the prompt;
# then the shortest reach's half at 8 192 tokens against the stock model there (10 keys, a minute a key each).
# About 80 minutes on 2 cores. --quick: T = 512 (and 1 024), 2 keys, two reaches, ½ only: about 3 minutes.
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
here=findings/long_context_reach
sort=findings/long_context_retrieval/smollm2_t2048/sort_gates
if [ "$quick" = 1 ]; then T=512; long=1024; keys=2; few=2; train=2; windows="64 256"; ks="135"
else T=2048; long=8192; keys=20; few=10; train=16; windows="64 256 1024 2048"; ks="135 204"; fi
mkdir -p "$out"
common=(--model_name_or_path smollm2 --task_name passkey)

# the inputs: Toeplitz constants of the pass key's training examples, sink_window constants of each window
[ -f "$out/toeplitz/structured_constants.pt" ] || python papa_scripts/run_papa_glue_avgs_creator.py "${common[@]}" \
    --max_length "$T" --max_train_samples "$train" --constants toeplitz --output_dir "$out/toeplitz"
for D in $windows; do
  [ -f "$out/sink_window_$D/structured_constants.pt" ] || python papa_scripts/run_papa_glue_avgs_creator.py \
      "${common[@]}" --max_length "$T" --constants sink_window --window "$D" --output_dir "$out/sink_window_$D"
done

evaluate() {  # name, length, keys, then the run's own flags
  local name=$1 length=$2 count=$3; shift 3
  [ -f "$out/$name/eval_predictions.jsonl" ] || python papa_scripts/run_papa_glue.py "${common[@]}" --do_eval \
      --max_seq_length "$length" --max_eval_samples "$count" --per_device_eval_batch_size 1 --report_to none \
      --output_dir "$out/$name" "$@"
}
evaluate stock "$T" "$keys"
runs=()
for k in $ks; do
  for D in $windows; do
    evaluate "toeplitz_D${D}_k$k" "$T" "$keys" --static_heads_dir "$out/toeplitz" --constants toeplitz --window "$D" \
        --static_heads_num "$k" --sorting_heads_dir "$sort"
    evaluate "sink_window_D${D}_k$k" "$T" "$keys" --static_heads_dir "$out/sink_window_$D" --constants sink_window \
        --window "$D" --static_heads_num "$k" --sorting_heads_dir "$sort"
    runs+=("toeplitz D=$D k=$k=$out/toeplitz_D${D}_k$k" "sink_window D=$D k=$k=$out/sink_window_D${D}_k$k")
  done
done
python findings/long_context_retrieval/compare.py --reference "stock=$out/stock" --runs "${runs[@]}" \
    --out "$out/keys_found.md"
# shellcheck disable=SC2086
python "$here/cache_bytes.py" --context "$T" --sorted_heads "$sort" --toeplitz "$out/toeplitz" --ks $ks \
    --windows $windows --out "$out/cache_bytes.md"

# at the model's own context: the shortest reach's half, its ranking and constants of T, against the stock model
D=${windows%% *}
evaluate "t$long/stock" "$long" "$few"
evaluate "t$long/toeplitz_D${D}_k135" "$long" "$few" --static_heads_dir "$out/toeplitz" --constants toeplitz \
    --window "$D" --static_heads_num 135 --sorting_heads_dir "$sort"
python findings/long_context_retrieval/compare.py --reference "stock=$out/t$long/stock" \
    --runs "toeplitz D=$D k=135=$out/t$long/toeplitz_D${D}_k135" --out "$out/keys_found_t$long.md"
python "$here/cache_bytes.py" --context "$long" --sorted_heads "$sort" --toeplitz "$out/toeplitz" --ks 135 \
    --windows "$D" --out "$out/cache_bytes_t$long.md"
