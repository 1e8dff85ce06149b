"""The one fork server for work that runs in a fresh process: the sweep's stages and the benchmark's children.

Importing torch, transformers and the Trainer takes ~10 s on a 2-core machine, more than many
sweep stages compute, and a benchmark's memory child must start with no model run in it. A fork
server (multiprocessing's "forkserver", one per process, started on first use) imports PRELOAD
once; each child is a fresh fork of it. The server itself never computes, so no thread pool is
forked and no allocator state is inherited. Where there is no fork server (Windows), `context()`
is None: the sweep runs its stages as plain subprocesses, and `call` starts a spawned process.

    start()                          start the server now, so that its imports overlap other work
    call(function, *args)            function(*args) in a fresh child; its result, or its traceback as an error
    start_module(module, argv, ...)  `python -m module *argv` in a fresh child, output on one pipe
"""

import importlib
import multiprocessing
import os
import queue
import runpy
import sys
import time

# what the server imports once: everything a sweep stage or a benchmark child imports before it works
PRELOAD = ["papa.runs.run", "papa.cli", "transformers.trainer", "papa.benchmark.run"]
CALL_TIMEOUT_S = 1800  # a benchmark child that has not answered by then is stuck

_context = None


def context():
    """The multiprocessing context of the fork server (its preload set on first use), or None."""
    global _context
    if _context is None and "forkserver" in multiprocessing.get_all_start_methods():
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def fork_from_this_process():
    """In a process that runs one stage and nothing else (a Slurm job): fork children from this process, its
    imports done here once, instead of starting a fork server (a second interpreter importing them again)."""
    global _context
    if "fork" in multiprocessing.get_all_start_methods():
        for name in PRELOAD:
            importlib.import_module(name)
        _context = multiprocessing.get_context("fork")


def start():
    """Start the fork server now (its imports run while the caller does other work)."""
    if context() is not None:
        from multiprocessing import forkserver

        forkserver.ensure_running()


def _answer(queue, function, args):
    """In the child: put ("ok", function(*args)) or ("error", its traceback) on `queue`."""
    try:
        queue.put(("ok", function(*args)))
    except BaseException:  # noqa: BLE001 - reported to the parent
        import traceback

        queue.put(("error", traceback.format_exc()))


def call(function, *args, timeout=CALL_TIMEOUT_S):
    """`function(*args)` in a fresh child process; returns its (picklable) result. `function` must be a
    module-level function (the child finds it by name). A failure in the child is a RuntimeError here,
    with the child's traceback."""
    ctx = context() or multiprocessing.get_context("spawn")
    answers = ctx.Queue()
    process = ctx.Process(target=_answer, args=(answers, function, args))
    process.start()
    name = f"child process {function.__module__}.{function.__name__}"
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                status, payload = answers.get(timeout=1)
                break
            except queue.Empty:
                if not process.is_alive() and answers.empty():  # killed (e.g. out of memory) before answering
                    raise RuntimeError(f"{name} died without an answer (exit status {process.exitcode})") from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not answer within {timeout} s") from None
    finally:
        process.join(timeout=60)
        if process.is_alive():
            process.kill()
    if status != "ok":
        raise RuntimeError(f"{name} failed:\n{payload}")
    return payload


def _run_module(module, argv, env, cwd, out):
    """In the child: `python -m module *argv` with `env` and `cwd`, stdout and stderr on `out`."""
    os.dup2(out.fileno(), 1)
    os.dup2(out.fileno(), 2)
    out.close()
    threads = env.get("OMP_NUM_THREADS")
    if threads and threads != os.environ.get("OMP_NUM_THREADS") and threads.isdigit():
        import torch  # preloaded by the server with its own thread count: the child's share instead (--launcher local)

        torch.set_num_threads(int(threads))
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = [module, *argv]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def start_module(module, argv, env, cwd):
    """`python -m module *argv` in a fresh child (None without a fork server): (readable binary stream of
    its merged stdout and stderr, wait() -> exit status, kill(), running())."""
    ctx = context()
    if ctx is None:
        return None
    reader, writer = ctx.Pipe(duplex=False)  # a plain os.pipe(): the child writes raw bytes to it
    process = ctx.Process(target=_run_module, args=(module, list(argv), env, cwd, writer), name=module)
    process.start()
    writer.close()  # the child holds the only write end: end of file when it exits
    stream = open(reader.fileno(), "rb", closefd=False)

    def wait():
        process.join()
        stream.close()
        reader.close()
        return process.exitcode

    return stream, wait, process.kill, lambda: process.exitcode is None
