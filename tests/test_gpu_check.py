"""The prepared GPU check (benchmarks/gpu_check.sh) runs end to end: its --dry-run takes the same steps on this CPU at
toy sizes (no compile), so the plumbing (its flags, paths and outputs) is checked here, where no GPU is."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TABLES = ["minilm_fp32", "minilm_bf16", "deberta_base_fp32", "deberta_base_bf16", "minilm_bf16_compiled"]


@pytest.mark.slow
def test_gpu_check_dry_run(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--dry-run", str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    log = (tmp_path / "gpu_check_tests.log").read_text()
    assert "skipped" in log and "failed" not in log  # the cuda tests collected and skipped (no GPU), none broken
    for name in TABLES:
        results = json.loads((tmp_path / f"{name}_cuda.json").read_text())
        rows = results["inference"]
        assert [r["variant"] for r in rows] == ["stock", "PAPA, 0 constant", "PAPA, all constant"], name
        assert (tmp_path / f"{name}_cuda.md").exists()
    minilm = json.loads((tmp_path / "minilm_bf16_cuda.json").read_text())["settings"]
    assert minilm["model"] == "benchmarks/minilm_config (its config, random weights)"
    assert (minilm["layers"], minilm["heads"], minilm["hidden_size"]) == (6, 12, 384)  # MiniLM's shape
    assert "[gpu_check] total" in done.stdout
