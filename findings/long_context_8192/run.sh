#!/usr/bin/env bash
# Replays this finding from the repository root into a scratch folder (default outputs/findings/long_context_8192):
#   bash findings/long_context_8192/run.sh [--quick] [OUT]
# Full: SmolLM2 at T = 8 192 with the configuration of findings/long_context_reach (round 6's gates ranking of K/V
# groups, Toeplitz constants averaged at 2 048 and cut to D = 64): the stock model and ½ of the groups on the first
# 10 pass keys; five random orders of groups and ¾ (k = 204) on the same keys; the pass key hidden in natural text
# (MRPC's news sentences: 20 keys at 2 048, 10 at 8 192); the four RULER-style tasks, 10 examples each (transfer:
# the ranking and constants are the pass key's); plain-text perplexity on 2 blocks of QNLI; a gates ranking across
# lengths 1 024-8 192 made with the D = 64 constants, its ½ and ¾; generation's cache, prefill, decode and peak RSS
# (benchmarks/long_context_memory.py); Gemma-3-270M's stock baseline at 16 384 (5 keys, one per depth). About 2 hours
# 40 minutes on 2 cores. --quick: T = 1 024, 2 examples, two random orders, a 2-step ranking at 256 and 512,
# generation at 512 tokens, Gemma-3 at 1 024: a few minutes.
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
compare=findings/long_context_retrieval/compare.py
const=findings/long_context_reach/t2048/toeplitz
sort=findings/long_context_retrieval/smollm2_t2048/sort_gates
if [ "$quick" = 1 ]; then
  T=1024; short=512; keys=2; natural=2; blocks=1; orders="1 2"; lengths="256 512"; steps=2; context=512; new=2; rounds=1
else
  T=8192; short=2048; keys=10; natural=20; blocks=2; orders="1 2 3 4 5"; lengths="1024 2048 4096 8192"; steps=32
  context=8192; new=32; rounds=2
fi
mkdir -p "$out"
reach=(--static_heads_dir "$const" --constants toeplitz --window 64)

evaluate() {  # name, task, length, examples, then the run's own flags
  local name=$1 task=$2 length=$3 count=$4; shift 4
  [ -f "$out/$name/eval_predictions.jsonl" ] || python papa_scripts/run_papa_glue.py --model_name_or_path smollm2 \
      --task_name "$task" --do_eval --max_seq_length "$length" --max_eval_samples "$count" \
      --per_device_eval_batch_size 1 --report_to none --output_dir "$out/$name" "$@"
}

# the pass key: stock, gates' half and three quarters, five random orders' halves
evaluate stock passkey "$T" "$keys"
evaluate gates_D64_k135 passkey "$T" "$keys" "${reach[@]}" --static_heads_num 135 --sorting_heads_dir "$sort"
evaluate gates_D64_k204 passkey "$T" "$keys" "${reach[@]}" --static_heads_num 204 --sorting_heads_dir "$sort"
runs=("gates ½=$out/gates_D64_k135" "gates ¾=$out/gates_D64_k204")
pairs=()
for i in $orders; do
  order=findings/long_context_retrieval/smollm2_t2048/random_order; [ "$i" -gt 1 ] && order=${order}_$i
  evaluate "order_${i}_D64_k135" passkey "$T" "$keys" "${reach[@]}" --static_heads_num 135 --sorting_heads_dir "$order"
  runs+=("order $i ½=$out/order_${i}_D64_k135"); pairs+=("gates ½:order $i ½")
done

# the pass key in natural text (MRPC's news), which neither the ranking nor the constants saw
for length in "$short" "$T"; do
  count=$keys; [ "$length" = "$short" ] && count=$natural
  evaluate "natural_mrpc_t$length/stock" passkey "$length" "$count" --filler mrpc --data_dir "$data"
  evaluate "natural_mrpc_t$length/gates_D64_k135" passkey "$length" "$count" --filler mrpc --data_dir "$data" \
      "${reach[@]}" --static_heads_num 135 --sorting_heads_dir "$sort"
  python "$compare" --reference "stock=$out/natural_mrpc_t$length/stock" \
      --runs "gates ½=$out/natural_mrpc_t$length/gates_D64_k135" --out "$out/natural_mrpc_t$length.md"
done

# transfer: the RULER-style tasks with the pass key's ranking and constants
for task in multikey multivalue vartrack common_words; do
  evaluate "$task/stock" "$task" "$T" "$keys"
  evaluate "$task/gates_D64_k135" "$task" "$T" "$keys" "${reach[@]}" --static_heads_num 135 --sorting_heads_dir "$sort"
  python "$compare" --reference "stock=$out/$task/stock" --runs "gates ½=$out/$task/gates_D64_k135" \
      --out "$out/$task.md"
done
for name in stock gates_D64_k135; do
  extra=(); [ "$name" = stock ] || extra=("${reach[@]}" --static_heads_num 135 --sorting_heads_dir "$sort")
  evaluate "lm_qnli/$name" lm_qnli "$T" "$blocks" --data_dir "$data" "${extra[@]}"
done

# generation with the configuration: cache, prefill, decode, peak RSS (glibc's mmap threshold fixed, then dynamic)
common=(--model smollm2 --context "$context" --new_tokens "$new" --sorted_heads "$sort/sorted_heads.json"
        --fractions 0.5 0.75 --replacement toeplitz --constants "$const" --window 64 --threads 2)
[ -f "$out/generation.md" ] || python benchmarks/long_context_memory.py "${common[@]}" --rounds "$rounds" \
    --out "$out/generation.md"
[ -f "$out/generation_glibc_dynamic.md" ] || python benchmarks/long_context_memory.py "${common[@]}" --rounds 0 \
    --malloc_mmap_threshold 0 --out "$out/generation_glibc_dynamic.md"

# a gates ranking across lengths, made with the D = 64 constants, and its half and three quarters
# shellcheck disable=SC2086
[ -f "$out/sort_gates_lengths/sorted_heads.json" ] || python papa_scripts/run_papa_glue.py \
    --model_name_or_path smollm2 --task_name passkey --do_train --do_eval --max_seq_length "$T" \
    --max_train_samples 16 --max_eval_samples 1 --per_device_eval_batch_size 1 --ranker_max_samples 2 \
    --sort_calculating True --ranker gates --ranker_steps "$steps" --rank_kv_groups true "${reach[@]}" \
    --ranker_lengths $lengths --output_dir "$out/sort_gates_lengths" --report_to none
for k in 135 204; do
  evaluate "lengths_D64_k$k" passkey "$T" "$keys" "${reach[@]}" --static_heads_num $k \
      --sorting_heads_dir "$out/sort_gates_lengths"
done
runs+=("lengths ½=$out/lengths_D64_k135" "lengths ¾=$out/lengths_D64_k204")
python "$compare" --reference "stock=$out/stock" --runs "${runs[@]}" --pairs "${pairs[@]}" --out "$out/keys_found.md"

# Gemma-3-270M (a 32k context) at 16 384 tokens, stock, one key per depth
if [ "$quick" = 1 ]; then glong=1024; else glong=16384; fi
[ -f "$out/gemma3_t$glong/stock/eval_predictions.jsonl" ] || python papa_scripts/run_papa_glue.py \
    --model_name_or_path gemma3 --task_name passkey --do_eval --max_seq_length "$glong" --max_eval_samples 5 \
    --per_device_eval_batch_size 1 --report_to none --output_dir "$out/gemma3_t$glong/stock"
echo "replayed into $out"
