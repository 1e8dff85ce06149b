"""Each findings folder replays from its script (findings/<folder>/run.sh) in its quick mode, from the repository root
into a scratch folder: the pipeline its README reports still runs, end to end, on the bundled models and the real data.

A quick replay takes one to fifteen minutes, so a run of the suite replays a sample of SAMPLE folders that changes
with the commit under test (every CI run is a new commit), drawn among the scripts that can run here; PAPA_REPLAY=all
replays every folder, PAPA_REPLAY=a,b the named ones. A script that needs a package the project does not install
names it in a `# requires: module ...` line and is skipped where that module is missing."""

import hashlib
import importlib.util
import os
import random
import re
import subprocess
from pathlib import Path

import pytest

from conftest import run_command

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(REPO.glob("findings/*/run.sh"))
SAMPLE = 2


def commit():
    """The commit under test (the date where git cannot tell), the same in every xdist worker."""
    proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    if proc.returncode == 0:
        return proc.stdout.strip()
    import datetime
    return datetime.date.today().isoformat()


def chosen(folders, setting, seed):
    """The folders to replay: every one for "all", the named ones for "a,b", else SAMPLE drawn by `seed`."""
    if setting == "all":
        return set(folders)
    if setting:
        named = set(setting.split(","))
        assert named <= set(folders), f"PAPA_REPLAY names no replay script: {sorted(named - set(folders))}"
        return named
    draw = random.Random(int(hashlib.sha256(seed.encode()).hexdigest(), 16))
    return set(draw.sample(sorted(folders), min(SAMPLE, len(folders))))


def required_modules(script):
    """The modules a script's `# requires:` lines name."""
    return [m for line in re.findall(r"^# requires:(.*)$", script.read_text(), flags=re.M) for m in line.split()]


def missing_modules(script):
    return [m for m in required_modules(script) if importlib.util.find_spec(m) is None]


RUNNABLE = [p.parent.name for p in SCRIPTS if not missing_modules(p)]


def test_every_findings_folder_has_a_replay_script():
    folders = {p.name for p in (REPO / "findings").iterdir() if p.is_dir()}
    assert folders - {p.parent.name for p in SCRIPTS} == set()


def test_the_sample_changes_with_the_commit_and_is_the_same_in_every_worker():
    folders = [f"f{i}" for i in range(20)]
    assert chosen(folders, "", "abc") == chosen(folders, "", "abc")
    assert len({frozenset(chosen(folders, "", str(seed))) for seed in range(10)}) > 5
    assert chosen(folders, "all", "abc") == set(folders) and chosen(folders, "f1,f2", "abc") == {"f1", "f2"}
    with pytest.raises(AssertionError, match="f99"):
        chosen(folders, "f99", "abc")


@pytest.mark.parametrize("args", [["--quik"], ["--quick", "a", "b"], ["out", "--quick"]])
def test_every_replay_script_refuses_bad_arguments_before_writing(args, tmp_path):
    for script in SCRIPTS:  # each parses [--quick] [OUT] with findings/replay_args.sh, before its first step
        proc = subprocess.run(["bash", str(script.relative_to(REPO)), *args], cwd=REPO, capture_output=True,
                              text=True, env={**os.environ, "DATA_DIR": str(tmp_path / "unused")}, timeout=60)
        assert proc.returncode == 2, (script, proc.stdout[-500:], proc.stderr[-500:])
        rest = " ".join(args[1:] if args[0] == "--quick" else args)  # what is left once --quick is read
        assert proc.stderr == f"error: bash findings/{script.parent.name}/run.sh takes [--quick] [OUT], not '{rest}'\n"


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.parent.name)
def test_a_findings_quick_replay_runs(script, tmp_path):
    missing = missing_modules(script)
    if missing:
        pytest.skip(f"the replay needs {', '.join(missing)}, not installed here")
    setting = os.environ.get("PAPA_REPLAY", "")
    if script.parent.name not in chosen(RUNNABLE if not setting else [p.parent.name for p in SCRIPTS], setting,
                                        commit()):
        pytest.skip("not in this run's sample of the replay scripts (PAPA_REPLAY=all replays every one)")
    out = tmp_path / script.parent.name
    proc = run_command(["bash", str(script.relative_to(REPO)), "--quick", str(out)], cwd=REPO, timeout=1200)
    tables = [p for p in out.rglob("*") if p.suffix in (".md", ".csv")]
    assert tables, f"the quick replay wrote no table under {out}:\n{proc.stdout[-2000:]}"
