#!/usr/bin/env bash
# Replays this finding from the repository root into a scratch folder (default outputs/findings/kvpress_side_by_side):
#   bash findings/kvpress_side_by_side/run.sh [--quick] [OUT]
# (kvpress in an environment of its own, made here by make_env.sh at $KVPRESS_VENV, default outputs/kvpress_venv,
# with pip from the package index: the project's environment needs no kvpress, and the tests' replay sample can draw
# this folder like any other.)
# Full: the pass-key prompts at 2 048 (20 keys) and 8 192 tokens (10 keys); PAPA's side (the stock model, the first
# ¼ ½ ¾ of round 6's gates ranking of K/V groups constant, Toeplitz constants cut to a reach of 64 and sink_window
# constants of 64) and kvpress's (StreamingLLM, SnapKV, TOVA, Knorm, ExpectedAttention, PyramidKV, AdaKV,
# DuoAttention given PAPA's ranking, a random press, each removing ¼ ½ ¾); passkey_multi and multikey at 2 048 (20
# each, ½ only, into OUT/t2048_<task>/: PAPA's side keeps the pass key's ranking); the table, each length in OUT/t<T>/
# (prompts.jsonl, papa.jsonl, presses.jsonl, results.md: the committed t2048/), each prompt prefilled once for every
# press (shared_prefill.py); the timing pass at 8 192 (timing.sh: t8192/timing/); check_shared_prefill.py's
# comparison with real prefills under each press. Its time
# is in the README (most of it PAPA's side at 8 192, where each method prefills on its own). --quick: T = 512, 2 keys,
# ½ only, four presses, into OUT/t512/: a few minutes once kvpress's environment exists (making it: about 5 min).
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
here=findings/kvpress_side_by_side
venv="${KVPRESS_VENV:-outputs/kvpress_venv}"
sort=findings/long_context_retrieval/smollm2_t2048/sort_gates
export HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error
if [ "$quick" = 1 ]; then
  runs=("512 2"); ks="135"; ratios="0.5"; presses=(--presses StreamingLLM SnapKV random "DuoAttention (PAPA's ranking)")
else
  runs=("2048 20" "8192 10" "2048 20 passkey_multi" "2048 20 multikey"); ks="66 135 204"; ratios="0.25 0.5 0.75"
  presses=()
fi
mkdir -p "$out"
bash "$here/make_env.sh" "$venv"
python -m papa duo-export "$sort" --model_name_or_path smollm2 --sink_size 4 --recent_size 64 \
    --output_dir "$out/duo_pattern"
model="$(python -c 'from papa.models.bundled import local_model_path; print(local_model_path("smollm2"))')"
for run in "${runs[@]}"; do  # the pass key at each length into OUT/t<T>/ (as the committed t2048/), other tasks
  read -r length keys task <<< "$run"  # at ½ only, into OUT/t<T>_<task>/
  o="$out/t$length"; k="$ks"; r="$ratios"
  if [ -n "$task" ]; then o="$out/t${length}_$task"; k=135; r=0.5; fi
  mkdir -p "$o"
  [ -f "$o/prompts.jsonl" ] || python "$here/prompts.py" --task "${task:-passkey}" --lengths "$length" \
      --keys "$keys" --out "$o/prompts.jsonl"
  # shellcheck disable=SC2086
  [ -f "$o/papa.jsonl" ] || python "$here/papa_side.py" --prompts "$o/prompts.jsonl" \
      --sorted_heads "$sort/sorted_heads.json" --toeplitz findings/long_context_reach/t2048/toeplitz --ks $k \
      --window 64 --out "$o/papa.jsonl"
  # shellcheck disable=SC2086
  [ -f "$o/presses.jsonl" ] || "$venv/bin/python" "$here/press_side.py" --model "$model" \
      --prompts "$o/prompts.jsonl" --ratios $r "${presses[@]}" --duo_pattern "$out/duo_pattern" \
      --shared_prefill --out "$o/presses.jsonl"
  python "$here/table.py" --rows "$o/papa.jsonl" "$o/presses.jsonl" --out "$o/results.md"
done
# the timing pass: stock, PAPA's half and the four presses that drop tokens, each with its own prefill, interleaved by
# process (timing.sh; the committed t8192/timing/ ran on an otherwise idle machine)
if [ "$quick" = 1 ]; then timed=(512 1); else timed=(8192 3); fi
[ -f "$out/t${timed[0]}/timing/timing.md" ] || bash "$here/timing.sh" "$out/t${timed[0]}/prompts.jsonl" \
    "$out/t${timed[0]}/timing" "${timed[1]}" "$venv"
# the shared prefill's caches against real prefills under each press, on the first prompt (every press, ½)
"$venv/bin/python" "$here/check_shared_prefill.py" --model "$model" --prompts "$out/t${runs[0]%% *}/prompts.jsonl" \
    --count 1 --duo_pattern "$out/duo_pattern"
