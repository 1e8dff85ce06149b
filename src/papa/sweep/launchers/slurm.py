"""`--launcher slurm`: every stage is one Slurm job, submitted with submitit when its inputs are done.

The driver (papa.sweep.launchers.schedule) submits a stage when the stages it reads from are done,
so dependencies are the driver's, exactly as with the local launcher, and the cluster never holds a
job that waits on another. submitit's folders (the pickled call, the job's own stdout/stderr) go to
`<output_dir>/slurm/<job id>/`; each submitted stage is tracked in `<output_dir>/slurm/jobs/<stage>.json`
(its job id and command). A driver started again (after it was killed, or after jobs failed or were
preempted) skips what its stamp says is done, waits for a tracked job that `squeue` still lists
instead of submitting the stage twice, and submits the rest. A job's outcome is read off the disk
(the stage's stamp and log.txt) and `squeue` / `scontrol`: submitit's own status polling calls
`sacct`, which clusters without accounting lack.
"""

import contextlib
import getpass
import os
import shutil
import subprocess
import sys
import time

from ...errors import PapaError
from ...io import load_json, load_json_object, save_json
from ..child import TAIL_LINES
from ...run_folders import STAMP
from ..stages import LOG, StageRun, utc_now
from .job import run_in_slurm_job

ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED", "REQUEUE_HOLD",
          "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "STOPPED", "PREEMPTED"}  # PREEMPTED: requeued, or ends soon
SQUEUE_PATIENCE_S = 600  # how long the driver waits for an unanswering squeue before it gives up
SWEEP_VARIABLES = ("PAPA_PROGRESS", "PYTHONUNBUFFERED", "PAPA_TOKENIZED_CACHE", "TOKENIZERS_PARALLELISM",
                   "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


def slurm_command(*argv):
    """A Slurm command's stdout; None when it fails (the controller is briefly away, the job is unknown)."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def queue_states():
    """{job id: state} of this user's jobs in the queue (None when squeue does not answer)."""
    out = slurm_command("squeue", "-h", "-o", "%i %T", "-u", getpass.getuser())
    if out is None:
        return None
    return dict(line.split()[:2] for line in out.splitlines() if len(line.split()) >= 2)


def final_state(job_id):
    """(state, exit code) of a job that left the queue, from scontrol (recent jobs) else sacct; state 'unknown'."""
    out = slurm_command("scontrol", "-o", "show", "job", str(job_id))
    if out:
        fields = dict(f.split("=", 1) for f in out.split() if "=" in f)
        code = fields.get("ExitCode", "").split(":")[0]
        return fields.get("JobState", "unknown"), int(code) if code.isdigit() else None
    out = slurm_command("sacct", "-n", "-X", "-P", "-j", str(job_id), "-o", "State,ExitCode")
    if out and out.strip():
        state, _, code = out.splitlines()[0].partition("|")
        code = code.split(":")[0]
        return state.split()[0], int(code) if code.isdigit() else None
    return "unknown (gone from squeue, no accounting)", None


def log_tail(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return [line.rstrip("\n") for line in f.readlines()[-TAIL_LINES:]]
    except OSError:
        return []


class SlurmLauncher:
    def __init__(self, root, parameters, array_parallelism=None, nproc_per_node=1, cpus_per_stage=1):
        import submitit

        self.root, self.folder = root, os.path.join(root, "slurm")
        self.executor = submitit.SlurmExecutor(folder=os.path.join(self.folder, "%j"), max_num_timeout=0)
        self.executor.update_parameters(**parameters)
        self.limit = array_parallelism or float("inf")
        self.nproc_per_node, self.cpus_per_stage = nproc_per_node, cpus_per_stage
        self.in_flight, self.states, self.states_at, self.fresh = 0, {}, None, False
        self.answered_at = time.monotonic()
        shown = ", ".join(f"{k}={v}" for k, v in parameters.items() if k != "job_name")
        print(f"[sweep] launcher slurm: one job per stage ({shown}); submitit folders in {self.folder}", flush=True)

    def has_room(self):
        return self.in_flight < self.limit and self._states() is not None

    def _tracking(self, task):
        key = os.path.relpath(task.stage.folder, self.root).replace(os.sep, "__")
        return os.path.join(self.folder, "jobs", f"{key}.json")

    def _states(self):
        """squeue's states, asked at most once per poll round; None while squeue does not answer (the controller
        restarting): then nothing is decided, neither a submission nor a job's end."""
        if self.states_at is None:
            states = queue_states()
            self.states_at = time.monotonic()
            if states is not None:
                self.states, self.answered_at = states, self.states_at
            elif self.states_at - self.answered_at > SQUEUE_PATIENCE_S:
                raise PapaError(f"squeue has not answered for {SQUEUE_PATIENCE_S // 60} minutes; the submitted jobs "
                                "go on: re-run the same command when Slurm answers, to wait for them")
            self.fresh = states is not None
        return self.states if self.fresh else None

    def start(self, task, reason):
        tracking = self._tracking(task)
        tracked = None
        if os.path.isfile(tracking):
            tracked = load_json(tracking, f"delete {tracking} (the stage is then submitted again)")
        state = self.states.get(str(tracked["job_id"])) if tracked else None  # fresh: has_room() asked
        if state in ACTIVE and tracked["command"] == task.stage.command:
            print(f"{task.prefix}: already {state.lower()} as Slurm job {tracked['job_id']} (submitted earlier), "
                  "waiting for it", flush=True)
            self.in_flight += 1
            return dict(tracked, seen_running=False)
        if state in ACTIVE:  # the stage's flags changed since: that job's result would be stale
            slurm_command("scancel", str(tracked["job_id"]))
        overrides = {k: task.env[k] for k in SWEEP_VARIABLES if k in task.env}
        overrides["OMP_NUM_THREADS"] = str(max(1, self.cpus_per_stage // max(1, self.nproc_per_node)))
        sweep = f"{task.sweep.replace(' x ', '-')}-" if task.sweep else ""
        self.executor.update_parameters(job_name=f"papa-{sweep}{task.stage.name}".replace(" ", "_"))
        from submitit.core.utils import FailedJobError

        try:
            job = self.executor.submit(run_in_slurm_job, task.stage, task.output_dir, overrides, self.nproc_per_node)
        except FailedJobError as err:  # sbatch refused it: a partition, account or time limit this cluster lacks
            reason = next((line for line in str(err).splitlines() if "error" in line.lower()), str(err).strip())
            raise PapaError(f"Slurm refused the job ({reason.strip()}); check --slurm_partition (`sinfo` lists them), "
                            "--slurm_time_min and --slurm_additional_parameters") from None
        handle = {"job_id": job.job_id, "command": task.stage.command, "submitted": utc_now(),
                  "slurm_log": str(job.paths.stderr)}
        os.makedirs(os.path.dirname(tracking), exist_ok=True)
        save_json(handle, tracking, indent=2)
        print(f"{task.prefix}{'' if reason == 'new' else f' (redo: {reason})'}: queued as Slurm job {job.job_id}",
              flush=True)
        self.in_flight += 1
        self.states[str(job.job_id)] = "PENDING"  # until squeue says otherwise
        return dict(handle, seen_running=False)

    def poll(self, task):
        handle = task.handle
        states = self._states()
        if states is None:
            return None
        state = states.get(str(handle["job_id"]))
        if state in ACTIVE:
            if state == "RUNNING" and not handle["seen_running"]:
                handle["seen_running"] = True
                print(f"{task.prefix}: running (Slurm job {handle['job_id']})", flush=True)
            return None
        self.in_flight -= 1
        stage = task.stage
        log_path = os.path.join(stage.folder, LOG)
        if stage.why_not_done(stage.fingerprint(task.output_dir)) is None:  # the stamp decides
            seconds = load_json_object(os.path.join(stage.folder, STAMP), "re-run the sweep").get("seconds")
            with contextlib.suppress(OSError):
                os.remove(self._tracking(task))
            return StageRun(0, [], seconds, log_path, []), None
        job_state, code = final_state(handle["job_id"])
        if not os.path.isfile(log_path):  # it never got to run the stage: Slurm's own log says why
            log_path = handle["slurm_log"]
        note = f"Slurm job {handle['job_id']}: {job_state}; submitit's log: {handle['slurm_log']}"
        missing = [o for o in stage.outputs if not os.path.isfile(os.path.join(stage.folder, o))]
        returncode = 0 if code == 0 and missing else code or 1  # 0: it ran to the end but wrote too little
        return StageRun(returncode, log_tail(log_path), None, log_path, missing), note

    def interrupt(self):
        if self.in_flight:
            print(f"[sweep] stopped: {self.in_flight} Slurm job(s) go on (squeue lists them); the same command "
                  "again waits for them instead of submitting them twice", file=sys.stderr, flush=True)

    def wait(self, seconds):
        time.sleep(seconds)
        self.states_at = None  # ask squeue again


def slurm_sanity():
    """The reason `--launcher slurm` cannot work here, or None."""
    if shutil.which("sbatch") is None:
        return "`sbatch` is not on PATH (this is not a Slurm login node)"
    try:
        import submitit  # noqa: F401
    except ImportError:
        return "submitit is not installed (pip install submitit==1.5.4)"
    return None
