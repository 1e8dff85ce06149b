#!/usr/bin/env bash
# kvpress's environment for press_side.py, beside the project's (kvpress 0.5.5 pins transformers < 5.3):
#   bash findings/kvpress_side_by_side/make_env.sh [VENV]   (default outputs/kvpress_venv; about 5 minutes)
set -euo pipefail
venv="${1:-outputs/kvpress_venv}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import kvpress" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r findings/kvpress_side_by_side/requirements.txt
fi
"$venv/bin/python" -c "import kvpress, transformers; print('kvpress ready; transformers', transformers.__version__)"
