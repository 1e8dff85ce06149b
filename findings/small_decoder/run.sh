#!/usr/bin/env bash
# Replays this finding's committed results from the repository root into a scratch folder (default
# outputs/findings/small_decoder), every input made there:
#   bash findings/small_decoder/run.sh [--quick] [OUT]
# Full: run 4 of benchmarks/train_decoder.py (4000 steps of 16 x 128 tokens on the shared text, copied spans of
# 16-48 tokens in every chunk, lr 3e-3: training_log.json and its heads check, heads_check.md), the lm text in the
# model's own format (100 sentences a line, joined by <|endoftext|>), then the lm sweep on that model with the three
# controls and λ's ranking (results.md, results.csv, results.png, lambdas.png, sorted_heads.json). About 37 minutes
# on 2 cores (the README: training 34 minutes, the sweep 2.3); the training is deterministic for its seed on one
# machine and thread count only. Runs 1-3 (the README's first table, no committed file) are replayed by their
# commands alone. --quick: 30 training steps of 4 chunks, the first 4 lines of each text, the sweep on 16 blocks
# with 8 held out at k = 0 and 6: about 1.5 minutes, the same scripts and stages (2.6 minutes measured on 2 cores
# shared with other jobs, load average 9-11).
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
export TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
if [ "$quick" = 1 ]; then steps=30; batch=4; every=10; minutes=5; lines=4; train=16; evals=8; ks="0 6"
else steps=4000; batch=16; every=250; minutes=45; lines=0; train=2000; evals=500; ks="0 3 6 9 12"; fi
mkdir -p "$out"
model="$out/decoder_small_long"

# 1. run 4: the tokenizer and the model, then the attention check it runs at its end (heads_check.md)
[ -f "$model/heads_check.md" ] || python benchmarks/train_decoder.py --data_dir "$data" --output_dir "$model" \
    --max_steps "$steps" --batch_size "$batch" --learning_rate 3e-3 --repeat_span_fraction 1 --repeat_span_min 16 \
    --repeat_span_max 48 --max_minutes "$minutes" --threads 1 --eval_every "$every"

# 2. the text in the model's own format: 100 sentences a line, each followed by eos (train: averages and ranking;
# dev: evaluation); --quick keeps the first 4 lines of each (about 60 blocks of 128 tokens)
[ -f "$out/lm_text_dev.txt" ] || python - "$data" "$out" "$lines" <<'PY'
import sys
sys.path.insert(0, "benchmarks")
from train_decoder import read_sentences, EOS
data, out, lines = sys.argv[1], sys.argv[2], int(sys.argv[3])
for split in ("train", "dev"):
    s = read_sentences(data, split)
    text = [EOS.join(s[i:i + 100]) + EOS for i in range(0, len(s), 100)]
    open(f"{out}/lm_text_{split}.txt", "w").write("\n".join(text[:lines] if lines else text) + "\n")
PY

# 3. the lm sweep with the controls; λ ranks the heads (the sweep's default for a decoder when it ran, taylor since)
# shellcheck disable=SC2086
python papa_scripts/run_papa_sweep.py --task_name lm --model_name_or_path "$model" \
    --train_file "$out/lm_text_train.txt" --validation_file "$out/lm_text_dev.txt" \
    --static_heads_nums $ks --controls uniform random_order mean_output --ranker lambda \
    --max_train_samples "$train" --max_eval_samples "$evals" --output_dir "$out/lm_sweep"

# the committed files' names, side by side in OUT
cp "$model/training_log.json" "$model/heads_check.md" "$out/"
cp "$out/lm_sweep/results.md" "$out/lm_sweep/results.csv" "$out/lm_sweep/results.png" "$out/lm_sweep/lambdas.png" \
    "$out/lm_sweep/sort/sorted_heads.json" "$out/"
echo "replayed into $out"
