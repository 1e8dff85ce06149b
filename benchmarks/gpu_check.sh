#!/usr/bin/env bash
# The prepared GPU check, one command on a machine with one CUDA GPU (budget: under 8 minutes):
#   1. the GPU-marked tests (pytest -m cuda): parity and precision on cuda, fp16/bf16, SDPA backends, the fork server;
#   2. the benchmark on cuda at T = 64 and 128, fp32 and bf16: the bundled MiniLM and a DeBERTa-base shape,
#      eager and compiled, writing benchmarks/<name>_cuda.{md,json}.
# Usage: bash benchmarks/gpu_check.sh [output folder, default benchmarks/]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-benchmarks}
mkdir -p "$out"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

python - <<'PY'
import torch
assert torch.cuda.is_available(), "error: no CUDA device: this check needs a GPU"
print("GPU:", torch.cuda.get_device_name(0), "| torch", torch.__version__, "| CUDA", torch.version.cuda)
PY

start=$SECONDS
python -m pytest -q -p no:xdist -m cuda tests/ 2>&1 | tee "$out/gpu_check_tests.log"
echo "[gpu_check] tests: $((SECONDS - start)) s"

bench() {  # name, then benchmark flags
  local name=$1; shift
  local t0=$SECONDS
  python -m papa.cli.benchmark --device cuda --seq_lens 64 128 --repeats 20 --processes 1 \
    --skip averaging training --json "$out/${name}_cuda.json" "$@"
  echo "[gpu_check] ${name}: $((SECONDS - t0)) s"
}
bench minilm_fp32
bench minilm_bf16 --dtype bf16
bench minilm_bf16_compiled --dtype bf16 --compile
bench deberta_base_fp32 --model_type deberta --batch_size 8 --repeats 10
bench deberta_base_bf16 --model_type deberta --batch_size 8 --repeats 10 --dtype bf16
echo "[gpu_check] total: $((SECONDS - start)) s; tables in $out/*_cuda.md"
