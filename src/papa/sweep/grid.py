"""Several models x tasks in one run: a sweep per pair, each in its own resumable folder, then a summary.

    <output_dir>/<model>/<task>/                  one complete sweep (papa.sweep.run), as a single run makes it
    <output_dir>/summary.csv, summary.md, summary.png   papa.reporting.summary

One model and one task is a plain sweep, as before the grid existed. With several, every pair is
checked and laid out before the first stage runs (task names, model configs, data folders, flags),
so bad input stops the grid at once; a pair that fails while running is reported in the summary,
the others still run, and the grid ends with one error line (exit status 2). Re-running skips what
is finished, pair by pair and stage by stage.

With several tasks `--data_dir` is a root holding one folder per task under its official name
(CoLA, SST-2, MRPC, QQP, STS-B, MNLI, QNLI, RTE, WNLI; conll2003 for ner, pos and chunk), directly
or one level down: `../shared/data` holds `glue/CoLA` and `conll2003`.
"""

import dataclasses
import os
import sys
import time

from ..errors import PapaError
from ..data.custom import resolve_task
from ..data.task_folders import resolve_data_dir
from .launchers import check_launcher, make_launcher, run_scheduled, sweep_tasks
from .run import begin_sweep, execute_sweep, finish_sweep, model_display_name, prepare_sweep, run_sweep
from .stages import RunFailed, human, removed_unless_finished
from ..reporting.summary import PairOutcome, write_summary

def model_folder_name(model_name_or_path):
    """A pair folder's model part: the bundled MiniLM's name, a folder's name, or a hub name's last part."""
    if model_name_or_path is None:
        return "all-MiniLM-L6-v2"
    return os.path.basename(os.path.normpath(model_name_or_path)) or "model"


def check_grid_flags(args, tasks):
    if len(tasks) > 1:
        for flag in ("train_file", "validation_file"):
            if getattr(args, flag):
                raise PapaError(f"--{flag} names one task's file; with several tasks use --data_dir (a root with a "
                                "folder per task)")
    folders = [model_folder_name(m) for m in args.model_names]
    clash = sorted({f for f in folders if folders.count(f) > 1})
    if clash:
        raise PapaError(f"several models would share the folder {clash[0]!r} under --output_dir; give their folders "
                        "distinct names")


def pair_name(pair):
    return f"{pair.model_name} x {pair.plan.task.name}"


def pair_outcome(pair):
    plan = pair.plan
    return PairOutcome(pair.model_name, plan.task, plan.total_heads, plan.ks, plan.controls)


def report_failure(outcome, pair, err):
    """A failed pair: reported, recorded in its outcome; the other pairs go on."""
    outcome.error = str(err)
    print(f"[grid] {pair_name(pair)} failed: {err}", file=sys.stderr, flush=True)


def run_pairs(pairs):
    """The inline grid: each pair's sweep in turn, its stages one at a time; [PairOutcome]."""
    outcomes = []
    for index, pair in enumerate(pairs, 1):
        print(f"\n[grid] {index}/{len(pairs)} {pair_name(pair)}", flush=True)
        outcome = pair_outcome(pair)
        try:
            outcome.results = execute_sweep(pair)
        except PapaError as err:  # a failed stage: report it, go on with the other pairs
            report_failure(outcome, pair, err)
        outcomes.append(outcome)
    return outcomes


def run_pairs_launched(pairs, launcher):
    """Every pair's stages through one `launcher` (papa.sweep.launchers), stages of different pairs side by side;
    then each pair's results. [PairOutcome]"""
    starts, tasks = {}, []
    for index, pair in enumerate(pairs, 1):
        print(f"\n[grid] {index}/{len(pairs)} {pair_name(pair)}", flush=True)
        starts[pair_name(pair)], env, _ = begin_sweep(pair)
        tasks += sweep_tasks(pair_name(pair), pair.stages, pair.plan.output_dir, env, pair.args.verbose)
    print(flush=True)
    errors = run_scheduled(tasks, launcher)
    outcomes = []
    for pair in pairs:
        outcome = pair_outcome(pair)
        try:
            if pair_name(pair) in errors:
                raise PapaError(errors[pair_name(pair)])
            print(f"\n[grid] results of {pair_name(pair)}", flush=True)
            outcome.results = finish_sweep(pair, starts[pair_name(pair)])
        except PapaError as err:
            report_failure(outcome, pair, err)
        outcomes.append(outcome)
    return outcomes


def run_grid(args, passthrough=()):
    """Run the sweep for every model x task of SweepArguments `args` (one pair: a plain sweep, as before)."""
    # no --task_name but --train_file: a custom sequence task read off the file (papa.data.custom)
    check_launcher(args)
    tasks = [resolve_task(None, name, args.train_file, cache_dir=args.cache_dir) for name in args.task_names]
    tasks = list({t.name: t for t in tasks}.values())
    models = args.model_names
    # the lm-eval tasks read the root as given, before it becomes the sweep's task folder (papa.evaluation.data)
    args = dataclasses.replace(args, lm_eval_data_dir=args.lm_eval_data_dir or args.data_dir)
    if len(tasks) == 1 and len(models) == 1:
        if args.data_dir and not args.train_file:  # a root works for one task too
            args = dataclasses.replace(args, data_dir=resolve_data_dir(args.data_dir, tasks[0], False))
        return run_sweep(args, tasks[0], passthrough)

    check_grid_flags(args, tasks)
    output_dir = os.path.abspath(args.output_dir or os.path.join("outputs", "papa_grid"))
    data_dirs = {t.name: resolve_data_dir(args.data_dir, t, len(tasks) > 1) for t in tasks}
    pairs = []  # every pair prepared (checked) before any runs
    for model in models:
        for task in tasks:
            pair_args = dataclasses.replace(
                args, model_name_or_path=model, task_name=task.name, data_dir=data_dirs[task.name],
                output_dir=os.path.join(output_dir, model_folder_name(model), task.name))
            try:
                pairs.append(prepare_sweep(pair_args, task, passthrough))
            except PapaError as err:
                raise PapaError(f"{model_display_name(model)} x {task.name}: {err}") from None

    with removed_unless_finished(output_dir):  # a failed first run leaves no folder behind
        return run_prepared_pairs(args, pairs, output_dir, len(models), len(tasks))


def run_prepared_pairs(args, pairs, output_dir, n_models, n_tasks):
    """The grid's pairs, prepared, run; then the summary. Returns summary.csv's path."""
    launcher = make_launcher(args, output_dir)  # None: inline
    os.makedirs(output_dir, exist_ok=True)
    print(f"[grid] {n_models} model(s) x {n_tasks} task(s) = {len(pairs)} sweeps; output in {output_dir}",
          flush=True)
    start = time.monotonic()
    outcomes = run_pairs(pairs) if launcher is None else run_pairs_launched(pairs, launcher)

    markdown = write_summary(output_dir, outcomes)
    print("\n" + markdown, flush=True)
    failed = [o for o in outcomes if o.results is None]
    png = os.path.isfile(os.path.join(output_dir, "summary.png"))
    print(f"[grid] finished in {human(time.monotonic() - start)}: summary.csv, summary.md"
          f"{', summary.png' if png else ''} in {output_dir}", flush=True)
    if failed:
        names = ", ".join(f"{o.model} x {o.task.name}" for o in failed)
        brief = f"{len(failed)} of {len(outcomes)} sweeps failed ({names}); the lines above say why"
        raise RunFailed(f"{len(failed)} of {len(outcomes)} sweeps failed ({names}); summary.md lists why and each "
                        "stage's log.txt has the details. Fix the cause and re-run: finished stages are skipped", brief)
    return os.path.join(output_dir, "summary.csv")
