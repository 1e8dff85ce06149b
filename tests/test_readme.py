"""The README's commands run as written: the three commands are CI's (.ci/run runs that block line by line), the
SmolLM2 quick start runs here and gives the README's numbers, the Python example runs, and it says what it has to
say once."""

import os
import re
import shlex
import sys

import pytest
from conftest import REPO, SHARED_DATA, run_command

README = REPO / "README.md"


def bash_blocks():
    return re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)


def python_example():
    section = README.read_text().split("## Your own model", 1)[1]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


def test_every_shell_command_of_the_readme_is_run():
    """Two blocks: the three commands, which .ci/run reads out of the README and runs line by line, and the SmolLM2
    quick start, run below."""
    three, quick_start = bash_blocks()
    ci = (REPO / ".ci" / "run").read_text()
    assert '## Three commands\\n.*?```bash\\n(.*?)```' in ci and 'step "${steps[3]}"' in ci
    assert [line.split("#")[0].strip() for line in three.strip().splitlines()] == [
        "python3 -m venv .venv && . .venv/bin/activate", "pip install -r requirements.txt",
        "python papa_scripts/run_papa_sweep.py", "HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 python -m pytest -q"]
    assert quick_start.startswith("python papa_scripts/run_papa_sweep.py --model_name_or_path smollm2")


@pytest.mark.slow
def test_the_smollm2_quick_start_gives_the_readmes_numbers(tmp_path):
    """As a user runs it from the repository (here a copy of its layout: papa_scripts/ and ../shared/data), into its
    default folder; its half row is the README's and the finding's."""
    from papa.errors import PapaError
    from papa.models.bundled import local_model_path

    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data folder {SHARED_DATA} is absent")
    try:
        local_model_path("smollm2")
    except PapaError as err:
        pytest.skip(f"the bundled SmolLM2 cannot be had here: {err}")
    (tmp_path / "repo").mkdir()
    os.symlink(REPO / "papa_scripts", tmp_path / "repo" / "papa_scripts")
    os.symlink(SHARED_DATA.parent, tmp_path / "shared")
    argv = shlex.split(bash_blocks()[1].replace("\\\n", " "))
    assert argv[0] == "python"
    run_command([sys.executable, *argv[1:]], cwd=tmp_path / "repo", timeout=1800)
    results = (tmp_path / "repo" / "outputs" / "papa_sweep_lm_mrpc" / "results.md").read_text()
    half = next(line for line in results.splitlines() if line.startswith("| 135 |"))
    assert half == "| 135 | 0.500 | 69.3791 | -39.8% [-44.0, -36.1]* |"
    assert "from 49.64 to 69.38 (−39.8% [−44.0, −36.1])" in " ".join(README.read_text().split())
    assert half in (REPO / "findings" / "smollm2_quickstart" / "results.md").read_text()


def test_python_api_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(python_example(), "README.md", "exec"), {})
    assert (tmp_path / "my_papa_model" / "model.safetensors").exists()


def test_python_api_example_gives_one_load_report(tmp_path):
    """Run as a user runs it, output to a pipe: transformers' load report (the classifier MiniLM lacks) once."""
    proc = run_command([sys.executable, "-c", python_example()], cwd=tmp_path)
    assert (proc.stdout + proc.stderr).count("LOAD REPORT") == 1, proc.stderr[-3000:]
    assert "\x1b[" not in proc.stdout + proc.stderr, "colour codes in redirected output"
    assert "Loading weights" not in proc.stderr, "a progress bar in redirected output"
