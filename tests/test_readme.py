"""The README's Python example runs as written."""

import re

from conftest import REPO

README = REPO / "README.md"


def test_python_api_example_runs(tmp_path, monkeypatch):
    section = README.read_text().split("## Python API", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    assert (tmp_path / "my_papa_model" / "model.safetensors").exists()
