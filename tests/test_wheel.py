"""The package outside the repository: a wheel built from it, installed into a fresh virtual environment,
runs the sweep's smallest configuration from a folder elsewhere, and gets the repository's results."""

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO, TINY_SWEEP, run_command

COMMANDS = ("papa-sweep", "papa-glue", "papa-glue-avgs", "papa-ner", "papa-ner-avgs", "papa-benchmark")


def site_folders():
    """The site-packages folders the interpreter running the tests imports from, in its order: a venv's, conda's,
    the system's (and the user's), wherever the README's setup installed torch & co."""
    return [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages") and os.path.isdir(p)]


def see_the_running_interpreters_packages(venv):
    """Put the running interpreter's site folders on `venv`'s path (a .pth file, after the venv's own): the
    wheel's dependencies come from wherever the tests' torch came from, offline. Their .pth files are not
    read, so this checkout's editable install of papa stays invisible; the venv's papa is the wheel's."""
    venv_python = venv / "bin" / "python"
    own = run_command([venv_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    (Path(own) / "running_interpreter.pth").write_text("".join(f"{folder}\n" for folder in site_folders()))


def test_site_folders_are_the_running_interpreters():
    """The folder torch was imported from is one of them, whether the tests run in a venv or not, and wherever that
    venv lies: the README's lies inside the checkout (.venv), CI's too."""
    assert os.path.dirname(os.path.dirname(torch.__file__)) in site_folders()


@pytest.mark.slow
def test_wheel_runs_the_sweep_outside_the_repository(tmp_path, tiny_sweep):
    # build from a copy: setuptools writes build/ and *.egg-info beside the sources
    sources = tmp_path / "sources"
    shutil.copytree(REPO / "src", sources / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(REPO / "setup.py", sources)
    # offline: this interpreter's setuptools builds it, no dependency is fetched (torch & co. are the running
    # interpreter's, see_the_running_interpreters_packages)
    # (a venv of Python 3.12+ has no setuptools: then pip fetches it into an isolated build, from the index)
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    run_command([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-w", tmp_path / "dist", sources])
    wheel, = (tmp_path / "dist").glob("*.whl")
    assert wheel.name.startswith("papa_attention-")
    venv = tmp_path / "venv"
    run_command([sys.executable, "-m", "venv", venv])
    see_the_running_interpreters_packages(venv)
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
