"""Running one stage's process: its output to `<stage>/log.txt` as it comes, its progress on one console line.

The stage (a `python -m papa.cli.<command>` child) reports progress as `[papa-progress] done/total`
lines (papa.console); they move the stage's bar and stay out of the log. On a terminal the bar is
a live tqdm line that the stage's result replaces; elsewhere (a pipe, a CI log) the stage gets a
start line and a result line. With `echo`, every other line also goes to the console.

A `python -m papa.cli.<command>` stage is not started as a new interpreter: it is a fresh fork of
papa.fork_server (the imports paid once per sweep) that runs the module as `python -m` would, with
the stage's environment, working folder and argv, its stdout and stderr on the same pipe. Where
there is no fork server (Windows), or for any other command, the stage is a plain subprocess.
"""

import collections
import io
import os
import shlex
import subprocess
import sys

from .. import fork_server
from ..console import parse_progress
from ..fork_server import fork_from_this_process  # noqa: F401 - used by a Slurm job (papa.sweep.launchers.job)
from ..fork_server import start as start_fork_server  # noqa: F401 - papa.sweep.child.start_fork_server

TAIL_LINES = 20  # what a failed stage shows of its log


def is_terminal(stream):
    """A terminal with a width (a pseudo-terminal without a size shows no bar)."""
    try:
        return stream.isatty() and os.get_terminal_size(stream.fileno()).columns > 0
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False


class StageLine:
    """One stage's console line: `text`, a bar while it runs (on a terminal), then the outcome."""

    def __init__(self, text, stream=None, live=None):
        self.text, self.stream = text, stream or sys.stdout
        live = is_terminal(self.stream) if live is None else live
        self.bar = None
        if live:
            from tqdm import tqdm

            self.bar = tqdm(total=1, desc=text, file=self.stream, leave=False, dynamic_ncols=True,
                            bar_format="{desc} {percentage:3.0f}%|{bar:24}| {n_fmt}/{total_fmt} [{elapsed}]")
        else:
            print(f"{text} ...", file=self.stream, flush=True)

    def progress(self, done, total):
        if self.bar is not None:
            self.bar.total, self.bar.n = max(total, 1), done
            self.bar.refresh()

    def end(self, outcome):
        if self.bar is not None:
            self.bar.close()
        print(f"{self.text}: {outcome}", file=self.stream, flush=True)


def _start(command, env):
    """(readable binary stream of the stage's merged output, wait() -> exit status, kill(), running())."""
    if command[:2] == [sys.executable, "-m"] and command[2].startswith("papa.cli."):
        forked = fork_server.start_module(command[2], command[3:], env, os.getcwd())
        if forked is not None:
            return forked
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return process.stdout, process.wait, process.kill, lambda: process.poll() is None


def run_logged(command, env, log_path, on_progress, echo=None):
    """Run `command`, its stdout and stderr (merged) written to `log_path` line by line.

    Returns (exit status, the log's last TAIL_LINES lines). Progress lines go to `on_progress(done,
    total)` instead of the log; with `echo`, every logged line is also passed to it.
    """
    tail = collections.deque(maxlen=TAIL_LINES)
    with open(log_path, "w", encoding="utf-8") as log:
        log.write(f"$ {shlex.join(command)}\n\n")
        log.flush()
        output, wait, kill, running = _start(command, env)
        try:
            for raw in output:
                line = raw.decode("utf-8", errors="replace")
                progress = parse_progress(line)
                if progress is not None:
                    on_progress(*progress)
                    continue
                log.write(line)
                log.flush()
                tail.append(line.rstrip("\n"))
                if echo is not None:
                    echo(line)
            return wait(), list(tail)
        finally:
            if running():  # interrupted: do not leave the stage running
                kill()
                wait()
