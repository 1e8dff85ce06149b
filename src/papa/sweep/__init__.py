"""The whole PAPA method for one model and task, resumable: averages → head ranking → probing for each k.

    arguments.py the sweep's flags (SweepArguments)
    defaults.py  hyper-parameters per task, which k to probe, the flags the sweep owns
    stages.py    a stage: its command, its stamp and fingerprint (resuming), running it
    child.py     a stage's process: log.txt, its progress line, the tail of a failure
    controls.py  the control runs beside PAPA's: uniform, random_order, mean_output, zero_output, first_token,
                 trained_constant
    results.py   eval_results.json of every k → results.csv, results.md, the figures
    intervals.py, aggregate.py   the paired bootstrap; the seeds' tables merged with their intervals
    orderings.py several rankers and random orders: each ranker against each order and their mean
    differences.py  each control's paired difference from PAPA;  claims.py  the paper's claims as a table
    stability.py the rankings' agreement between seeds and between tasks (ranking_stability.csv)
    compare.py   papa-compare: the paired difference between two finished sweeps
    run.py       run_sweep: settings → stages → results
    grid.py      run_grid: every model x task, each a sweep in its own folder, then the summary
    summary.py   the grid's summary.csv, summary.md, summary.png
    launchers/   --launcher local (stages side by side) and slurm (a Slurm job per stage): docs/scale_out.md

Entry points: `papa-sweep` (papa.cli.sweep, papa_scripts/run_papa_sweep.py), `papa-compare` (papa.cli.compare).
"""

from .grid import run_grid
from .run import run_sweep

__all__ = ["run_grid", "run_sweep"]
