"""--launcher {inline,local,slurm} (papa.sweep.launchers): the stages' dependencies, the driver-side scheduler,
bad input, and end to end: local stages side by side, every stage a job of a real single-node Slurm cluster
(.ci/slurm_up.sh), a killed driver resumed, a failing stage reported, and results equal to an inline run's.

The end-to-end runs use a tiny random BERT (3 layers x 4 heads) on the repeat task with a tiny budget.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime

import pytest
from cli_fixtures import tiny_bert  # noqa: F401 -- a fixture
from conftest import REPO, run_command, script

from papa.sweep.arguments import parse_sweep_args
from papa.errors import PapaError
from papa.sweep import run_grid
from papa.sweep.launchers import schedule
from papa.sweep.launchers.schedule import dependencies, run_scheduled, sweep_tasks
from papa.sweep.run import prepare_sweep
from papa.sweep.stages import StageRun
from papa.data.tasks import get_task

SWEEP = ["--max_train_samples", "32", "--max_eval_samples", "16", "--num_train_epochs", "1",
         "--sort_num_train_epochs", "1", "--static_heads_nums", "0", "12", "--max_seq_length", "16",
         "--per_device_eval_batch_size", "16"]
STAGES = ("avgs", "sort", "k_0", "k_12")

# ----------------------------------------------------------------------------- dependencies and the scheduler


def prepared_stages(tmp_path, *argv):
    args, passthrough = parse_sweep_args(["--output_dir", str(tmp_path / "out"), *argv])
    return prepare_sweep(args, get_task("repeat"), passthrough).stages


def test_dependencies_come_from_the_stages_inputs(tmp_path):
    stages = prepared_stages(tmp_path, "--static_heads_nums", "0", "72", "--controls", "uniform", "random_order",
                             "mean_output")
    # by hand, from what each stage reads: k=0 needs no ranking, the uniform control's matrices are the sweep's own
    # file (no stage's), random order at k=72 is PAPA's k_72 run
    assert dependencies(stages) == {"avgs": [], "sort": ["avgs"], "k_0": ["avgs"], "k_72": ["avgs", "sort"],
                                    "uniform_k_72": ["sort"], "mean_k_72": ["avgs", "sort"]}
    stages[2].after = ["k_72"]  # an explicit `after` counts too
    assert dependencies(stages)["k_0"] == ["k_72", "avgs"]
    stages[3].folder = stages[2].folder
    with pytest.raises(PapaError, match="would both write"):
        dependencies(stages)


class FakeLauncher:
    """Finishes each started stage after two polls; `failing` stages fail. Records what ran when."""

    def __init__(self, limit, failing=()):
        self.limit, self.failing, self.running, self.events, self.polls = limit, failing, 0, [], {}

    def has_room(self):
        return self.running < self.limit

    def start(self, task, reason):
        self.running += 1
        self.events.append(("start", task.sweep, task.stage.name))
        return task.stage.name

    def poll(self, task):
        self.polls[task] = self.polls.get(task, 0) + 1
        if self.polls[task] < 2:
            return None
        self.running -= 1
        self.events.append(("end", task.sweep, task.stage.name))
        if task.stage.name in self.failing and task.sweep == "b":
            return StageRun(1, ["error: boom"], 1.0, "log.txt", []), "Slurm job 7: FAILED"
        return StageRun(0, [], 1.0, "log.txt", []), None

    def wait(self, seconds):
        pass


def test_the_scheduler_keeps_dependencies_and_the_limit_and_stops_only_a_failed_sweep(tmp_path, capsys):
    a = prepared_stages(tmp_path / "a", "--static_heads_nums", "0", "36", "72")
    b = prepared_stages(tmp_path / "b", "--static_heads_nums", "0", "36", "72")
    tasks = sweep_tasks("a", a, str(tmp_path / "a" / "out"), {}) + sweep_tasks("b", b, str(tmp_path / "b" / "out"), {})
    launcher = FakeLauncher(limit=4, failing=("sort",))
    errors = run_scheduled(tasks, launcher)
    assert list(errors) == ["b"] and "ranking heads" in errors["b"] and "boom" in errors["b"]
    assert "Slurm job 7: FAILED" in errors["b"]
    needs = {"avgs": [], "sort": ["avgs"], "k_0": ["avgs"], "k_36": ["avgs", "sort"], "k_72": ["avgs", "sort"]}
    ended, running, most = set(), 0, 0
    for event, sweep, name in launcher.events:
        if event == "start":
            assert all((sweep, need) in ended for need in needs[name]), (sweep, name, launcher.events)
            running += 1
            most = max(most, running)
        else:
            ended.add((sweep, name))
            running -= 1
    assert most == 4  # the limit, reached
    started = {(sweep, name) for event, sweep, name in launcher.events if event == "start"}
    assert {name for sweep, name in started if sweep == "a"} == set(needs)  # the other sweep went on
    assert {name for sweep, name in started if sweep == "b"} == {"avgs", "sort", "k_0"}  # not after its failure
    out = capsys.readouterr().out
    assert "[sweep] b: 4/5 probing with k=36 constant heads of 72 (2 epochs): not run" in out
    assert "[sweep] b: 2/5 ranking heads (λ mixing run, 1 epoch): failed after 1s (Slurm job 7: FAILED)" in out


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("argv, message", [
    (["--launcher", "nope"], "invalid choice: 'nope'"),
    (["--slurm_partition", "gpu"], "--slurm_partition only applies to --launcher slurm"),
    (["--launcher", "local", "--slurm_time_min", "5", "--slurm_mem_gb", "4"],
     "--slurm_time_min --slurm_mem_gb only apply to --launcher slurm"),
    (["--max_parallel", "2"], "--max_parallel only applies to --launcher local"),
    (["--launcher", "local", "--max_parallel", "0"], "--max_parallel must be at least 1"),
    (["--launcher", "local", "--nproc_per_node", "0"], "--nproc_per_node must be at least 1"),
    (["--nproc_per_node", "2"], "use it with --launcher local or slurm"),
    (["--launcher", "slurm", "--slurm_additional_parameters", "{account: x}"], "is not JSON"),
    (["--launcher", "slurm", "--slurm_additional_parameters", "[1]"], "must be a JSON object"),
])
def test_bad_launcher_input_stops_before_anything_runs(tmp_path, argv, message):
    out = tmp_path / "out"
    for tasks in (["repeat"], ["repeat", "cola"]):  # a plain sweep and a grid
        with pytest.raises(PapaError, match=message):
            run_grid(*parse_sweep_args(["--output_dir", str(out), "--task_name", *tasks, *argv]))
        assert not out.exists()


def test_slurm_without_sbatch_is_one_clear_error(tmp_path):
    empty = tmp_path / "bin"  # a PATH with nothing on it: no sbatch. The interpreter is this one, by its own path:
    empty.mkdir()  # a venv's python reached through a link elsewhere loses its pyvenv.cfg and runs as the base one
    proc = run_command(script("run_papa_sweep.py") + ["--output_dir", tmp_path / "out", "--launcher", "slurm"],
                       check=False, env={"PATH": str(empty)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("error: --launcher slurm: `sbatch` is not on PATH (this is not a Slurm login "
                                   "node); run the sweep where Slurm is, or use --launcher local")
    assert not (tmp_path / "out").exists()


def test_a_job_slurm_refuses_is_one_clear_error(slurm_cluster, tiny_bert, tmp_path):  # noqa: F811
    """sbatch refusing the first stage's job (a partition this cluster lacks) is a clear message, not submitit's
    traceback."""
    proc = run_command(script("run_papa_sweep.py") + ["--output_dir", tmp_path / "out", "--model_name_or_path",
                                                      tiny_bert, *SWEEP, "--launcher", "slurm", "--slurm_partition",
                                                      "no_such_partition"], check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert re.search(r"error: Slurm refused the job \(.*partition.*\); check --slurm_partition", proc.stderr)


# ----------------------------------------------------------------------------- end to end


def stamp(folder):
    return json.loads((folder / "stage.json").read_text())


def when(stamp_, key):
    return datetime.fromisoformat(stamp_[key])


@pytest.fixture(scope="module")
def inline_run(tiny_bert, tmp_path_factory):  # noqa: F811 -- the fixture
    """The reference: the tiny sweep, inline."""
    out = tmp_path_factory.mktemp("inline") / "out"
    run_command(script("run_papa_sweep.py") + ["--output_dir", out, "--model_name_or_path", tiny_bert, *SWEEP])
    return out


def assert_same_results(run, reference):
    """Same averages (bytes), same ranking, same metrics (results.csv) as the reference run."""
    assert (run / "avgs" / "avgs.pt").read_bytes() == (reference / "avgs" / "avgs.pt").read_bytes()
    assert (run / "sort" / "sorted_heads.json").read_text() == (reference / "sort" / "sorted_heads.json").read_text()
    assert (run / "results.csv").read_text() == (reference / "results.csv").read_text()


@pytest.mark.slow
def test_local_stages_run_side_by_side_in_dependency_order(inline_run, tiny_bert, tmp_path):  # noqa: F811
    out = tmp_path / "out"
    proc = run_command(script("run_papa_sweep.py") + ["--output_dir", out, "--model_name_or_path", tiny_bert, *SWEEP,
                                                      "--launcher", "local", "--max_parallel", "2"])
    assert "[sweep] launcher local: up to 2 stages at once, 1 CPU thread(s) each" in proc.stdout
    stamps = {name: stamp(out / name) for name in STAGES}
    assert {(s["launcher"], s["job_id"]) for s in stamps.values()} == {("local", None)}
    # dependencies: the ranking and k=0 after the averages, k=12 after the ranking
    for name, needs in (("sort", "avgs"), ("k_0", "avgs"), ("k_12", "sort")):
        assert when(stamps[name], "started") >= when(stamps[needs], "finished"), (name, needs)
    # side by side: the ranking and k=0 become ready together
    assert when(stamps["k_0"], "started") < when(stamps["sort"], "finished")
    assert when(stamps["sort"], "started") < when(stamps["k_0"], "finished")
    assert_same_results(out, inline_run)


def slurm_up():
    """Bring the single-node cluster up (.ci/slurm_up.sh, idempotent); the reason when it cannot be, else None."""
    if os.geteuid() != 0 and shutil.which("sinfo") is None:
        return "Slurm is not installed and .ci/slurm_up.sh needs root to install it"
    proc = subprocess.run([str(REPO / ".ci" / "slurm_up.sh")], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return f"no Slurm cluster: .ci/slurm_up.sh failed: {(proc.stderr or proc.stdout).strip()[-300:]}"
    return None


@pytest.fixture(scope="module")
def slurm_cluster():
    reason = slurm_up()
    if reason:
        pytest.skip(reason)


def wait_for(path, proc, seconds=120):
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.2)


def rerun_waiting_for(argv, env, queued, stderr_path, seconds=600):
    """The same command again: once it says it waits for each of the `queued` (held) jobs instead of submitting them
    anew, release them; its CompletedProcess when it ends."""
    with open(stderr_path, "w+") as stderr:
        proc = subprocess.Popen([str(a) for a in argv], env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)
        lines, waiting = [], set()
        for line in proc.stdout:
            lines.append(line)
            for task, job_id in queued.items():
                if re.search(f"x {task}: 1/4 averaging attention over the {task} training set \\(T=16\\): already "
                             f"pending as Slurm job {job_id} \\(submitted earlier\\), waiting for it", line):
                    waiting.add(task)
                    subprocess.run(["scontrol", "release", str(job_id)], check=True, capture_output=True)
        proc.wait(timeout=seconds)
        assert waiting == set(queued), "".join(lines)
        stderr.seek(0)
        return subprocess.CompletedProcess(argv, proc.returncode, "".join(lines), stderr.read())


@pytest.mark.slow
def test_slurm_grid_every_stage_a_job_resumed_after_a_killed_driver(slurm_cluster, inline_run, tiny_bert, tmp_path):  # noqa: F811
    """A grid (repeat, and CoLA with a broken train.tsv) whose driver is killed once its first jobs are queued; the
    same command again waits for those jobs instead of submitting them twice, runs the rest, reports the failure."""
    out, data = tmp_path / "out", tmp_path / "data"
    (data / "CoLA").mkdir(parents=True)
    (data / "CoLA" / "train.tsv").write_text("not\ta CoLA line\n")
    argv = script("run_papa_sweep.py") + ["--output_dir", out, "--model_name_or_path", tiny_bert, "--task_name",
                                          "repeat", "cola", "--data_dir", data, *SWEEP, "--launcher", "slurm"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    # the first driver's jobs are held (pending until released): still queued when it is killed, however slow
    # the machine is
    first = subprocess.Popen([str(a) for a in argv] + ["--slurm_additional_parameters", '{"hold": true}'],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    jobs = out / "slurm" / "jobs"
    tracked = {task: jobs / f"{os.path.basename(tiny_bert)}__{task}__avgs.json" for task in ("repeat", "cola")}
    queued = {}
    try:
        for path in tracked.values():
            wait_for(path, first)
        first.send_signal(signal.SIGKILL)
        first.communicate()
        queued = {task: json.loads(path.read_text())["job_id"] for task, path in tracked.items()}
        proc = rerun_waiting_for(argv, env, queued, tmp_path / "second.err")
    finally:
        for job_id in queued.values():  # never leave a held job in the queue
            subprocess.run(["scancel", str(job_id)], capture_output=True)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    model = os.path.basename(tiny_bert)
    assert "averaging attention over the repeat training set (T=16): queued as" not in proc.stdout
    # every stage of the repeat pair ran as a Slurm job of its own, the averages as the one the killed driver queued
    pair = out / model / "repeat"
    stamps = {name: stamp(pair / name) for name in STAGES}
    assert {s["launcher"] for s in stamps.values()} == {"slurm"}
    assert stamps["avgs"]["job_id"] == str(queued["repeat"])
    assert len({s["job_id"] for s in stamps.values()}) == 4
    assert_same_results(pair, inline_run)
    # the failing pair: its Slurm state and log named, its later stages not run, the grid's summary says so
    assert "failed (Slurm job " in proc.stdout and ": FAILED; submitit's log: " in proc.stdout
    assert "x cola: 2/4 ranking heads (λ mixing run, 1 epoch): not run" in proc.stdout
    assert "train.tsv:1: expected 4 tab-separated fields, found 2" in proc.stderr
    assert str(out / model / "cola" / "avgs" / "log.txt") in proc.stderr
    assert proc.stderr.rstrip().splitlines()[-1].startswith(f"error: 1 of 2 sweeps failed ({model} x cola)")
    summary = (out / "summary.csv").read_text()
    assert "cola" in summary and "failed" in summary


def test_local_stages_get_their_own_gpus_or_their_share_of_the_cores(monkeypatch, capsys):
    from papa.sweep.launchers.local import LocalLauncher

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,2,3")
    launcher = LocalLauncher(4)  # one GPU each by default: three stages at once, not four
    assert launcher.max_parallel == 3 and launcher.stage_env({}, ["2"])["CUDA_VISIBLE_DEVICES"] == "2"
    launcher = LocalLauncher(4, gpus_per_stage=2)
    assert launcher.max_parallel == 1 and launcher.free_gpus == ["0", "2", "3"]
    assert "up to 1 stage at once, 2 GPU(s) each" in capsys.readouterr().out
    with pytest.raises(PapaError, match="--gpus_per_stage 4: only 3 GPU"):
        LocalLauncher(1, gpus_per_stage=4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    launcher = LocalLauncher(2, cpus_per_stage=4, nproc_per_node=2)
    env = launcher.stage_env({"A": "1"}, [])
    assert env == {"A": "1", "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}  # 4 threads over 2 processes
    assert LocalLauncher(3).cpus_per_stage == max(1, os.cpu_count() // 3)


def test_a_silent_squeue_decides_nothing_and_a_job_gone_without_its_stamp_failed(tmp_path, monkeypatch, capsys):
    pytest.importorskip("submitit")
    from papa.sweep.launchers import slurm

    stage = prepared_stages(tmp_path, "--static_heads_nums", "0")[0]
    (task,) = [t for t in sweep_tasks("", [stage], str(tmp_path / "out"), {}) if t.stage is stage]
    launcher = slurm.SlurmLauncher(str(tmp_path / "out"), {"time": 5})
    task.handle = {"job_id": "5", "seen_running": False, "slurm_log": "5_0_log.err"}
    launcher.in_flight = 1
    answers = iter([None, {"5": "RUNNING"}, {}])
    monkeypatch.setattr(slurm, "queue_states", lambda: next(answers))
    monkeypatch.setattr(slurm, "final_state", lambda job_id: ("FAILED", 1))
    assert not launcher.has_room() and launcher.poll(task) is None  # squeue silent: no submission, no verdict
    launcher.wait(0)
    assert launcher.poll(task) is None and "running (Slurm job 5)" in capsys.readouterr().out
    launcher.wait(0)
    run, note = launcher.poll(task)  # gone from the queue without a stamp: failed, with Slurm's word
    assert (run.ok, run.returncode, run.log_path, launcher.in_flight) == (False, 1, "5_0_log.err", 0)
    assert note == "Slurm job 5: FAILED; submitit's log: 5_0_log.err"


@pytest.mark.slow
def test_nproc_per_node_runs_each_stage_data_parallel_under_torchrun(inline_run, tiny_bert, tmp_path):  # noqa: F811
    """--launcher local --nproc_per_node 2: every stage is two torchrun processes (the averaging pass shards its
    examples over them and all-reduces the sums), with the inline run's averages up to float rounding."""
    import torch

    out = tmp_path / "out"
    run_command(script("run_papa_sweep.py") + ["--output_dir", out, "--model_name_or_path", tiny_bert, *SWEEP,
                                               "--launcher", "local", "--nproc_per_node", "2"])
    assert "32 examples (2 process(es))" in (out / "avgs" / "log.txt").read_text()
    for name in STAGES:
        assert "torch.distributed.run" in (out / name / "log.txt").read_text().splitlines()[0], name
    torch.testing.assert_close(torch.load(out / "avgs" / "avgs.pt"), torch.load(inline_run / "avgs" / "avgs.pt"),
                               atol=1e-6, rtol=1e-5)
    assert (out / "results.csv").exists() and json.loads((out / "k_12" / "eval_results.json").read_text())
