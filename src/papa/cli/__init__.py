"""The PAPA commands, one module each, each with `main(argv=None)`:

    papa-glue-avgs   papa.cli.glue_avgs   papa_scripts/run_papa_glue_avgs_creator.py   step 1, sequence tasks
    papa-glue        papa.cli.glue        papa_scripts/run_papa_glue.py                steps 2-3, sequence tasks
    papa-ner-avgs    papa.cli.ner_avgs    papa_scripts/run_papa_ner_avgs_creator.py    step 1, token tasks
    papa-ner         papa.cli.ner         papa_scripts/run_papa_ner.py                 steps 2-3, token tasks
    papa-sweep       papa.cli.sweep       papa_scripts/run_papa_sweep.py               the whole method
    papa-benchmark   papa.cli.benchmark   papa_scripts/benchmark_papa.py               speed and memory
    papa-compare     papa.cli.compare                                                  two finished sweeps' difference

`python -m papa.cli.<module>` (or `python -m papa <command>`) runs one without the console scripts:
that is how the sweep runs its stages, so it works from any install. The task kind a script serves
is fixed here; `--task_name` (or, for data of your own, the files) is resolved once, into a
`papa.data.tasks.TaskSpec` (papa.data.custom.resolve_task), and passed down.
"""

import sys

from .. import hugepages, threads
from ..console import setup_console
from ..errors import run_cli


def command(run, argv=None, fit_threads=True):
    """Every command's entry: huge pages (papa.hugepages, before any model allocates; the user's own setting
    kept), torch's threads fitted to the free cores (papa.threads; not for the sweep, whose stages fit their own,
    nor the benchmark, which has --threads), quiet the console (papa.console), run `run(argv)`, clean errors
    (papa.errors)."""
    hugepages.enable()
    note = threads.fit_to_free_cores() if fit_threads else None
    if note:
        print(f"[papa] {note}", file=sys.stderr, flush=True)
    setup_console()
    return run_cli(run, argv)


def averaging_main(kind, argv=None):
    """run_papa_glue_avgs_creator.py / run_papa_ner_avgs_creator.py."""
    def run(argv):
        from ..runs.averaging_arguments import parse_averaging_args
        from ..data.custom import resolve_task
        from ..runs.run import run_averaging

        args = parse_averaging_args(argv)
        run_averaging(resolve_task(kind, args.task_name, args.train_file, args.dataset_name, args.dataset_config_name,
                                   args.cache_dir, args.text_column_name, args.label_column_name), args)

    return command(run, argv)


def probing_main(kind, argv=None):
    """run_papa_glue.py / run_papa_ner.py."""
    def run(argv):
        from ..runs.arguments import parse_training_args
        from ..data.custom import resolve_task
        from ..runs.run import run_probing

        model_args, data_args, training_args = parse_training_args(argv)
        task = resolve_task(kind, data_args.task_name, data_args.train_file, data_args.dataset_name,
                            data_args.dataset_config_name, model_args.cache_dir, data_args.text_column_name,
                            data_args.label_column_name)
        run_probing(task, model_args, data_args, training_args)

    return command(run, argv)
