#!/usr/bin/env bash
# Replays this finding's benchmarks from the repository root into a scratch folder (default
# outputs/findings/long_context_cost):
#   bash findings/long_context_cost/run.sh [--quick] [OUT]
# Full: the commands of benchmarks/results/smollm2_long_context_cpu.md and of the README's run log, each report in
# OUT: structured_product.py at T = 128, 512, 1 024, 2 048, 15 rounds (structured_product_cpu.md, the README's FFT
# table); long_context.py at T = 2 048, every step, 5 rounds (smollm2_long_context_t2048.md: the memory table; today's
# script also runs its averaging_toeplitz step and the Toeplitz model in the timing); at T = 2 048 the averaging
# passes and the timing, 11 rounds, with the first 135 heads of the taylor ranking constant, then the timing again on
# the same files (smollm2_long_context_t2048_toeplitz*.md: the README's 1.11x); at T = 1 024 forward_sdpa,
# eval_stock and sweep_probe (smollm2_long_context_t1024.md). The ranking: smollm2_rankers_lm_qnli's lm_qnli sweep's
# taylor ranking, read from its committed findings/smollm2_rankers_lm_qnli/five_rankers/head_scores_taylor.csv
# (rank order) into sort_taylor/. Peak RSS should reproduce; every time is this machine's and will differ (the
# README's were measured on a loaded, then an idle, 2-core VM). About 70 minutes on 2 cores (the README's 41 minutes
# at T = 2 048, 18 for the Toeplitz timings, 10 at T = 1 024; the product's few minutes). --quick: the product at
# T = 128 and 256, 2 rounds; one long_context.py call at T = 64 with every step (1 block each, 1 round, the taylor
# ranking in the timing): 17 min 27 s at load 12 here, niced (2 min 33 s of CPU: each step is a fresh process).
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
sort="$out/sort_taylor"
mkdir -p "$out" "$sort"

# the ranking whose first 135 heads the timing makes constant: the committed taylor scores in rank order
python - findings/smollm2_rankers_lm_qnli/five_rankers/head_scores_taylor.csv "$sort/sorted_heads.json" <<'PY'
import csv, json, sys
rows = sorted(csv.DictReader(open(sys.argv[1])), key=lambda r: int(r["rank"]))
json.dump([[int(r["layer"]), int(r["head"])] for r in rows], open(sys.argv[2], "w"))
PY

if [ "$quick" = 1 ]; then
  [ -f "$out/structured_product_cpu.md" ] || python benchmarks/structured_product.py --seq_lens 128 256 --rounds 2 \
      --out "$out/structured_product_cpu.md"
  [ -f "$out/smollm2_long_context_t64.md" ] || python benchmarks/long_context.py --seq_len 64 --work "$out/t64" \
      --data_dir "$data" --avg_blocks 1 --rank_blocks 1 --eval_blocks 1 --sweep_samples 1 --rounds 1 \
      --sorted_heads "$sort" --out "$out/smollm2_long_context_t64"
else
  # the FFT product against full constants, one layer (the README's first table)
  [ -f "$out/structured_product_cpu.md" ] || python benchmarks/structured_product.py \
      --seq_lens 128 512 1024 2048 --rounds 15 --out "$out/structured_product_cpu.md"
  # T = 2 048: every step's peak RSS and wall (the README's memory table), defaults: 3 / 2 / 2 blocks, 2 per sweep
  [ -f "$out/smollm2_long_context_t2048.md" ] || python benchmarks/long_context.py --seq_len 2048 \
      --work "$out/t2048" --data_dir "$data" --rounds 5 --out "$out/smollm2_long_context_t2048"
  # T = 2 048: half the heads Toeplitz-constant, the forward's time; then the timing again on the same files
  [ -f "$out/smollm2_long_context_t2048_toeplitz.md" ] || python benchmarks/long_context.py --seq_len 2048 \
      --work "$out/t2048_toeplitz" --data_dir "$data" --only averaging averaging_toeplitz timing --avg_blocks 3 \
      --rounds 11 --sorted_heads "$sort" --out "$out/smollm2_long_context_t2048_toeplitz"
  [ -f "$out/smollm2_long_context_t2048_toeplitz_timing.md" ] || python benchmarks/long_context.py --seq_len 2048 \
      --work "$out/t2048_toeplitz" --data_dir "$data" --only timing --avg_blocks 3 --rounds 11 \
      --sorted_heads "$sort" --out "$out/smollm2_long_context_t2048_toeplitz_timing"
  # T = 1 024: the probe sweep beside a stock forward and a stock lm evaluation
  [ -f "$out/smollm2_long_context_t1024.md" ] || python benchmarks/long_context.py --seq_len 1024 \
      --work "$out/t1024" --data_dir "$data" --only forward_sdpa eval_stock sweep_probe \
      --out "$out/smollm2_long_context_t1024"
fi
echo "replayed into $out"
