"""The whole PAPA method for one model and task, resumable: averages → head ranking → probing for each k.

    arguments.py the sweep's flags (SweepArguments)
    defaults.py  hyper-parameters per task, which k to probe, the flags the sweep owns
    stages.py    a stage: its command, its stamp and fingerprint (resuming), running it
    child.py     a stage's process: log.txt, its progress line, the tail of a failure
    controls.py  the control runs beside PAPA's: uniform, random_order, mean_output, zero_output, first_token,
                 trained_constant
    orderings.py several rankers and random orders: their controls, the ranking stages' flags and files
    plan.py      a sweep's settings resolved: model, task, ks, controls, rankers, folders (Plan)
    run.py       run_sweep: settings → stages → results
    grid.py      run_grid: every model x task, each a sweep in its own folder, then the summary
    launchers/   --launcher local (stages side by side) and slurm (a Slurm job per stage): docs/scale_out.md

What the runs found (results.md, summary.md, the intervals, the figures, papa-compare) is papa.reporting's; where
each run lives, which both read, is papa.run_folders'.

Entry points: `papa-sweep` (papa.cli.sweep, papa_scripts/run_papa_sweep.py), `papa-compare` (papa.cli.compare).
"""

from .grid import run_grid
from .run import run_sweep

__all__ = ["run_grid", "run_sweep"]
