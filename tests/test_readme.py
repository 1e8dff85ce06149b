"""The README's Python example runs as written, and says what it has to say once."""

import re
import sys

from conftest import REPO, run_command

README = REPO / "README.md"


def python_example():
    section = README.read_text().split("## Python API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


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
