"""Torch's CPU threads fitted to the cores other work leaves free, when a PAPA command starts.

Torch's intra-op pool splits each operator across its threads and waits at the end of it for the
slowest one. On a machine whose cores are all busy with other work, one of those threads shares its
core with a competing process, and every operator waits for it: on 2 cores beside one busy process,
a stock MiniLM training step took 2.55x its quiet time with torch's default 2 threads and 1.86x with
1 thread (2-core AMD EPYC, docs/performance.md#a-busy-machine). Stock transformers behaves the same:
this is the thread pool, not PAPA's code. So every command (papa.cli.command) starts with as many
threads as there are cores no other process is running on, at least one; a stage of the sweep, a
fresh process, fits its own at its start, so a sweep follows a load that comes and goes between
stages (not within one).

The other processes' demand is the kernel's count of runnable tasks (/proc/stat `procs_running`,
which counts this process's running thread too), sampled a few times over a tenth of a second and
its median taken. An OMP_NUM_THREADS the user (or `--launcher local`) set is kept as it is. Linux
only: elsewhere torch's default stays.
"""

import os
import statistics
import time

PROC_STAT = "/proc/stat"
SAMPLES = 9
INTERVAL_S = 0.012


def runnable_tasks(path=PROC_STAT):
    """The kernel's number of runnable tasks now (this thread included), or None where it cannot be read."""
    try:
        with open(path, encoding="ascii") as stat:
            for line in stat:
                if line.startswith("procs_running "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def busy_elsewhere(samples=SAMPLES, interval_s=INTERVAL_S, read=runnable_tasks):
    """How many cores other processes keep busy: the median over `samples` readings of the runnable tasks
    other than this thread (None where /proc/stat cannot be read)."""
    counts = []
    for i in range(samples):
        count = read()
        if count is None:
            return None
        counts.append(max(0, count - 1))
        if i + 1 < samples:
            time.sleep(interval_s)
    return int(statistics.median(counts))


def usable_cores():
    """The cores this process may run on (its affinity mask; all of the machine's where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def fitted_threads(current, cores, busy):
    """Torch threads for `cores` usable cores of which `busy` run other work: the free ones, at least 1, never
    more than torch's `current` number."""
    return max(1, min(current, cores - busy))


def fit_to_free_cores():
    """Set torch's intra-op threads to the free cores unless OMP_NUM_THREADS chose them. Returns the note
    to show where it lowered them (else None)."""
    if os.environ.get("OMP_NUM_THREADS"):
        return None
    busy = busy_elsewhere()
    if busy is None or busy == 0:
        return None
    import torch

    current = torch.get_num_threads()
    threads = fitted_threads(current, usable_cores(), busy)
    if threads == current:
        return None
    torch.set_num_threads(threads)
    return (f"{busy} of {usable_cores()} cores busy with other work: {threads} torch thread{'s' if threads > 1 else ''}"
            f" instead of {current} (set OMP_NUM_THREADS to choose)")
