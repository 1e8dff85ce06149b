"""A sweep stage: one `python -m papa.cli.<command>` run in its own folder, with a stamp that makes it resumable.

Each stage folder gets a stamp, `stage.json`, written (atomically) only after the stage succeeded.
It holds a fingerprint of the stage's inputs: its command line (the original script's name, then
its flags, with the output folder written as `<output_dir>` so a moved sweep stays valid) and the
sha256 of the artifacts it reads (avgs.pt for the ranking and probing runs, sorted_heads.json for
probing runs with k > 0). A stage is done iff its stamp matches the current fingerprint and its
output files exist; otherwise its folder is emptied (but for a ranking's saved progress, which the redo resumes
when it is its own: papa.method.ranking_progress) and the stage runs again. So a changed avgs.pt
redoes the ranking and every probing run, a deleted `k_<k>/` redoes only that k, and a changed
`--num_train_epochs` redoes the training stages.

The stamp also records how the stage ran: `launcher` (inline, local, slurm), `job_id` (the Slurm
job; null otherwise), `host`, and `started` / `finished` (ISO-8601, UTC).
"""

import hashlib
import os
import shutil
import socket
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone

from ..errors import PapaError
from ..io import load_json, removed_on_failure, save_json
from ..run_folders import STAMP
from .child import StageLine, run_logged

STAMP_VERSION = 1
LOG = "log.txt"
OUTPUT_PLACEHOLDER = "<output_dir>"
RESUMABLE = ("ranking_progress.pt",)  # papa.method.ranking_progress.PROGRESS_FILE: kept when a stage is redone


def sha256_file(path, chunk=1 << 20):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def human(seconds):
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.1f} min"


@dataclass
class Stage:
    """One run: its folder, the command module and its flags, the artifacts it reads and the files it writes."""

    name: str  # "avgs", "sort", "k_<k>"
    description: str
    folder: str
    module: str  # e.g. "papa.cli.glue"
    script: str  # the original script it stands for, e.g. "run_papa_glue.py" (named in the fingerprint)
    args: list
    inputs: list  # artifacts of earlier stages it reads
    outputs: list  # files it must write into its folder

    @property
    def command(self):
        return [sys.executable, "-m", self.module, *self.args]

    def fingerprint(self, output_dir):
        """The stage's inputs: its command line (output folder abstracted) and sha256 of consumed files."""
        root = os.path.abspath(output_dir)
        argv = [self.script] + [OUTPUT_PLACEHOLDER + a[len(root):] if a == root or a.startswith(root + os.sep) else a
                                for a in self.args]
        inputs = {}
        for path in self.inputs:
            if not os.path.isfile(path):
                return None  # an input is missing: cannot be up to date (the earlier stage failed?)
            inputs[os.path.relpath(path, root)] = sha256_file(path)
        return {"version": STAMP_VERSION, "argv": argv, "inputs": inputs}

    def why_not_done(self, fingerprint):
        """None when the stage is done (stamp matches, outputs present), else the reason to run it."""
        stamp_path = os.path.join(self.folder, STAMP)
        if not os.path.isfile(stamp_path):
            started = os.path.isdir(self.folder) and os.listdir(self.folder)
            return "unfinished earlier" if started else "new"
        try:
            stamp = load_json(stamp_path, "")
        except PapaError:
            return "unreadable stage.json"
        if fingerprint is None:
            return "an input file is missing"
        if not isinstance(stamp, dict) or stamp.get("fingerprint") != fingerprint:
            return "inputs changed"
        missing = [o for o in self.outputs if not os.path.isfile(os.path.join(self.folder, o))]
        if missing:
            return f"{', '.join(missing)} missing"
        return None


def echo_line(text):
    sys.stdout.write(text)
    sys.stdout.flush()


def show_tail(tail, log_path):
    print(f"[sweep]   last lines of {log_path}:", file=sys.stderr)
    for line in tail:
        print(f"[sweep]   | {line}", file=sys.stderr)
    sys.stderr.flush()


def utc_now():
    """The time now, ISO-8601 in UTC (the stamp's `started` / `finished`)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class StageRun:
    """What running a stage's command gave: its exit status, its log's last lines, how long, what is missing."""

    returncode: int
    tail: list
    seconds: float
    log_path: str
    missing: list

    @property
    def ok(self):
        return self.returncode == 0 and not self.missing


def execute_stage(stage, output_dir, env, on_progress, echo=None, launcher="inline", job_id=None, command=None):
    """Empty the stage's folder, run its command (output to log.txt), check its outputs, write its stamp on success.

    Every launcher runs a stage through this (papa.sweep.launchers), so a stage writes the same files
    whoever runs it; `launcher` and `job_id` (the Slurm job, else None) go into the stamp. `command`:
    what to run instead of stage.command (the same stage under torchrun).
    """
    def aside(name):  # beside the folder while it is emptied
        return os.path.join(os.path.dirname(stage.folder), f".{stage.name}.{name}")

    kept = []
    if os.path.isdir(stage.folder):
        for name in RESUMABLE:  # a ranking's saved progress: the redo resumes it (it checks that it is its own)
            if os.path.isfile(os.path.join(stage.folder, name)):
                os.replace(os.path.join(stage.folder, name), aside(name))
                kept.append(name)
        shutil.rmtree(stage.folder)  # no other stale file survives a redo, whatever the new run writes
    os.makedirs(stage.folder)
    for name in kept:
        os.replace(aside(name), os.path.join(stage.folder, name))
    log_path = os.path.join(stage.folder, LOG)
    started, start = utc_now(), time.monotonic()
    returncode, tail = run_logged(command or stage.command, env, log_path, on_progress, echo)
    seconds = round(time.monotonic() - start, 1)
    missing = [] if returncode != 0 else [o for o in stage.outputs if not os.path.isfile(os.path.join(stage.folder, o))]
    run = StageRun(returncode, tail, seconds, log_path, missing)
    if run.ok:
        # the stamp last: only a finished stage has one; recomputed so it names what was actually read
        stamp = {"fingerprint": stage.fingerprint(output_dir), "stage": stage.name, "command": stage.command,
                 "seconds": seconds, "launcher": launcher, "job_id": job_id, "host": socket.gethostname(),
                 "started": started, "finished": utc_now()}
        save_json(stamp, os.path.join(stage.folder, STAMP), indent=2)
    return run


class RunFailed(PapaError):
    """A stage's (or grid's) failure; `brief`: its message without the logs' paths and the advice to re-run, for
    when they are removed (removed_unless_finished)."""

    def __init__(self, message, brief):
        super().__init__(message)
        self.brief = brief


def failure(stage, run):
    """The PapaError of a failed StageRun: the stage's own one-line error (papa.errors), if it gave one, names the cause."""
    if run.returncode != 0:
        cause = next((t[len("error: "):] for t in reversed(run.tail) if t.startswith("error: ")), None)
        brief = f"{stage.description} failed{f': {cause}' if cause else ''} (exit status {run.returncode}"
        return RunFailed(f"{brief}; its log: {run.log_path}). Fix the cause and re-run the sweep: finished stages "
                           f"are kept", brief + ")")
    return PapaError(f"{stage.description} exited normally but did not write {', '.join(run.missing)} "
                     f"in {stage.folder} (its log: {run.log_path})")


def holds_finished_stage(folder):
    """Whether a stage under `folder` finished (has its stamp): work a re-run resumes, not to be removed."""
    return any(STAMP in files for _, _, files in os.walk(folder))


@contextmanager
def removed_unless_finished(output_dir):
    """A sweep's (or grid's) run: on a failure before any stage finished, the folder it made is removed again
    (papa.io.removed_on_failure), and the error no longer points at a log inside it."""
    try:
        with removed_on_failure(output_dir, keep=holds_finished_stage) as removed:
            yield
    except PapaError as err:
        if not removed:
            raise
        brief = getattr(err, "brief", str(err))
        raise PapaError(f"{brief}; nothing had finished, so {removed[0]}, which this run made, is removed again") from None


def run_stage(stage, index, total, output_dir, env, verbose=False):
    """Run `stage` unless it is done; True when it ran. A failure is a PapaError after the log's last lines."""
    prefix = f"[sweep] {index}/{total} {stage.description}"
    reason = stage.why_not_done(stage.fingerprint(output_dir))
    if reason is None:
        print(f"{prefix}: up to date, skipped", flush=True)
        return False
    line = StageLine(prefix + ("" if reason == "new" else f" (redo: {reason})"), live=False if verbose else None)
    run = execute_stage(stage, output_dir, env, line.progress, echo_line if verbose else None)
    if run.returncode != 0:
        line.end(f"failed after {human(run.seconds)}")
        if not verbose:
            show_tail(run.tail, run.log_path)
        raise failure(stage, run)
    if run.missing:
        line.end("failed")
        raise failure(stage, run)
    line.end(f"done in {human(run.seconds)}")
    return True
