#!/bin/bash
# The tables of findings/long_context_structured/README.md, from the run folders
# (RUNS, default outputs/lc51) that the section's commands make. Each T's table is written only when its runs exist.
RUNS=${RUNS:-outputs/lc51}
cd "$(dirname "$0")/../.."
table() { # T, full constants' T or "", the other averaging T, k values...
  local T=$1 full=$2 own=$3; shift 3
  local rows=() pairs=()
  for k in "$@"; do
    [ -n "$full" ] && rows+=("t${T}_full${full}_k$k:full, averaged at $full, k = $k")
    rows+=("t${T}_toep${own}_k$k:toeplitz, averaged at $own, k = $k" "t${T}_toep128_k$k:toeplitz, averaged at 128, k = $k"
           "t${T}_sw_k$k:sink_window (4 + 64), k = $k")
    [ -n "$full" ] && pairs+=("t${T}_toep128_k$k:t${T}_full${full}_k$k:toeplitz(128) − full($full), k = $k"
                              "t${T}_toep${own}_k$k:t${T}_full${full}_k$k:toeplitz($own) − full($full), k = $k")
    pairs+=("t${T}_toep128_k$k:t${T}_toep${own}_k$k:toeplitz(128) − toeplitz($own), k = $k"
            "t${T}_sw_k$k:t${T}_toep128_k$k:sink_window − toeplitz(128), k = $k")
  done
  python findings/long_context_structured/structured.py --runs "$RUNS" --seq_len "$T" --stock "t${T}_k0" \
      --rows "${rows[@]}" --pairs "${pairs[@]}" --out "findings/long_context_structured/structured_t$T.md"
}
for T in 1024 2048; do  # full constants averaged at T itself beside Toeplitz at T and at 128, k = ½ and all
  [ -f "$RUNS/t${T}_k0/eval_predictions.jsonl" ] && table $T $T $T 135 270
done
