"""Each findings folder with a replay script (findings/<folder>/run.sh) replays in its quick mode from the repository
root into a scratch folder: the pipeline its README reports still runs, end to end, on the bundled models."""

from pathlib import Path

import pytest

from conftest import run_command

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(REPO.glob("findings/*/run.sh"))


def test_the_replay_scripts_are_found():
    assert {p.parent.name for p in SCRIPTS} >= {"long_context_reach", "long_context_retrieval"}


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.parent.name)
def test_a_findings_quick_replay_runs(script, tmp_path):
    out = tmp_path / script.parent.name
    proc = run_command(["bash", str(script.relative_to(REPO)), "--quick", str(out)], cwd=REPO, timeout=1200)
    written = [p for p in out.rglob("*.md")]
    assert written, proc.stdout[-2000:]
    assert any(p.name == "eval_predictions.jsonl" for p in out.rglob("*")), "no evaluation ran"
