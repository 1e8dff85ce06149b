#!/usr/bin/env bash
# Replays this finding from the repository root into a scratch folder (default outputs/findings/ranking_resume):
#   bash findings/ranking_resume/run.sh [--quick] [OUT]
# Full: SmolLM2's attention averaged over 16 blocks of QNLI's sentences (lm_qnli, T = 128); loo on 4 blocks (a batch
# each) and the gates (8 steps), each run uninterrupted, killed once half its work is saved, and run again (runs.md);
# then loo on 8 blocks in one batch of 8, killed once 15 of its 30 layers are saved (runs_one_batch.md). About 25
# minutes on 2 cores (loo's one batch about 6.5 minutes a run). --quick: T = 32, one block (loo: one batch of one),
# the gates 2 steps, the same kills and checks: about 2 minutes.
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
here=findings/ranking_resume
mkdir -p "$out"
if [ "$quick" = 1 ]; then
  python "$here/kill_and_resume.py" --work "$out/work" --data_dir "$data" --max_length 32 --average_blocks 2 \
      --blocks 1 --batch_size 1 --steps 2 --out "$out/runs.md"
else
  python "$here/kill_and_resume.py" --work "$out/work" --data_dir "$data" --out "$out/runs.md"
  python "$here/kill_and_resume.py" --work "$out/work_one_batch" --data_dir "$data" --blocks 8 --batch_size 8 \
      --rankers loo --out "$out/runs_one_batch.md"
fi
