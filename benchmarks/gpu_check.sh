#!/usr/bin/env bash
# The prepared GPU check, one command on a machine with one CUDA GPU (budget: under 8 minutes):
#   1. the GPU-marked tests (tests/test_cuda.py, tests/test_fork_server_cuda.py): parity and precision on cuda,
#      fp16/bf16, SDPA backends, the fork server's CUDA state;
#   2. the benchmark on cuda at T = 64 and 128, fp32 and bf16: MiniLM's shape (its config, random weights: the
#      checkpoint's 88 MB do not travel) and a DeBERTa-base shape, eager and compiled, writing
#      <folder>/<name>_cuda.{md,json}.
# Usage: bash benchmarks/gpu_check.sh [output folder, default benchmarks/results/]
#        bash benchmarks/gpu_check.sh --dry-run FOLDER   the same steps on this CPU at toy sizes, no compile
#                                                        (tests/test_gpu_check.py): the plumbing, not the numbers
#        bash benchmarks/gpu_check.sh --wheels           fill .whl/ (below), where pip reaches a package registry
# On a machine whose image lacks this project's pure-Python dependencies (the lent GPU machine's does), first run
# `bash benchmarks/gpu_check.sh --wheels` where pip works and carry the .whl/ folder it fills: they are installed
# into /tmp/site here. The project itself runs from src/ (no install needed).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--wheels" ]; then
  # the pure-Python wheels the GPU machine's image lacks, or holds at other versions (its transformers is older), at
  # this project's versions, for Python 3.12 there; torch and the compiled packages are the image's own
  python=${PYTHON:-python3}
  rm -rf .whl && mkdir .whl
  # the direct dependencies at requirements.txt's pins; datasets' own two at the versions installed here
  pins=($(grep -E '^(transformers|datasets|submitit)==' requirements.txt)
        $($python -c "import importlib.metadata as m; print(*(f'{p}=={m.version(p)}' for p in ('dill', 'multiprocess')))"))
  $python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "${pins[@]}"
  $python -m pip wheel -q --no-deps -w .whl "$(grep -E '^seqeval==' requirements.txt)"  # an sdist only, pure Python
  ls .whl && du -sh .whl
  exit 0
fi
dry_run=0
if [ "${1:-}" = "--dry-run" ]; then dry_run=1; shift; fi
out=${1:-benchmarks/results}
mkdir -p "$out"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
python=${PYTHON:-python3}  # the GPU machine's python3 is the one with CUDA torch
if [ $dry_run = 0 ] && ls .whl/*.whl >/dev/null 2>&1; then  # the GPU machine's wheels (Python 3.12), there only
  $python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}

if [ $dry_run = 1 ]; then
  device=cpu
  sizes=(--batch_size 2 --seq_lens 16 --repeats 1 --warmup 0 --variants "0 constant" "all constant")
  deberta_sizes=()
  compiled=()  # compiling takes minutes on a CPU (tests/test_compile.py covers it): timed eager instead
else
  device=cuda
  sizes=(--seq_lens 64 128 --repeats 20)
  deberta_sizes=(--batch_size 8 --repeats 10)
  # last, as it takes longest: four graphs at T = 128
  compiled=(--compile --seq_lens 128 --variants "1/2 constant" "1/2 constant, every other head" "all constant")
  $python - <<'PY'
import torch, transformers
assert torch.cuda.is_available(), "error: no CUDA device: this check needs a GPU"
print("GPU:", torch.cuda.get_device_name(0), "| torch", torch.__version__, "| CUDA", torch.version.cuda,
      "| transformers", transformers.__version__)
PY
fi

start=$SECONDS
tests_status=0
: >"$out/gpu_check_tests.log"
for file in tests/test_cuda.py tests/test_fork_server_cuda.py; do  # apart: one file's import error spares the other
  set +e
  $python -m pytest -q -n 0 -m cuda "$file" 2>&1 | tee -a "$out/gpu_check_tests.log"
  status=${PIPESTATUS[0]}
  set -e
  if [ "$status" != 0 ]; then tests_status=$status; fi
done
echo "[gpu_check] tests: exit $tests_status, $((SECONDS - start)) s"

bench() {  # name, then benchmark flags; a failing benchmark stops the check, the tables written so far stay
  local name=$1; shift
  local t0=$SECONDS
  $python -m papa.cli.benchmark --device $device --processes 1 --skip averaging training "${sizes[@]}" \
    --json "$out/${name}_cuda.json" "$@"
  echo "[gpu_check] ${name}: $((SECONDS - t0)) s"
}
minilm=(--model_name_or_path benchmarks/minilm_config --random_weights)
bench minilm_fp32 "${minilm[@]}"
bench minilm_bf16 "${minilm[@]}" --dtype bf16
bench deberta_base_fp32 --model_type deberta "${deberta_sizes[@]}"
bench deberta_base_bf16 --model_type deberta "${deberta_sizes[@]}" --dtype bf16
bench minilm_bf16_compiled "${minilm[@]}" --dtype bf16 "${compiled[@]}"
echo "[gpu_check] total: $((SECONDS - start)) s; tables in $out/*_cuda.md; tests exit $tests_status"
exit "$tests_status"
