"""What runs inside a stage's job (a Slurm job, or a thread of the local launcher): the stage as inline, maybe
under torchrun. Kept small: a Slurm job unpickles it, then runs the stage's own process."""

import os

from ..child import fork_from_this_process
from ..stages import execute_stage, failure


def torchrun_command(command, nproc_per_node):
    """`python -m <module> args` as N data-parallel processes under torchrun; None (the command as is) for N <= 1."""
    if not nproc_per_node or nproc_per_node <= 1:
        return None
    python, _, module, *args = command
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc_per_node}",
            "-m", module, *args]


def run_in_slurm_job(stage, output_dir, env_overrides, nproc_per_node=1):
    """The body of a stage's Slurm job: the job's environment (Slurm's, its GPUs) with the sweep's variables on
    top; the stamp names the job. A failure raises, so Slurm and submitit see the job fail too."""
    fork_from_this_process()
    env = {**os.environ, **env_overrides}
    run = execute_stage(stage, output_dir, env, lambda done, total: None, launcher="slurm",
                        job_id=os.environ.get("SLURM_JOB_ID"), command=torchrun_command(stage.command, nproc_per_node))
    if not run.ok:
        raise failure(stage, run)
    return run.seconds
