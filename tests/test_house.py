"""The repository kept in order: the flags reference is current, local links resolve, papa's imports
have no circle, no module is over 400 lines, benchmarks/ keeps one current result per benchmark (≤ 30 files, its
README ≤ 150 lines), `import papa` changes nothing in the process."""

import ast
import re
import subprocess
import sys

import pytest
from conftest import REPO, load_module

SRC = REPO / "src"
MAX_LINES = 400
MAX_BENCHMARK_FILES = 30  # one current result per benchmark; superseded ones go to docs/performance.md
MAX_BENCHMARK_README_LINES = 150


def test_flags_reference_is_current():
    make_flags = load_module(REPO / "docs" / "make_flags.py")
    current = (REPO / "docs" / "flags.md").read_text(encoding="utf-8")
    assert current == make_flags.flags_markdown(), f"docs/flags.md is out of date: run `{make_flags.REGENERATE}`"


@pytest.mark.slow
def test_flags_reference_lists_every_flag_of_every_command():
    """Checked against the commands' own --help, not against the generator's tables."""
    flags = (REPO / "docs" / "flags.md").read_text(encoding="utf-8")
    for script in ("run_papa_glue.py", "run_papa_glue_avgs_creator.py", "run_papa_sweep.py", "benchmark_papa.py"):
        shown = subprocess.run([sys.executable, str(REPO / "papa_scripts" / script), "--help"], capture_output=True,
                               text=True, check=True).stdout
        names = set(re.findall(r"^  (--\w+)", shown, flags=re.MULTILINE))  # each option's line of --help
        assert len(names) > 10, shown
        missing = sorted(name for name in names if f"`{name}`" not in flags)
        assert not missing, f"{script} --help shows flags docs/flags.md lacks: {missing}"


def test_links_of_readme_and_docs_resolve():
    check_links = load_module(REPO / ".ci" / "check_links.py")
    assert check_links.main([str(REPO)]) == 0  # the broken ones are printed on stderr


def test_link_checker_finds_what_is_broken(tmp_path):
    check_links = load_module(REPO / ".ci" / "check_links.py")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "flags.md").write_text("# Flags\n\n## The grid, in brief\n\n## The grid, in brief\n")
    (tmp_path / "README.md").write_text(
        "[ok](docs/flags.md) [ok](docs/flags.md#the-grid-in-brief-1) [ok](#readme) [web](https://example.org/x)\n"
        "# README\n"
        "[missing](docs/nope.md) ![figure](docs/grid/summary.png) [bad anchor](docs/flags.md#the-grid)\n"
        "`[in code](nope.md)`\n```\n[in a block](nope.md)\n```\n[ref]: docs/gone.md\n")
    assert [(n, target) for n, target, _ in check_links.broken_links(tmp_path / "README.md")] == [
        (3, "docs/nope.md"), (3, "docs/grid/summary.png"), (3, "docs/flags.md#the-grid"), (8, "docs/gone.md")]
    assert check_links.main([str(tmp_path)]) == 1


def module_names():
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def imports(name, path, known):
    """The papa modules `name` imports anywhere in it (also inside functions)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            target = ".".join(p for p in (base if node.level else "", node.module or "") if p)
            found |= {f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names}
    return {module for module in found if module in known and module != name}


def import_circles(graph):
    """Every circle a depth-first walk of `graph` ({module: imported modules}) meets, as [a, b, ..., a]."""
    state, path, circles = {}, [], []

    def visit(module):
        state[module] = "open"
        path.append(module)
        for imported in sorted(graph[module]):
            if state.get(imported) == "open":
                circles.append(path[path.index(imported):] + [imported])
            elif imported not in state:
                visit(imported)
        state[module] = "done"
        path.pop()

    for module in sorted(graph):
        if module not in state:
            visit(module)
    return circles


def test_no_import_circle():
    known = dict(module_names())
    graph = {name: imports(name, path, known) for name, path in known.items()}
    assert graph["papa.benchmark.run"] >= {"papa.benchmark.harness", "papa.fork_server"}  # the walk sees imports
    assert import_circles(graph) == []


def test_import_circles_are_found():
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


def test_no_module_over_400_lines():
    long = {str(path.relative_to(REPO)): n for path in [*SRC.rglob("*.py"), *(REPO / "tests").glob("*.py")]
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by concept): {long}"


def benchmark_files(folder):
    """Every file under `folder`, recursively, but Python's byte-code caches (written by running the scripts)."""
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*")
                  if path.is_file() and "__pycache__" not in path.relative_to(folder).parts)


def test_benchmarks_folder_holds_at_most_30_files():
    files = benchmark_files(REPO / "benchmarks")
    assert "README.md" in files and any(f.startswith("results") for f in files)  # it counts the right folder
    assert len(files) <= MAX_BENCHMARK_FILES, (
        f"benchmarks/ holds {len(files)} files (limit {MAX_BENCHMARK_FILES}): keep one current result per benchmark "
        f"and move what it supersedes to docs/performance.md: {files}")


def test_benchmark_files_are_counted_recursively_without_caches(tmp_path):
    for name in ("README.md", "results/a.md", "results/deep/b.json", "__pycache__/x.pyc", "results/__pycache__/y.pyc"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    assert benchmark_files(tmp_path) == ["README.md", "results/a.md", "results/deep/b.json"]


def test_benchmarks_readme_is_at_most_150_lines():
    n = len((REPO / "benchmarks" / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= MAX_BENCHMARK_README_LINES, (
        f"benchmarks/README.md has {n} lines (limit {MAX_BENCHMARK_README_LINES}): the current results only; what "
        f"earlier runs established goes to docs/performance.md")


@pytest.mark.parametrize("module", ["papa", "papa.cli.sweep", "papa.benchmark.run"])
def test_import_papa_changes_nothing_in_the_process(module):
    """Environment and umask as they were (huge pages are asked for where a command starts: test_hugepages)."""
    probe = ("import os; env = dict(os.environ); mask = os.umask(0o027); os.umask(mask)\n"
             f"import {module}\n"
             "assert dict(os.environ) == env, set(os.environ.items()) ^ set(env.items())\n"
             "assert os.umask(0o022) == mask\n")
    subprocess.run([sys.executable, "-c", probe], check=True)


def test_json_is_read_back_in_one_place():
    """papa.io.load_json is the one JSON reader (its errors say what to do); no module reads JSON files itself."""
    readers = [str(path.relative_to(SRC)) for path in SRC.rglob("*.py")
               if path.name != "io.py" and re.search(r"\bjson\.load\(", path.read_text())]
    assert not readers, f"read JSON through papa.io.load_json / load_json_object instead: {readers}"


def test_sentence_transformers_is_never_imported():
    """It comes in only as the bundled MiniLM package's declared dependency (requirements.txt says why); papa reads
    that package's model folder and imports nothing of sentence-transformers."""
    users = [str(path.relative_to(SRC)) for path in SRC.rglob("*.py")
             if re.search(r"^\s*(import|from)\s+sentence_transformers\b", path.read_text(), flags=re.M)]
    assert not users
    probe = ("import sys, papa, papa.models.bundled\n"
             "papa.default_model_path()\n"
             "assert not any(m.startswith('sentence_transformers') for m in sys.modules)\n")
    subprocess.run([sys.executable, "-c", probe], check=True)


def declared_extras():
    """The keys of setup.py's extras_require, read from its syntax tree (setup.py is not run)."""
    tree = ast.parse((REPO / "setup.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "extras_require":
            return [key.value for key in node.value.keys]
    raise AssertionError("setup.py has no extras_require")


def test_extras_are_declared_in_their_normalized_name_and_installed_as_declared():
    """setuptools writes an extra in its normalized name (PEP 685: lower case, runs of -_. as one -), and a pip
    that does not normalize what it is asked for (23.2, a fresh venv's) answers `.[lm_eval]` with a warning and
    installs nothing: so each extra is declared in that name, and every install command of README, docs/ and
    src/ names a declared extra exactly."""
    extras = declared_extras()
    assert extras and all(name == re.sub(r"[-_.]+", "-", name).lower() for name in extras), extras
    files = [REPO / "README.md", REPO / "setup.py", *(REPO / "docs").rglob("*.md"), *SRC.rglob("*.py")]
    asked = {(str(path.relative_to(REPO)), name) for path in files
             for name in re.findall(r"pip install [^`\n]*?(?:\.|papa-attention)\[([^\]]+)\]", path.read_text())}
    assert asked, "no install command of an extra found: the pattern is out of date"
    assert {(path, name) for path, name in asked if name not in extras} == set()
