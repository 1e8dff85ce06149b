"""Driver-side scheduling of stages for the parallel launchers (local, slurm): a stage starts when its inputs are done.

The dependencies come from the stages themselves: a stage waits for every stage whose folder holds
one of its declared inputs (the ranking run reads avgs/avgs.pt, so it waits for the averaging
stage; a probing run with k > 0 also reads sort/sorted_heads.json), and for the stages named in its
optional `after` field. So any stage a sweep lays out is scheduled right without the scheduler
knowing what it is. When a stage is ready, its stamp decides as in an inline run: up to date, it is
skipped; otherwise the launcher starts it. A failed stage stops its own sweep (its later stages are
not started); the other sweeps go on.
"""

import os
import sys
from dataclasses import dataclass, field

from ...errors import PapaError
from ..stages import failure, human, show_tail

POLL_S = 1.0  # how often the driver looks at the running stages when nothing happened


@dataclass(eq=False)
class Task:
    """One stage of one sweep, as the scheduler sees it."""

    sweep: str  # the sweep it belongs to ("" for a plain sweep; "model x task" in a grid)
    index: int  # its place in its sweep, 1-based, for the console lines
    total: int
    stage: object  # papa.sweep.stages.Stage
    output_dir: str  # its sweep's folder (the stamps are relative to it)
    env: dict
    verbose: bool = False
    after: list = field(default_factory=list)  # the Tasks it waits for
    state: str = "waiting"  # waiting, running, done, failed, skipped
    handle: object = None  # the launcher's

    @property
    def prefix(self):
        sweep = f"{self.sweep}: " if self.sweep else ""
        return f"[sweep] {sweep}{self.index}/{self.total} {self.stage.description}"


def dependencies(stages):
    """{stage name: [names of the stages it waits for]}: those whose folder holds one of its inputs, and its `after`."""
    folders = {}
    for stage in stages:
        folder = os.path.abspath(stage.folder)
        if folder in folders:
            raise PapaError(f"stages {folders[folder]} and {stage.name} would both write {folder}")
        folders[folder] = stage.name
    deps = {}
    for stage in stages:
        names = list(getattr(stage, "after", None) or [])
        for path in stage.inputs:
            parent = os.path.dirname(os.path.abspath(path))
            while parent not in folders and os.path.dirname(parent) != parent:
                parent = os.path.dirname(parent)
            if folders.get(parent) not in (None, stage.name):
                names.append(folders[parent])
        deps[stage.name] = list(dict.fromkeys(names))
    return deps


def sweep_tasks(sweep, stages, output_dir, env, verbose=False):
    """The Tasks of one sweep's stages, each linked to those it waits for."""
    tasks = {stage.name: Task(sweep, i, len(stages), stage, output_dir, env, verbose)
             for i, stage in enumerate(stages, 1)}
    for name, deps in dependencies(stages).items():
        unknown = [d for d in deps if d not in tasks]
        if unknown:
            raise PapaError(f"stage {name} waits for {unknown}, which the sweep does not have")
        tasks[name].after = [tasks[d] for d in deps]
    return list(tasks.values())


def _fail(task, run, note, errors):
    """Report a failed stage (its log's tail, then its error) and record the error for its sweep."""
    task.state = "failed"
    took = f" after {human(run.seconds)}" if run.seconds is not None else ""
    print(f"{task.prefix}: failed{took}{f' ({note})' if note else ''}", flush=True)
    if run.tail and not task.verbose:
        show_tail(run.tail, run.log_path)
    errors.setdefault(task.sweep, str(failure(task.stage, run)) + (f" [{note}]" if note else ""))


def run_scheduled(tasks, launcher):
    """Run `tasks` with `launcher`, each when those it waits for are done; {sweep: its first error} for the failed.

    Interrupted (Ctrl-C), the launcher's running stages are stopped where it can (local) or left to finish
    (Slurm jobs: the next run waits for them)."""
    try:
        return _run_scheduled(tasks, launcher)
    except BaseException:
        interrupt = getattr(launcher, "interrupt", None)
        if interrupt is not None:
            interrupt()
        raise


def _run_scheduled(tasks, launcher):
    errors = {}
    while True:
        progressed = False
        for task in tasks:
            if task.state != "waiting":
                continue
            if task.sweep in errors or any(t.state in ("failed", "skipped") for t in task.after):
                task.state = "skipped"
                print(f"{task.prefix}: not run (an earlier stage of this sweep failed)", flush=True)
                progressed = True
                continue
            if any(t.state != "done" for t in task.after) or not launcher.has_room():
                continue
            reason = task.stage.why_not_done(task.stage.fingerprint(task.output_dir))
            if reason is None:
                task.state = "done"
                print(f"{task.prefix}: up to date, skipped", flush=True)
            else:
                task.handle = launcher.start(task, reason)
                task.state = "running"
            progressed = True
        for task in tasks:
            if task.state != "running":
                continue
            outcome = launcher.poll(task)
            if outcome is None:
                continue
            run, note = outcome
            progressed = True
            if run.ok:
                task.state = "done"
                print(f"{task.prefix}: done in {human(run.seconds)}", flush=True)
            else:
                _fail(task, run, note, errors)
        if all(task.state in ("done", "failed", "skipped") for task in tasks):
            return errors
        if not progressed:
            launcher.wait(POLL_S)


def echo_prefixed(label):
    """With --verbose: each line of a stage's output on the console, after its stage's name (stages interleave)."""

    def echo(line):
        sys.stdout.write(f"[{label}] {line}")
        sys.stdout.flush()

    return echo

