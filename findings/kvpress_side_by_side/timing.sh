#!/usr/bin/env bash
# The timing pass, for a machine that runs nothing else: stock, PAPA's Toeplitz half (D = 64) and the presses that drop
# tokens at ½ (StreamingLLM, Knorm, TOVA, SnapKV), each prefilling on its own (no shared prefill), from the repository
# root:
#   bash findings/kvpress_side_by_side/timing.sh PROMPTS OUT ROUNDS VENV
# Round r takes prompt r of PROMPTS (prompts.py's JSON lines) through PAPA's side (one process: stock and the half)
# and kvpress's (one process in VENV: its stock and the four presses), the side that goes first alternating by round;
# into OUT/papa.jsonl, OUT/presses.jsonl and OUT/timing.md (table.py --ranges). At 8 192 tokens a round takes about
# 4 minutes on 2 cores.
set -euo pipefail
if [ $# -ne 4 ]; then echo "error: timing.sh takes PROMPTS OUT ROUNDS VENV, not '$*'" >&2; exit 2; fi
prompts="$1" out="$2" rounds="$3" venv="$4"
here=findings/kvpress_side_by_side
sort=findings/long_context_retrieval/smollm2_t2048/sort_gates
model="$(python -c 'from papa.models.bundled import local_model_path; print(local_model_path("smollm2"))')"
papa() {  # round $1's prompt through PAPA's side
  python "$here/papa_side.py" --prompts "$out/rounds/prompt$1.jsonl" --sorted_heads "$sort/sorted_heads.json" \
      --toeplitz findings/long_context_reach/t2048/toeplitz --ks 135 --window 64 --kinds toeplitz \
      --out "$out/rounds/papa$1.jsonl"
}
presses() {  # and through kvpress's
  "$venv/bin/python" "$here/press_side.py" --model "$model" --prompts "$out/rounds/prompt$1.jsonl" --ratios 0.5 \
      --presses StreamingLLM Knorm TOVA SnapKV --out "$out/rounds/presses$1.jsonl"
}
mkdir -p "$out/rounds"
: > "$out/rounds/papa.jsonl.all"; : > "$out/rounds/presses.jsonl.all"
for r in $(seq 1 "$rounds"); do
  sed -n "${r}p" "$prompts" > "$out/rounds/prompt$r.jsonl"
  if [ $((r % 2)) = 1 ]; then papa "$r"; presses "$r"; else presses "$r"; papa "$r"; fi
  cat "$out/rounds/papa$r.jsonl" >> "$out/rounds/papa.jsonl.all"
  cat "$out/rounds/presses$r.jsonl" >> "$out/rounds/presses.jsonl.all"
done
mv "$out/rounds/papa.jsonl.all" "$out/papa.jsonl"
mv "$out/rounds/presses.jsonl.all" "$out/presses.jsonl"
python "$here/table.py" --rows "$out/papa.jsonl" "$out/presses.jsonl" --ranges --out "$out/timing.md"
