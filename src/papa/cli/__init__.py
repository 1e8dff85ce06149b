"""The PAPA commands, one module each, each with `main(argv=None)`:

    papa-glue-avgs   papa.cli.glue_avgs   papa_scripts/run_papa_glue_avgs_creator.py   step 1, sequence tasks
    papa-glue        papa.cli.glue        papa_scripts/run_papa_glue.py                steps 2-3, sequence tasks
    papa-ner-avgs    papa.cli.ner_avgs    papa_scripts/run_papa_ner_avgs_creator.py    step 1, token tasks
    papa-ner         papa.cli.ner         papa_scripts/run_papa_ner.py                 steps 2-3, token tasks
    papa-sweep       papa.cli.sweep       papa_scripts/run_papa_sweep.py               the whole method
    papa-benchmark   papa.cli.benchmark   papa_scripts/benchmark_papa.py               speed and memory

`python -m papa.cli.<module>` (or `python -m papa <command>`) runs one without the console scripts:
that is how the sweep runs its stages, so it works from any install. The task kind a script serves
is fixed here; `--task_name` is resolved once, into a `papa.tasks.TaskSpec`, and passed down.
"""

from ..console import setup_console
from ..errors import run_cli


def command(run, argv=None):
    """Every command's entry: quiet the console (papa.console), run `run(argv)`, clean errors (papa.errors)."""
    setup_console()
    return run_cli(run, argv)


def averaging_main(kind, argv=None):
    """run_papa_glue_avgs_creator.py / run_papa_ner_avgs_creator.py."""
    def run(argv):
        from ..arguments import parse_averaging_args
        from ..runs import run_averaging
        from ..tasks import get_task

        args = parse_averaging_args(argv)
        run_averaging(get_task(args.task_name, kind), args)

    return command(run, argv)


def probing_main(kind, argv=None):
    """run_papa_glue.py / run_papa_ner.py."""
    def run(argv):
        from ..arguments import parse_training_args
        from ..runs import run_probing
        from ..tasks import get_task

        model_args, data_args, training_args = parse_training_args(argv)
        run_probing(get_task(data_args.task_name, kind), model_args, data_args, training_args)

    return command(run, argv)
