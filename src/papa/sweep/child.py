"""Running one stage's process: its output to `<stage>/log.txt` as it comes, its progress on one console line.

The stage (a `python -m papa.cli.<command>` child) reports progress as `[papa-progress] done/total`
lines (papa.console); they move the stage's bar and stay out of the log. On a terminal the bar is
a live tqdm line that the stage's result replaces; elsewhere (a pipe, a CI log) the stage gets a
start line and a result line. With `echo`, every other line also goes to the console.

A `python -m papa.cli.<command>` stage is not started as a new interpreter: importing torch,
transformers and the Trainer takes ~10 s on a 2-core machine, more than many stages compute. A
fork server (multiprocessing's "forkserver", started once per sweep) imports them once, and each
stage is a fresh fork of it that runs the module as `python -m` would, with the stage's
environment, working folder and argv, its stdout and stderr on the same pipe. The server itself
never computes, so no thread pool is forked. Where there is no fork server (Windows), or for any
other command, the stage is a plain subprocess.
"""

import collections
import importlib
import io
import multiprocessing
import os
import runpy
import shlex
import subprocess
import sys

from ..console import parse_progress

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


# what the fork server imports once: everything a stage imports before it starts working
PRELOAD = ["papa.runs", "papa.cli", "transformers.trainer"]
_server = None


def _fork_server():
    """The multiprocessing context of the stages' fork server (started on first use), or None."""
    global _server
    if _server is None and "forkserver" in multiprocessing.get_all_start_methods():
        _server = multiprocessing.get_context("forkserver")
        _server.set_forkserver_preload(PRELOAD)
    return _server


def fork_from_this_process():
    """In a process that runs one stage and nothing else (a Slurm job): fork the stage from this process, its
    imports done here once, instead of starting a fork server (a second interpreter importing them again)."""
    global _server
    if "fork" in multiprocessing.get_all_start_methods():
        for name in PRELOAD:
            importlib.import_module(name)
        _server = multiprocessing.get_context("fork")


def start_fork_server():
    """Start the fork server now, so that its imports overlap what the sweep does before its first stage."""
    if _fork_server() is not None:
        from multiprocessing import forkserver

        forkserver.ensure_running()


def _run_module(module, argv, env, cwd, out):
    """In the forked stage: `python -m module *argv` with `env` and `cwd`, stdout and stderr on `out`."""
    os.dup2(out.fileno(), 1)
    os.dup2(out.fileno(), 2)
    out.close()
    threads = env.get("OMP_NUM_THREADS")
    if threads and threads != os.environ.get("OMP_NUM_THREADS") and threads.isdigit():
        import torch  # preloaded by the server with its own thread count: the stage's share instead

        torch.set_num_threads(int(threads))
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = [module, *argv]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def _start(command, env):
    """(readable binary stream of the stage's merged output, wait() -> exit status, kill(), running())."""
    server = _fork_server()
    if server is not None and command[:2] == [sys.executable, "-m"] and command[2].startswith("papa.cli."):
        reader, writer = server.Pipe(duplex=False)  # a plain os.pipe(): the stage writes raw bytes to it
        process = server.Process(target=_run_module, args=(command[2], command[3:], env, os.getcwd(), writer),
                                 name=command[2])
        process.start()
        writer.close()  # the stage holds the only write end: end of file when it exits
        stream = open(reader.fileno(), "rb", closefd=False)

        def wait():
            process.join()
            stream.close()
            reader.close()
            return process.exitcode

        return stream, wait, process.kill, lambda: process.exitcode is None
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
