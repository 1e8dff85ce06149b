"""`--launcher local`: up to --max_parallel stages at once on this machine, each in a thread that runs its process.

Each running stage gets its share of the machine: with GPUs visible, --gpus_per_stage of them of its
own (CUDA_VISIBLE_DEVICES), so no two stages share a GPU; on CPU, --cpus_per_stage threads
(OMP_NUM_THREADS; default: the cores divided by --max_parallel). A stage runs exactly as inline
(papa.sweep.stages.execute_stage: the fork server's fork, log.txt, the stamp), so it writes the same files.
"""

import multiprocessing
import os
import threading
import time

from ...errors import PapaError
from ..child import start_fork_server
from ..stages import StageRun, execute_stage
from .job import torchrun_command
from .schedule import echo_prefixed


def visible_gpus():
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them ([] on a machine without)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d for d in listed.split(",") if d.strip() and d.strip() != "-1"]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:  # no usable CUDA: CPU stages
        return []


class LocalLauncher:
    def __init__(self, max_parallel, cpus_per_stage=None, gpus_per_stage=None, nproc_per_node=1):
        self.gpus = visible_gpus()
        self.gpus_per_stage = gpus_per_stage or (1 if self.gpus else 0)
        if self.gpus_per_stage and len(self.gpus) < self.gpus_per_stage:
            raise PapaError(f"--gpus_per_stage {self.gpus_per_stage}: only {len(self.gpus)} GPU(s) visible")
        slots = len(self.gpus) // self.gpus_per_stage if self.gpus_per_stage else max_parallel
        self.max_parallel = min(max_parallel, slots)
        self.cpus_per_stage = cpus_per_stage or max(1, (os.cpu_count() or 1) // max_parallel)
        self.nproc_per_node = nproc_per_node
        self.free_gpus = list(self.gpus)
        self.running = 0
        self.changed = threading.Event()
        shown = (f"{self.gpus_per_stage} GPU(s)" if self.gpus_per_stage else f"{self.cpus_per_stage} CPU thread(s)")
        at_once = f"{self.max_parallel} stage{'s' if self.max_parallel > 1 else ''}"
        print(f"[sweep] launcher local: up to {at_once} at once, {shown} each", flush=True)

    def has_room(self):
        return self.running < self.max_parallel

    def stage_env(self, env, gpus):
        """The stage's environment: its share of the cores (per process under torchrun), its own GPUs."""
        threads = str(max(1, self.cpus_per_stage // max(1, self.nproc_per_node)))
        env = dict(env, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        return env

    def start(self, task, reason):
        start_fork_server()  # once: the stages' imports
        gpus = [self.free_gpus.pop(0) for _ in range(self.gpus_per_stage)]
        env = self.stage_env(task.env, gpus)
        where = f" on GPU {','.join(gpus)}" if gpus else ""
        print(f"{task.prefix}{'' if reason == 'new' else f' (redo: {reason})'}: running{where}", flush=True)
        handle = {"gpus": gpus, "run": None}
        echo = echo_prefixed(f"{task.sweep + ' ' if task.sweep else ''}{task.stage.name}") if task.verbose else None
        command = torchrun_command(task.stage.command, self.nproc_per_node)

        def work():
            start = time.monotonic()
            try:
                handle["run"] = execute_stage(task.stage, task.output_dir, env, lambda done, total: None, echo,
                                              launcher="local", command=command)
            except Exception as err:  # the stage's folder or process could not be set up: a failed stage
                log = os.path.join(task.stage.folder, "log.txt")
                handle["run"] = StageRun(1, [f"error: {type(err).__name__}: {err}"], round(time.monotonic() - start, 1),
                                         log, [])
            self.changed.set()

        self.running += 1
        threading.Thread(target=work, name=task.stage.name, daemon=True).start()
        return handle

    def poll(self, task):
        run = task.handle["run"]
        if run is None:
            return None
        self.running -= 1
        self.free_gpus.extend(task.handle["gpus"])
        return run, None

    def interrupt(self):
        """The driver stops: so do the stages it started (as an inline stage stops with its sweep)."""
        for process in multiprocessing.active_children():
            process.kill()

    def wait(self, seconds):
        self.changed.wait(seconds)
        self.changed.clear()
