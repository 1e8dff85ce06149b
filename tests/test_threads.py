"""papa.threads: torch's threads fitted to the cores other processes leave free (docs/performance.md#a-busy-machine)."""

import os
import subprocess
import sys
import time

import pytest
from conftest import REPO

from papa import threads

linux_only = pytest.mark.skipif(not os.path.exists(threads.PROC_STAT), reason="needs Linux's /proc/stat")


def test_runnable_tasks_reads_procs_running(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  1 2 3\nctxt 99\nprocs_running 5\nprocs_blocked 0\n", encoding="ascii")
    assert threads.runnable_tasks(str(stat)) == 5
    stat.write_text("cpu  1 2 3\n", encoding="ascii")
    assert threads.runnable_tasks(str(stat)) is None
    assert threads.runnable_tasks(str(tmp_path / "absent")) is None


def test_busy_elsewhere_is_the_median_of_the_others():
    readings = iter([1, 3, 2, 9, 2])  # this thread counts itself: others 0, 2, 1, 8, 1 -> median 1
    assert threads.busy_elsewhere(samples=5, interval_s=0, read=lambda: next(readings)) == 1
    assert threads.busy_elsewhere(samples=3, interval_s=0, read=lambda: 0) == 0  # never negative
    assert threads.busy_elsewhere(samples=3, interval_s=0, read=lambda: None) is None


@pytest.mark.parametrize("current, cores, busy, expected", [
    (2, 2, 0, 2), (2, 2, 1, 1), (2, 2, 5, 1), (8, 16, 4, 8), (16, 16, 4, 12), (4, 4, 3, 1)])
def test_fitted_threads(current, cores, busy, expected):
    assert threads.fitted_threads(current, cores, busy) == expected


def test_an_explicit_thread_count_is_kept(monkeypatch):
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(threads, "busy_elsewhere", lambda: pytest.fail("OMP_NUM_THREADS was set: nothing to measure"))
    before = torch.get_num_threads()
    assert threads.fit_to_free_cores() is None
    assert torch.get_num_threads() == before


def test_fit_lowers_the_threads_to_the_free_cores(monkeypatch):
    import torch

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "usable_cores", lambda: 4)
    monkeypatch.setattr(threads, "busy_elsewhere", lambda: 3)
    before = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        note = threads.fit_to_free_cores()
        assert torch.get_num_threads() == 1
        assert note.startswith("3 of 4 cores busy with other work: 1 torch thread instead of 4")
    finally:
        torch.set_num_threads(before)


def spin(seconds):
    """A process that keeps one core busy for `seconds`."""
    return subprocess.Popen([sys.executable, "-c", f"import time\nend = time.time() + {seconds}\n"
                                                   "while time.time() < end: pass"])


@linux_only
def test_busy_processes_are_seen_and_a_command_fits_its_threads():
    """As many spinning processes as cores keep them all busy: /proc/stat shows them, and a command started
    without OMP_NUM_THREADS says it lowered torch's threads to 1."""
    cores = threads.usable_cores()
    if not 2 <= cores <= 8:
        pytest.skip(f"needs 2 to 8 cores (here {cores}): on one torch already runs 1 thread, and more would "
                    "take as many spinning processes")
    spinners = [spin(60) for _ in range(cores)]
    try:
        time.sleep(0.5)
        assert threads.busy_elsewhere() >= cores
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
        shown = subprocess.run([sys.executable, str(REPO / "papa_scripts" / "run_papa_glue_avgs_creator.py"),
                                "--help"], env=env, capture_output=True, text=True, timeout=120)
    finally:
        for process in spinners:
            process.kill()
            process.wait()
    assert shown.returncode == 0, shown.stderr
    assert "cores busy with other work" in shown.stderr and "torch thread" in shown.stderr, shown.stderr
