"""loo in parts (--ranker_parts): the sweep's part stages, merged, give the ranking one process gives, inline and
as Slurm jobs on the local cluster; a ranking job that Slurm requeues mid-way resumes its saved progress."""

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import OFFLINE, run_command, script
from lm_fixtures import save_tiny_lm, write_text
from test_launchers import slurm_cluster  # noqa: F401 -- the fixture

from papa.method.ranking_progress import PROGRESS_FILE
from papa.runs.ranking import layer_part

pytestmark = pytest.mark.slow


def test_layer_parts_keep_a_layers_units_together_and_cover_every_unit_once():
    from papa.method.scorers import make_units

    units = make_units(5, 4, 2)  # 5 layers x 2 K/V groups
    parts = [layer_part(units, p, 3) for p in (1, 2, 3)]
    assert [u for part in parts for u in part] == units
    assert [{u[0][0] for u in part} for part in parts] == [{0, 1}, {2, 3}, {4}]


@pytest.fixture(scope="module")
def lm_sweep(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lm")
    model = save_tiny_lm("llama", folder / "model")
    train, valid = write_text(folder / "train.txt", 60, 0), write_text(folder / "valid.txt", 12, 1)

    def argv(out, *more):
        return script("run_papa_sweep.py") + [
            "--task_name", "lm", "--model_name_or_path", model, "--train_file", train, "--validation_file", valid,
            "--max_seq_length", "32", "--static_heads_nums", "0", "6", "--ranker", "loo", "--bootstrap_samples", "50",
            "--per_device_train_batch_size", "2", "--output_dir", out, *more]

    reference = folder / "one_process"
    run_command(argv(reference))
    return argv, reference


def assert_same_ranking(run, reference):
    for name in ("sorted_heads.json", "head_scores.csv"):
        assert (run / "sort" / name).read_text() == (reference / "sort" / name).read_text()
    assert (run / "results.csv").read_text() == (reference / "results.csv").read_text()


def test_the_sweeps_loo_parts_merge_into_the_one_process_ranking(lm_sweep, tmp_path):
    argv, reference = lm_sweep
    out = tmp_path / "parts"
    proc = run_command(argv(out, "--ranker_parts", "2"))
    assert "ranking heads (loo: each head constant alone, part 2 of 2)" in proc.stdout
    assert all((out / f"sort_part_{p}" / "ranker_part.pt").is_file() for p in (1, 2))
    assert "merged loo's scores of 12 units from 2 parts" in (out / "sort" / "log.txt").read_text()
    assert_same_ranking(out, reference)


def test_loo_parts_as_slurm_jobs_merge_into_the_one_process_ranking(slurm_cluster, lm_sweep, tmp_path):  # noqa: F811
    argv, reference = lm_sweep
    out = tmp_path / "slurm_parts"
    run_command(argv(out, "--ranker_parts", "3", "--launcher", "slurm"))
    jobs = {json.loads((out / name / "stage.json").read_text())["job_id"] for name in
            ("sort_part_1", "sort_part_2", "sort_part_3", "sort")}
    assert len(jobs) == 4 and None not in jobs  # each part a Slurm job of its own
    assert_same_ranking(out, reference)


def test_a_ranking_job_requeued_by_slurm_resumes_its_progress(slurm_cluster, lm_sweep, tmp_path):  # noqa: F811
    """The ranking stage's job is requeued while it ranks (as a preemption does): the job runs the stage again, which
    resumes the progress the first run saved, and the ranking is the uninterrupted one's."""
    argv, reference = lm_sweep
    out = tmp_path / "requeued"
    env = {**os.environ, **OFFLINE, "PAPA_PROGRESS_EVERY_S": "0", "PAPA_PROGRESS_PAUSE_S": "4"}
    driver = subprocess.Popen([str(a) for a in argv(out, "--launcher", "slurm")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tracked = out / "slurm" / "jobs" / "sort.json"
    deadline = time.monotonic() + 600
    while not ((out / "sort" / PROGRESS_FILE).is_file() and tracked.is_file()):
        assert driver.poll() is None, driver.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "the ranking never saved its progress"
        time.sleep(0.1)
    job = json.loads(tracked.read_text())["job_id"]
    subprocess.run(["scontrol", "requeue", str(job)], check=True, capture_output=True)
    output, _ = driver.communicate(timeout=900)
    assert driver.returncode == 0, output[-3000:]
    assert "resuming the ranking" in (out / "sort" / "log.txt").read_text()
    assert_same_ranking(out, reference)
