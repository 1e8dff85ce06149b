#!/usr/bin/env bash
# Replays this finding from the repository root into a scratch folder (default
# outputs/findings/long_context_generation):
#   bash findings/long_context_generation/run.sh [--quick] [OUT]
# Full: generation.py's report, generation.md: SmolLM2-135M decoding 32 greedy tokens after a 2 016-token prompt,
# stock against sink_window constants (s = 4, w = 64) on K/V groups 1 and 2, 11 interleaved rounds, one torch
# thread. The cache bytes are exact and reproduce; the tokens/s are this machine's timings and will differ. About
# 3 minutes on 2 cores (estimated from generation.md's 5.3 tokens/s; the README states no time). --quick: a 256-token
# context, 8 new tokens, 2 rounds, the same script and report: 1 min 39 s at load 11-12 here, niced (11 s of CPU).
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
here=findings/long_context_generation
if [ "$quick" = 1 ]; then context=256; new=8; rounds=2; else context=2048; new=32; rounds=11; fi
mkdir -p "$out"

[ -f "$out/generation.md" ] || python "$here/generation.py" --context "$context" --new_tokens "$new" --groups 1,2 \
    --sinks 4 --window 64 --rounds "$rounds" --threads 1 --data "$data" --out "$out/generation.md"
echo "replayed into $out"
