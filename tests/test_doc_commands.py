"""Every command the README, docs/ and findings/ show (in code blocks, and in code spans that start with one) names only
flags its program has: each program's flags are read from its own `--help`, the real argument parser's, so a
misspelt or removed flag in a page fails here. Programs: the scripts under papa_scripts/ (also as the original README
calls them, `python3 run_papa_glue.py`), `python -m papa[.cli.X]`, the `papa-*` commands, and the Python scripts of
the repository (findings/, benchmarks/, docs/) called by path."""

import os
import re
import shlex
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from conftest import OFFLINE

REPO = Path(__file__).resolve().parents[1]
SWEEPS = ("papa_scripts/run_papa_sweep.py", "papa-sweep", "papa sweep", "papa.cli.sweep")
STAGES = ("papa_scripts/run_papa_glue.py", "papa_scripts/run_papa_ner.py")  # the sweep hands its other flags to them
FENCE = re.compile(r"^\s*(```|~~~)")
SPAN = re.compile(r"`([^`]+)`")
FLAG = re.compile(r"(?<![\w-])(--[A-Za-z][\w-]*)")
SEPARATORS = re.compile(r";|&&|\|\||\|")


def pages(root=REPO):
    """The pages, and the findings' replay scripts (read as one code block)."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md")), *sorted((root / "findings").rglob("*.md")),
            *sorted((root / "findings").glob("*/run.sh"))]


def shown_commands(text):
    """[(line number, command text)]: each logical line of the page's code blocks (backslash continuations joined,
    shell separators split), and each code span that starts with a command."""
    found, block, fenced, pending, start = [], [], False, "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            stripped = line.split(" #", 1)[0].rstrip() if not line.lstrip().startswith("#") else ""
            if not pending:
                start = number
            if stripped.endswith("\\"):
                pending += stripped[:-1] + " "
                continue
            found.append((start, pending + stripped))
            pending = ""
        else:
            for span in SPAN.findall(line):
                if re.match(r"(python3? |papa-)", span):
                    found.append((number, span))
    commands = []
    for number, line in found:
        for part in SEPARATORS.split(line):
            part = re.sub(r"^\s*(do|then|else)\s+", "", part.strip())
            if part:
                commands.append((number, part))
    return commands


def program(words, root=REPO):
    """(a key naming the program, the argv prefix that runs it) for a command's words, or None when it runs none of
    this project's programs (an environment assignment first is skipped)."""
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        words = words[1:]
    if not words:
        return None
    if words[0].startswith("papa-"):
        command = console_command(words[0])
        return None if command is None else (words[0], [sys.executable, "-m", "papa", command], 1)
    if words[0] not in ("python", "python3") or len(words) < 2:
        return None
    if words[1] == "-m" and len(words) > 2 and re.fullmatch(r"papa(\.\w+)*", words[2]):  # not a placeholder
        if words[2] == "papa":
            return f"papa {words[3]}", [sys.executable, "-m", "papa", words[3]], 4
        return words[2], [sys.executable, "-m", words[2]], 3
    if words[1].endswith(".py"):
        path = root / words[1]
        if not path.is_file() and (root / "papa_scripts" / words[1]).is_file():
            path = root / "papa_scripts" / words[1]  # the original README's `python3 run_papa_glue.py`
        if path.is_file():
            return str(path.relative_to(root)), [sys.executable, str(path)], 2
    return None


def console_command(name):
    """`papa-X`'s `python -m papa` command, from setup.py's console scripts; None for another name (the distribution
    papa-attention)."""
    module = re.search(rf'"{re.escape(name)}=papa\.cli\.(\w+):main"', (REPO / "setup.py").read_text())
    if module is None:
        return None
    command = re.search(rf'"([\w-]+)": "{module.group(1)}"', (REPO / "src" / "papa" / "__main__.py").read_text())
    assert command, f"papa.cli.{module.group(1)} is not a `python -m papa` command"
    return command.group(1)


@lru_cache(maxsize=None)
def known_flags(argv):
    """The flags a program's own --help lists; None for a command of an optional extra that is not installed here
    (`papa-lm-eval` without lm_eval)."""
    proc = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, **OFFLINE})
    if proc.returncode != 0 and "is not installed" in proc.stderr:
        return None
    assert proc.returncode == 0, f"{' '.join(argv)} --help failed:\n{proc.stderr[-2000:]}"
    return frozenset(FLAG.findall(proc.stdout)) | {"--help"}


# lm-eval 0.4.13's command line is subcommands (run, ls, validate), and `lm-eval --model ...` inserts `run`
DEFAULT_SUBCOMMAND = {"papa-lm-eval": "run", "papa lm-eval": "run"}


def accepted_flags(key, argv):
    """What a program accepts: its --help's flags and the scripts' renamed ones (papa.runs.command_line); a sweep's,
    also its stages' (it passes the flags it does not know on to them)."""
    from papa.runs.command_line import RENAMED_FLAGS

    flags = known_flags(argv)
    if flags is None:
        return None
    if key in DEFAULT_SUBCOMMAND:  # its --help lists subcommands; a command without one runs this one
        flags |= known_flags((*argv, DEFAULT_SUBCOMMAND[key]))
    if key in SWEEPS:
        for stage in STAGES:
            flags |= known_flags((sys.executable, str(REPO / stage)))
    return flags | set(RENAMED_FLAGS)


def unknown_flags(page, root=REPO):
    """[(line, program, flag)] of the flags a page's commands give that their program does not have."""
    problems, text = [], page.read_text(encoding="utf-8")
    if page.suffix == ".sh":
        text = f"```bash\n{text}\n```"  # line numbers shift by one
    for number, command in shown_commands(text):
        try:
            words = shlex.split(command, comments=True)
        except ValueError:
            words = command.split()
        found = program(words, root)
        if found is None:
            continue
        key, argv, skip = found
        flags = accepted_flags(key, tuple(argv))
        for word in words[skip:] if flags is not None else ():
            flag = word.split("=", 1)[0]
            if FLAG.fullmatch(flag) and flag not in flags:
                problems.append((number - (page.suffix == ".sh"), key, flag))
    return problems


def test_the_checker_finds_a_misspelt_flag_and_reads_what_a_page_shows(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Run `papa-duo-export SORT --model_name_or_path m --ouptut_dir x` first.\n\n```bash\n"
                    "# a comment --not_a_flag\nfor k in 0 1; do python papa_scripts/run_papa_glue.py --task_name \\\n"
                    "    cola --do_eval --static_heads_numb $k; done   # --nor_this\nls --all\n```\n")
    commands = shown_commands(page.read_text())
    assert [n for n, _ in commands] == [1, 5, 5, 5, 7]  # the for loop's three parts
    assert unknown_flags(page) == [(1, "papa-duo-export", "--ouptut_dir"),
                                   (5, "papa_scripts/run_papa_glue.py", "--static_heads_numb")]


def test_a_replay_script_is_read_as_code(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text('set -e\n[ -f x ] || python papa_scripts/run_papa_glue.py "${common[@]}" \\\n'
                      '    --do_eval --max_eval_sample 2\n')
    assert unknown_flags(script) == [(2, "papa_scripts/run_papa_glue.py", "--max_eval_sample")]


@pytest.mark.slow
def test_every_shown_command_names_flags_its_program_has():
    problems = [f"{page.relative_to(REPO)}:{line}: {key} has no {flag}"
                for page in pages() for line, key, flag in unknown_flags(page)]
    assert not problems, "\n".join(problems)
