#!/usr/bin/env bash
# Fill .whl/ (git-ignored) with the pure-Python wheels the lent GPU machine's image lacks, or holds at other versions
# (its transformers is older), at this project's versions, for benchmarks/gpu_check.sh there: carry [".whl"].
# Run where pip reaches a package registry; torch and the compiled packages are the image's own.
set -euo pipefail
cd "$(dirname "$0")/.."
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
