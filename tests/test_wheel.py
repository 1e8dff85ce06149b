"""The package outside the repository: a wheel built from it, installed into a fresh virtual environment,
runs the sweep's smallest configuration from a folder elsewhere, and gets the repository's results."""

import shutil
import sys

import numpy as np
import pytest
import torch
from conftest import REPO, TINY_SWEEP, run_command

pytestmark = pytest.mark.slow

COMMANDS = ("papa-sweep", "papa-glue", "papa-glue-avgs", "papa-ner", "papa-ner-avgs", "papa-benchmark")


def test_wheel_runs_the_sweep_outside_the_repository(tmp_path, tiny_sweep):
    # build from a copy: setuptools writes build/ and *.egg-info beside the sources
    sources = tmp_path / "sources"
    shutil.copytree(REPO / "src", sources / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(REPO / "setup.py", sources)
    # offline: this interpreter's setuptools builds it, no dependency is fetched (torch & co. come from the system)
    run_command([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", tmp_path / "dist",
                 sources])
    wheel, = (tmp_path / "dist").glob("*.whl")
    assert wheel.name.startswith("papa_attention-")
    venv = tmp_path / "venv"
    run_command([sys.executable, "-m", "venv", "--system-site-packages", venv])
    run_command([venv / "bin" / "python", "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel])
    assert all((venv / "bin" / command).is_file() for command in COMMANDS)

    # from elsewhere, without this checkout on the path: the venv's papa, not the repository's src/
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    outside = {"PYTHONPATH": None}
    where = run_command([venv / "bin" / "python", "-c", "import papa.cli.sweep, papa; print(papa.__file__)"],
                        env=outside, cwd=elsewhere).stdout.strip()
    assert where.startswith(str(venv)), where

    out = tmp_path / "sweep"
    proc = run_command([venv / "bin" / "papa-sweep", "--output_dir", out, *TINY_SWEEP], env=outside, cwd=elsewhere)
    assert "[sweep] finished in" in proc.stdout and proc.stderr == ""
    assert (out / "results.csv").is_file()
    first_line = (out / "avgs" / "log.txt").read_text().splitlines()[0]
    assert first_line.startswith(f"$ {venv / 'bin' / 'python'} -m papa.cli.glue_avgs ")  # stages ran from the venv

    # the same run as from the repository: the same averages, ranking and results
    repo_out, _ = tiny_sweep
    assert torch.equal(torch.load(out / "avgs" / "avgs.pt"), torch.load(repo_out / "avgs" / "avgs.pt"))
    assert np.array_equal(np.load(out / "sort" / "lambdas.npy"), np.load(repo_out / "sort" / "lambdas.npy"))
    assert (out / "results.csv").read_text() == (repo_out / "results.csv").read_text()
