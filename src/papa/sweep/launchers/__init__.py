"""How a sweep's stages are run: `--launcher {inline,local,slurm}`.

    inline  (default) one stage at a time, each a fork of the fork server (papa.sweep.run's loop)
    local   up to --max_parallel stages at once on this machine (local.py)
    slurm   every stage one Slurm job, through submitit (slurm.py)

local and slurm share the driver-side scheduler (schedule.py: a stage starts when the stages whose
outputs it reads are done) and run each stage through papa.sweep.stages.execute_stage, as inline
does, so every launcher writes the same files. Their flags are checked here, before anything runs.
"""

import json

from ...errors import PapaError
from .schedule import run_scheduled, sweep_tasks

LAUNCHERS = ("inline", "local", "slurm")
LOCAL_FLAGS = ("max_parallel", "cpus_per_stage", "gpus_per_stage")
SLURM_FLAGS = ("slurm_partition", "slurm_time_min", "slurm_cpus_per_stage", "slurm_gpus_per_stage", "slurm_mem_gb",
               "slurm_array_parallelism", "slurm_additional_parameters")
DEFAULT_SLURM_TIME_MIN = 60

__all__ = ["LAUNCHERS", "check_launcher", "make_launcher", "run_scheduled", "sweep_tasks"]


def check_launcher(args):
    """Flags of one launcher given with another, counts below 1, bad JSON, no Slurm for --launcher slurm: a
    PapaError naming the fix (before anything runs)."""
    if args.launcher not in LAUNCHERS:
        raise PapaError(f"--launcher {args.launcher!r}: choose one of {', '.join(LAUNCHERS)}")
    for launcher, flags in (("local", LOCAL_FLAGS), ("slurm", SLURM_FLAGS)):
        given = [f"--{f}" for f in flags if getattr(args, f) is not None]
        if given and args.launcher != launcher:
            raise PapaError(f"{' '.join(given)} only appl{'y' if len(given) > 1 else 'ies'} to --launcher {launcher} (the launcher is "
                            f"{args.launcher}); add --launcher {launcher} or drop them")
    if args.nproc_per_node != 1 and args.launcher == "inline":
        raise PapaError("--nproc_per_node runs a stage under torchrun: use it with --launcher local or slurm")
    for flag in ("max_parallel", "cpus_per_stage", "gpus_per_stage", "slurm_time_min", "slurm_cpus_per_stage",
                 "slurm_array_parallelism", "nproc_per_node"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise PapaError(f"--{flag} must be at least 1 (got {value})")
    for flag in ("slurm_gpus_per_stage", "slurm_mem_gb"):
        value = getattr(args, flag)
        if value is not None and value < 0:
            raise PapaError(f"--{flag} must not be negative (got {value})")
    if args.slurm_additional_parameters is not None:
        slurm_additional_parameters(args.slurm_additional_parameters)
    if args.launcher == "slurm":
        from .slurm import slurm_sanity

        problem = slurm_sanity()
        if problem:
            raise PapaError(f"--launcher slurm: {problem}; run the sweep where Slurm is, or use --launcher local")


def slurm_additional_parameters(text):
    try:
        value = json.loads(text)
    except ValueError as err:
        raise PapaError(f"--slurm_additional_parameters is not JSON ({err}); give an object, e.g. "
                        "'{\"account\": \"my_lab\", \"qos\": \"normal\"}'") from None
    if not isinstance(value, dict):
        raise PapaError("--slurm_additional_parameters must be a JSON object of sbatch options, e.g. "
                        "'{\"account\": \"my_lab\"}'")
    return value


def make_launcher(args, root):
    """The launcher of SweepArguments `args` for a run whose folder is `root` (None: inline, papa.sweep.run's loop).

    Call it after every check and before any stage: a launcher that cannot work here is a PapaError."""
    check_launcher(args)
    if args.launcher == "inline":
        return None
    if args.launcher == "local":
        from .local import LocalLauncher

        return LocalLauncher(args.max_parallel or 1, args.cpus_per_stage, args.gpus_per_stage, args.nproc_per_node)
    from .slurm import SlurmLauncher

    cpus = args.slurm_cpus_per_stage or args.nproc_per_node
    parameters = {"time": args.slurm_time_min or DEFAULT_SLURM_TIME_MIN, "cpus_per_task": cpus,
                  "ntasks_per_node": 1, "nodes": 1}
    if args.slurm_partition:
        parameters["partition"] = args.slurm_partition
    if args.slurm_gpus_per_stage:
        parameters["gpus_per_node"] = args.slurm_gpus_per_stage
    if args.slurm_mem_gb:
        parameters["mem"] = f"{int(args.slurm_mem_gb * 1024)}M"
    if args.slurm_additional_parameters:
        parameters["additional_parameters"] = slurm_additional_parameters(args.slurm_additional_parameters)
    return SlurmLauncher(root, parameters, args.slurm_array_parallelism, args.nproc_per_node, cpus)
