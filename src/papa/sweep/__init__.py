"""The whole PAPA method for one model and task, resumable: averages → head ranking → probing for each k.

    defaults.py  hyper-parameters per task, which k to probe, the flags the sweep owns
    stages.py    a stage: its command, its stamp and fingerprint (resuming), running it
    child.py     a stage's process: log.txt, its progress line, the tail of a failure
    results.py   eval_results.json of every k → results.csv, results.md, the figures
    run.py       run_sweep: settings → stages → results

Entry point: `papa-sweep` (papa.cli.sweep, papa_scripts/run_papa_sweep.py).
"""

from .run import run_sweep

__all__ = ["run_sweep"]
