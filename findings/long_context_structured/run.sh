#!/usr/bin/env bash
# Replays this finding from the repository root into a scratch folder (default
# outputs/findings/long_context_structured):
#   bash findings/long_context_structured/run.sh [--quick] [OUT]
# Full: structured_runs.sh's averaging passes and evaluations on lm_qnli, in its order, with its flags, each under
# /usr/bin/time -v (peak RSS in runs/<name>.time): Toeplitz constants averaged at 128, 1 024, 2 048 and 8 192,
# sink_window (4 + 64), full constants at 1 024 and 2 048; k = 135 and 270 of each at T = 1 024 (8 blocks) and
# 2 048 (4 blocks), k = 135 of Toeplitz(8 192) and Toeplitz(128) at 8 192 (1 block), the stock runs; then
# structured_tables.sh's tables structured_t1024.md and structured_t2048.md (made here with structured.py itself,
# as structured_tables.sh writes over the committed ones), and far_weight.py's line (far_weight.txt). The heads: the
# first k of the taylor ranking of smollm2_rankers_lm_qnli's lm_qnli sweep, read from its committed
# findings/smollm2_rankers_lm_qnli/five_rankers/head_scores_taylor.csv (rank order) into sort_taylor/. The README's
# T = 8 192 table (one block: perplexity, peak RSS and wall from the runs' eval_results.json and .time files) is
# one_block.py's structured_t8192.md; times and peak RSS are this machine's. About 2 hours on 2 cores (the README's
# sessions, 03:11-04:15 and 09:22-10:09 UTC, at load 3-11). --quick: averages at 32 and 128 tokens, k = 135 at
# T = 128 (2 blocks), the same commands, tables (one_block.py's on the T = 128 runs) and far_weight.py: 13 min 19 s
# at load 11-13 here, niced (1 min 24 s of CPU: 9 fresh processes).
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
here=findings/long_context_structured
O="$out/runs" SORT="$out/sort_taylor"
mkdir -p "$O" "$SORT"

# the ranking: the committed taylor scores in rank order, as sorted_heads.json ([layer, head] pairs)
python - findings/smollm2_rankers_lm_qnli/five_rankers/head_scores_taylor.csv "$SORT/sorted_heads.json" <<'PY'
import csv, json, sys
rows = sorted(csv.DictReader(open(sys.argv[1])), key=lambda r: int(r["rank"]))
json.dump([[int(r["layer"]), int(r["head"])] for r in rows], open(sys.argv[2], "w"))
PY

avg() {  # name T blocks batch constants-args... (structured_runs.sh's avg)
  local name=$1 T=$2 n=$3 b=$4; shift 4
  [ -f "$O/$name/done" ] && return
  /usr/bin/time -v -o "$O/$name.time" python -m papa.cli.glue_avgs --model_name_or_path smollm2 \
      --task_name lm_qnli --data_dir "$data" --max_length "$T" --per_device_train_batch_size "$b" \
      --output_dir "$O/$name" --seed 42 --max_train_samples "$n" "$@" > "$O/$name.log" 2>&1 \
      || { tail -20 "$O/$name.log"; exit 1; }
  touch "$O/$name/done"
  echo "avg $name: $(grep Maximum "$O/$name.time")"
}
ev() {  # name T blocks batch k constants-dir constants (structured_runs.sh's ev)
  local name=$1 T=$2 n=$3 b=$4 k=$5 dir=$6 c=$7
  [ -f "$O/$name/eval_results.json" ] && return
  /usr/bin/time -v -o "$O/$name.time" python -m papa.cli.glue --model_name_or_path smollm2 --task_name lm_qnli \
      --data_dir "$data" --do_eval --max_seq_length "$T" --per_device_eval_batch_size "$b" --max_eval_samples "$n" \
      --static_heads_num "$k" --static_heads_dir "$dir" --sorting_heads_dir "$SORT" --constants "$c" \
      --save_strategy no --save_total_limit 0 --report_to none --seed 42 --output_dir "$O/$name" \
      > "$O/$name.log" 2>&1 || { tail -20 "$O/$name.log"; exit 1; }
  echo "eval $name: $(grep Maximum "$O/$name.time")"
}
table() {  # T, the other averaging T (full and Toeplitz), the short T, k values (structured_tables.sh's table)
  local T=$1 own=$2 s=$3; shift 3
  local rows=() pairs=()
  for k in "$@"; do
    rows+=("t${T}_full${own}_k$k:full, averaged at $own, k = $k"
           "t${T}_toep${own}_k$k:toeplitz, averaged at $own, k = $k"
           "t${T}_toep${s}_k$k:toeplitz, averaged at $s, k = $k" "t${T}_sw_k$k:sink_window (4 + 64), k = $k")
    pairs+=("t${T}_toep${s}_k$k:t${T}_full${own}_k$k:toeplitz($s) − full($own), k = $k"
            "t${T}_toep${own}_k$k:t${T}_full${own}_k$k:toeplitz($own) − full($own), k = $k"
            "t${T}_toep${s}_k$k:t${T}_toep${own}_k$k:toeplitz($s) − toeplitz($own), k = $k"
            "t${T}_sw_k$k:t${T}_toep${s}_k$k:sink_window − toeplitz($s), k = $k")
  done
  python "$here/structured.py" --runs "$O" --seq_len "$T" --stock "t${T}_k0" --rows "${rows[@]}" \
      --pairs "${pairs[@]}" --out "$out/structured_t$T.md"
}

if [ "$quick" = 1 ]; then
  s=32 T=128
  avg toep_t$s $s 8 8 --constants toeplitz
  avg toep_t$T $T 2 2 --constants toeplitz
  avg sw $s 1 1 --constants sink_window --sink_tokens 4 --window 64
  avg full_t$T $T 2 2
  ev t${T}_toep${s}_k135 $T 2 2 135 "$O/toep_t$s" toeplitz
  ev t${T}_toep${T}_k135 $T 2 2 135 "$O/toep_t$T" toeplitz
  ev t${T}_full${T}_k135 $T 2 2 135 "$O/full_t$T" full
  ev t${T}_sw_k135 $T 2 2 135 "$O/sw" sink_window
  ev t${T}_k0 $T 2 2 0 "$O/toep_t$s" toeplitz
  table $T $T $s 135
  python "$here/one_block.py" --runs "$O" --stock "t${T}_k0" --rows "t${T}_toep${s}_k135:Toeplitz, averaged at $s" \
      "t${T}_toep${T}_k135:Toeplitz, averaged at $T" --out "$out/structured_t$T.one_block.md"
else  # structured_runs.sh, step by step
  s=128 T=$s
  avg toep_t128 128 128 16 --constants toeplitz
  avg toep_t1024 1024 16 2 --constants toeplitz
  avg sw 128 1 1 --constants sink_window --sink_tokens 4 --window 64
  avg full_t1024 1024 16 2
  for k in 135 270; do
    ev t1024_toep128_k$k 1024 8 2 $k "$O/toep_t128" toeplitz
    ev t1024_toep1024_k$k 1024 8 2 $k "$O/toep_t1024" toeplitz
    ev t1024_full1024_k$k 1024 8 2 $k "$O/full_t1024" full
    ev t1024_sw_k$k 1024 8 2 $k "$O/sw" sink_window
  done
  ev t1024_k0 1024 8 2 0 "$O/toep_t128" toeplitz
  avg toep_t8192 8192 1 1 --constants toeplitz
  ev t8192_toep8192_k135 8192 1 1 135 "$O/toep_t8192" toeplitz
  ev t8192_toep128_k135 8192 1 1 135 "$O/toep_t128" toeplitz
  avg toep_t2048 2048 8 1 --constants toeplitz
  avg full_t2048 2048 8 1
  for k in 135 270; do
    ev t2048_full2048_k$k 2048 4 1 $k "$O/full_t2048" full
    ev t2048_toep128_k$k 2048 4 1 $k "$O/toep_t128" toeplitz
    ev t2048_toep2048_k$k 2048 4 1 $k "$O/toep_t2048" toeplitz
    ev t2048_sw_k$k 2048 4 1 $k "$O/sw" sink_window
  done
  ev t2048_k0 2048 4 1 0 "$O/toep_t128" toeplitz
  ev t8192_k0 8192 1 1 0 "$O/toep_t128" toeplitz
  table 1024 1024 128 135 270
  table 2048 2048 128 135 270
  python "$here/one_block.py" --runs "$O" --stock t8192_k0 \
      --rows "t8192_toep128_k135:Toeplitz, averaged at 128 (16 384 tokens)" \
      "t8192_toep8192_k135:Toeplitz, averaged at 8 192 (one block, 8 192 tokens)" --out "$out/structured_t8192.md"
  T=1024
fi
# the share of the ranking's first 135 heads' last-row weight beyond the short average's reach
python "$here/far_weight.py" --constants "$O/toep_t$T" --sorting_heads_dir "$SORT" --k 135 --beyond $((s - 1)) \
    | tee "$out/far_weight.txt"
echo "replayed into $out"
