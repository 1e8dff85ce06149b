#!/usr/bin/env bash
# Replays this finding from the repository root into a scratch folder (default
# outputs/findings/long_context_sum_precision):
#   bash findings/long_context_sum_precision/run.sh [--quick] [OUT]
# Full: sum_precision.py's averaging pass of SmolLM2-135M over 256 blocks of lm_qnli at T = 128, batch 4, summed in
# float32 and float64 (sum_precision.json, its printed JSON), and sum_precision.md, the README's table made from that
# JSON: about 10 minutes of CPU (measured: 45 min wall at load 12, niced; the README states no time). --quick: 8
# blocks of 32 tokens, the same script and table: 2 min 35 s at load 11-13 here, niced (21 s of CPU).
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
here=findings/long_context_sum_precision
if [ "$quick" = 1 ]; then T=32; blocks=8; batch=4; else T=128; blocks=256; batch=4; fi
mkdir -p "$out"

# the pass: float32 and float64 sums of the same lower triangles; the script prints its result as JSON
if [ ! -f "$out/sum_precision.json" ]; then
  python "$here/sum_precision.py" --seq_len "$T" --blocks "$blocks" --batch "$batch" --data_dir "$data" \
      > "$out/sum_precision.json.tmp"
  mv "$out/sum_precision.json.tmp" "$out/sum_precision.json"
fi

# the README's table, from that JSON (no other computation)
python - "$out/sum_precision.json" "$out/sum_precision.md" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
eps = r["float32_eps"]
lines = [f"# float32 against float64 sums: SmolLM2-135M, lm_qnli, T = {r['seq_len']}, {r['blocks']} blocks "
         f"({r['batches']} batches of {r['batch']})", "",
         "| | absolute | relative (where the float64 sum > 10⁻³) |", "| --- | ---: | ---: |",
         f"| sums (largest sum {r['sums_max']:g}) | {r['sums_max_abs_diff']:.1e} | {r['sums_max_rel_diff']:.1e} "
         f"({r['sums_max_rel_diff'] / eps:.1f} float32 ε) |",
         f"| averages | {r['avgs_max_abs_diff']:.1e} | {r['avgs_max_rel_diff']:.1e} |"]
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
echo "replayed into $out"
