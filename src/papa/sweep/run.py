"""The sweep, start to end: resolve the settings, lay out the stages, run (or skip) each, write the results.

    <output_dir>/avgs/   papa.cli.{glue,ner}_avgs (run_papa_*_avgs_creator.py)    → avgs.pt
    <output_dir>/sort/   papa.cli.{glue,ner} --sort_calculating                   → lambdas.npy, sorted_heads.json
    <output_dir>/k_<k>/  papa.cli.{glue,ner} --static_heads_num k                 → eval_results.json
    <output_dir>/uniform_k_<k>/, random_k_<k>/, mean_k_<k>/, ...   the --controls (papa.sweep.controls)
    with --seeds: k_<k>_seed_<s>/ (controls alike) per seed, and with --rank_per_seed sort_seed_<s>/
    <output_dir>/tokenized/   each split tokenised once, shared by the stages (papa.data.tokenized_cache)

The plan (papa.sweep.plan) resolves the model and task into everything the stages need; this module lays the
stages out, runs them and writes the results.

Every stage runs in a process of its own, as `python -m papa.cli.<command>` (what a user would
type) runs it: a fork of papa.fork_server, else a subprocess. So no torch state
leaks from one stage to the next and the sweep works from any install.

`--launcher local` / `slurm` (papa.sweep.launchers) run independent stages side by side, or each as a
Slurm job; the default runs them one at a time, here.
"""

import dataclasses
import os
import shlex
import time
from dataclasses import dataclass

from ..runs.arguments import parse_training_args
from ..errors import PapaError
from ..io import save_json
from ..data.tasks import KINDS
from ..data.tokenized_cache import CACHE_ENV
from . import controls, orderings
from ..run_folders import run_folder
from .child import start_fork_server
from ..method.rankers import LAMBDA_ON_DECODER, PAPER, RANKERS
from .defaults import (averaging_flags, check_data_source, check_passthrough, check_structured_controls,
                       constants_file, retrieval_flags, structured_flags)
from .plan import make_plan, model_display_name
from .launchers import check_launcher, make_launcher, run_scheduled, sweep_tasks
from ..reporting.results import RESULTS_FILES, remove_results, write_results
from .stages import Stage, human, removed_unless_finished, run_stage


def _count(n, unit):
    return f"{n:g} {unit}" + ("" if n == 1 else "s")


def make_stages(plan, args, passthrough, training_flags=None):
    """The averaging stage, the ranking stage(s), one probing stage per k (and seed), then the controls' stages,
    with their flags. `passthrough`: the flags the sweep does not know, for every training run as given;
    `training_flags`: them parsed once (parse_passthrough), for the averaging stage."""
    training_flags = training_flags or parse_passthrough(passthrough, plan.output_dir)
    every_stage = structured_flags(args) + retrieval_flags(args)  # the sweep's own flags that shape every stage
    avgs_module, train_module = (f"papa.cli.{name}" for name in KINDS[plan.task.kind]["cli"])
    avgs_script, train_script = KINDS[plan.task.kind]["scripts"]
    avgs_dir = os.path.join(plan.output_dir, "avgs")
    # a custom task (papa.data.custom) has no name to pass: each stage reads it off --train_file again
    source = ["--model_name_or_path", plan.model_path] + ([] if plan.task.custom else ["--task_name", plan.task.name])
    for flag, value in (("--data_dir", args.data_dir), ("--train_file", args.train_file),
                        ("--cache_dir", args.cache_dir)):
        if value is not None:
            source += [flag, os.path.abspath(value) if flag != "--cache_dir" else value]
    validation = ["--validation_file", os.path.abspath(args.validation_file)] if args.validation_file else []
    limits = []
    for flag, value in (("--max_train_samples", args.max_train_samples), ("--max_eval_samples", args.max_eval_samples)):
        if value is not None:
            limits += [flag, str(value)]

    # lm (papa.data.lm): contiguous blocks of text, the model's own LM head; no PAPA layout, no probe to train
    lm = plan.task.kind == "lm"
    avgs_args = [*source, "--max_length", str(plan.max_seq_length),
                 "--per_device_train_batch_size", str(plan.avgs_batch_size), "--output_dir", avgs_dir,
                 *([] if lm else ["--use_papa_preprocess", "true", "--pad_to_max_length"]), "--seed", str(args.seed)]
    avgs_args += every_stage + averaging_flags(training_flags)  # the data, model and precision the training runs get
    if args.max_train_samples is not None:  # average over the examples the probes are trained on
        avgs_args += ["--max_train_samples", str(args.max_train_samples)]
    avgs_outputs = [plan.constants_file]
    replacements = any({"--head_replacements", "--best_of"} & set(flags) for _, flags in plan.ranker_flags)
    if {"mean_corrected", "best_of"} & set(plan.controls) or replacements:  # the corrections (and mean outputs) come from this pass
        avgs_args.append("--mean_corrections")
        avgs_outputs += ["mean_outputs.pt", "mean_values.pt", "output_corrections.pt"]
    elif {"mean_output", "optimal_output"} & set(plan.controls):  # their artifact comes from the same pass
        avgs_args.append("--mean_outputs")
        avgs_outputs.append("mean_outputs.pt")

    def training_args(out, epochs, mode, static_dir=avgs_dir, seed=args.seed, train=True, evaluate=True):
        return [*source, *validation, *(["--do_train"] if train else []), *(["--do_eval"] if evaluate else []),
                "--max_seq_length", str(plan.max_seq_length),
                "--per_device_train_batch_size", str(plan.per_device_train_batch_size),
                "--per_device_eval_batch_size", str(plan.per_device_eval_batch_size),
                "--output_dir", out, "--overwrite_output_dir",  # the stage's log.txt is already there
                "--num_train_epochs", repr(epochs), "--learning_rate", repr(plan.learning_rate),
                "--lr_scheduler_type", "constant", "--evaluation_strategy", plan.evaluation_strategy,
                "--save_strategy", "no",
                *([] if lm else ["--use_papa_preprocess", "--use_freeze_extract_pooler",
                                 "true" if args.probe == "freeze_extract" else "false"]),
                "--static_heads_dir", static_dir, "--save_total_limit", "0", "--seed", str(seed),
                *limits, *mode, *every_stage, *passthrough]

    avgs_pt = os.path.join(avgs_dir, plan.constants_file)
    lm_eval = lm_eval_flags(plan, getattr(args, "lm_eval_data_dir", None) or args.data_dir)

    def probing(name, description, k, static_dir, ranking_dir, inputs, extra=(), seed=plan.seed, tag=None,
                train_constants=False):
        folder = os.path.join(plan.output_dir, name)
        # the probe trains (lm: nothing trains, the model's own head evaluates), or with train_constants the
        # probe and the replaced heads' constant matrices (lm: the matrices alone, on the LM loss)
        trains = train_constants or not lm
        trained = (["--grad_for_classifier_and_static_only", "true"] if train_constants
                   else [] if lm else ["--grad_for_classifier_only", "true"])
        mode = [*trained, "--static_heads_num", str(k), "--sorting_heads_dir", ranking_dir, *extra, *lm_eval]
        shown = (_count(plan.num_train_epochs, "epoch") if trains else "evaluation") + ("" if tag is None else f", seed {seed}")
        return Stage(name, f"{description} ({shown})", folder, train_module, train_script,
                     training_args(folder, plan.num_train_epochs, mode, static_dir, seed, train=trains), inputs,
                     ["eval_results.json"] + (["lm_eval_results.json"] if lm_eval else []))

    stages = [
        Stage("avgs", f"averaging attention over the {plan.task.name} training set (T={plan.max_seq_length})",
              avgs_dir, avgs_module, avgs_script, avgs_args, [], avgs_outputs),
    ]
    for ranker in plan.rankers:
        for seed in plan.ranking_seeds:
            sort_dir = plan.ranking_folder(seed, ranker)
            shown = f", seed {seed}" if plan.rank_per_seed else ""
            own = dict(plan.ranker_flags).get(ranker, ())
            flags = ["--sort_calculating", "True", *own]
            inputs = [avgs_pt] + ([os.path.join(avgs_dir, f) for f in ("mean_outputs.pt", "output_corrections.pt")]
                                  if {"--head_replacements", "--best_of"} & set(own) else [])
            epochs = _count(plan.sort_num_train_epochs, "epoch")
            ranking = orderings.describe(ranker, epochs, _count(args.ranker_steps, "step") if args.ranker_steps else epochs)
            parts = args.ranker_parts if RANKERS[ranker].parts else None
            for part in range(1, (parts or 0) + 1):  # loo in parts, each a stage; the ranking stage merges them
                part_dir = f"{sort_dir}_part_{part}"
                stages.append(Stage(os.path.basename(part_dir), f"ranking heads ({ranking}, part {part} of {parts}"
                                    f"{shown})", part_dir, train_module, train_script,
                                    training_args(part_dir, plan.sort_num_train_epochs,
                                                  [*flags, "--ranker_part", str(part), "--ranker_parts", str(parts)],
                                                  seed=seed, evaluate=False), inputs, ["ranker_part.pt"]))
            if parts:
                part_dirs = [f"{sort_dir}_part_{part}" for part in range(1, parts + 1)]
                flags = [*flags, "--ranker_merge", *part_dirs]
                inputs = inputs + [os.path.join(d, "ranker_part.pt") for d in part_dirs]
            stages.append(Stage(os.path.basename(sort_dir),
                                f"ranking heads ({ranking}{', merged' if parts else ''}"
                                f"{shown})", sort_dir, train_module, train_script,
                                training_args(sort_dir, plan.sort_num_train_epochs, flags, seed=seed,
                                              evaluate=RANKERS[ranker].in_trainer),  # the others: k_0 evaluates it
                                inputs, orderings.ranking_outputs(ranker, own)))
    for seed, tag in plan.seed_runs:
        sort_dir = plan.ranking_folder(seed)
        sorted_json = os.path.join(sort_dir, "sorted_heads.json")
        for k in plan.ks:
            stages.append(probing(run_folder(None, k, plan.total_heads, tag),
                                  f"probing with k={k} constant heads of {plan.total_heads}", k, avgs_dir, sort_dir,
                                  [avgs_pt] + ([sorted_json] if k > 0 else []), seed=seed, tag=tag))
    return stages + controls.control_stages(plan, probing)


def lm_eval_flags(plan, data_dir=None):
    """The probing runs' --lm_eval_tasks flags (an lm task only: the decoder's own LM head is what lm-eval scores);
    their data is read under --lm_eval_data_dir, which papa.sweep.grid sets to --data_dir as given (the runs' own
    --data_dir is the task's folder)."""
    if not plan.lm_eval_tasks:
        return []
    if plan.task.kind != "lm":
        raise PapaError(f"--lm_eval_tasks scores a decoder's own LM head: it needs an lm task (lm, lm_qnli, lm_mrpc), "
                        f"not {plan.task.name}")
    from ..evaluation import require_lm_eval

    require_lm_eval()
    limit = [] if plan.lm_eval_limit is None else ["--lm_eval_limit", str(plan.lm_eval_limit)]
    where = [] if data_dir is None else ["--lm_eval_data_dir", os.path.abspath(data_dir)]
    return ["--lm_eval_tasks", *plan.lm_eval_tasks, *limit, *where]


def parse_passthrough(passthrough, output_dir):
    """The flags the sweep does not know, parsed once as the training runs parse them (papa.runs.arguments): their
    (ModelArguments, DataArguments, TrainingArguments); a bad flag is the training runs' own error, now."""
    try:
        return parse_training_args([*passthrough, "--output_dir", output_dir])
    except PapaError as err:
        raise PapaError(f"the training runs would reject these flags: {err}") from None


def check_training_flags(stage):
    """Parse a training stage's flags as its command will, so a typo in a passed-through flag stops the
    sweep now rather than after the averaging stage."""
    try:
        parse_training_args(stage.args)
    except PapaError as err:
        raise PapaError(f"the training runs would reject these flags: {err}") from None


def stage_env(args, plan):
    """The stages' environment: progress as marker lines (papa.console), unbuffered, offline when all is local."""
    env = dict(os.environ, PAPA_PROGRESS="1", PYTHONUNBUFFERED="1")
    env[CACHE_ENV] = os.path.join(plan.output_dir, "tokenized")  # each split tokenised once per sweep
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    all_local = os.path.isdir(plan.model_path) and (plan.task.generator is not None or args.data_dir or args.train_file)
    if all_local:  # nothing to fetch: never wait on a network that may not be there
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.setdefault("HF_DATASETS_OFFLINE", "1")
    return env


def save_sweep_json(plan, args, passthrough):
    save_json({"model": plan.model_path, "task": plan.task.name, "kind": plan.task.kind, "layers": plan.layers,
               "heads_per_layer": plan.heads_per_layer, "static_heads_nums": plan.ks,
               "max_seq_length": plan.max_seq_length, "num_train_epochs": plan.num_train_epochs,
               "sort_num_train_epochs": plan.sort_num_train_epochs, "learning_rate": plan.learning_rate,
               "per_device_train_batch_size": plan.per_device_train_batch_size, "seed": args.seed,
               "controls": list(plan.controls), "rankers": list(plan.rankers), "probe": args.probe,
               "extra_args": passthrough,
               **({} if plan.seeds is None else {"seeds": list(plan.seeds), "rank_per_seed": plan.rank_per_seed})},
              os.path.join(plan.output_dir, "sweep.json"), indent=2)


@dataclass(frozen=True)
class Prepared:
    """A sweep checked and laid out, not yet run (papa.sweep.grid prepares every pair before running any)."""

    args: object  # SweepArguments
    plan: object  # papa.sweep.plan.Plan
    stages: list
    passthrough: list
    model_name: str


def prepare_sweep(args, task, passthrough=()):
    """Check everything and lay out the stages, before any heavy work: bad input raises PapaError here."""
    passthrough = shlex.split(args.extra_args) + list(passthrough)
    check_passthrough(passthrough)
    plan = dataclasses.replace(make_plan(args, task), constants_file=constants_file(args.constants))
    training_flags = parse_passthrough(passthrough, plan.output_dir)  # parsed once; a typo stops the sweep here
    check_data_source(task, args.data_dir, args.train_file, training_flags[1].dataset_name)
    check_structured_controls(plan)
    stages = make_stages(plan, args, passthrough, training_flags)
    for ranker in plan.rankers:  # each ranker's first ranking stage
        check_training_flags(next(s for s in stages if s.folder == plan.ranking_folder(plan.ranking_seeds[0], ranker)))
    return Prepared(args, plan, stages, passthrough, model_display_name(args.model_name_or_path))


def begin_sweep(prepared):
    """Before a sweep's stages: its header line, sweep.json, the controls' artifacts; (start time, the stages' env,
    whether any stage is to be run)."""
    args, plan, model_name = prepared.args, prepared.plan, prepared.model_name
    os.makedirs(plan.output_dir, exist_ok=True)
    shown = f"; controls: {' '.join(plan.controls)}" if plan.controls else ""
    print(f"[sweep] PAPA sweep: {model_name}, {plan.layers} layers x {plan.heads_per_layer} heads = "
          f"{plan.total_heads}; task {plan.task.name}; ranked by {' '.join(plan.rankers)}; "
          f"k = {' '.join(map(str, plan.ks))}{shown}; output in {plan.output_dir}", flush=True)
    if plan.causal and PAPER in plan.rankers:
        print(f"[sweep] {LAMBDA_ON_DECODER}", flush=True)
    save_sweep_json(plan, args, prepared.passthrough)
    controls.write_artifacts(plan.output_dir, plan.controls, plan.layers, plan.heads_per_layer, plan.max_seq_length,
                             args.seed, causal=plan.causal, group=plan.unit_size)
    pending = any(stage.why_not_done(stage.fingerprint(plan.output_dir)) for stage in prepared.stages)
    if pending:
        remove_results(plan.output_dir)  # they describe stages about to be redone; written again at the end
    return time.monotonic(), stage_env(args, plan), pending


def finish_sweep(prepared, start):
    """After a sweep's stages: its results, printed and written; returns the papa.reporting.results.Results."""
    plan = prepared.plan
    results = write_results(plan, prepared.model_name, prepared.stages)
    print("\n" + results.markdown, flush=True)
    if results.warning:
        print(f"[sweep] warning: {results.warning}", flush=True)
    written = [name for name in RESULTS_FILES if os.path.isfile(os.path.join(plan.output_dir, name))]
    print(f"[sweep] finished in {human(time.monotonic() - start)}: {', '.join(written)} in {plan.output_dir}",
          flush=True)
    return results


def execute_sweep(prepared, launcher=None):
    """Run (or resume) a prepared sweep: its stages, then its results; returns the papa.reporting.results.Results.

    `launcher`: None runs the stages one at a time (inline); else a papa.sweep.launchers launcher."""
    plan = prepared.plan
    start, env, pending = begin_sweep(prepared)
    if launcher is None:
        if pending:
            start_fork_server()  # the stages' imports (papa.fork_server), while the sweep writes its files
        for index, stage in enumerate(prepared.stages, 1):
            run_stage(stage, index, len(prepared.stages), plan.output_dir, env, verbose=prepared.args.verbose)
    else:
        tasks = sweep_tasks("", prepared.stages, plan.output_dir, env, prepared.args.verbose)
        errors = run_scheduled(tasks, launcher)
        if errors:
            raise PapaError(errors[""])
    return finish_sweep(prepared, start)


def run_sweep(args, task, passthrough=()):
    """Run (or resume) the PAPA sweep for SweepArguments `args` on `task` (a TaskSpec); returns results.csv's path.

    `passthrough`: flags for every training run, after the sweep's own (so they override its defaults).
    """
    check_launcher(args)
    prepared = prepare_sweep(args, task, passthrough)
    with removed_unless_finished(prepared.plan.output_dir):  # a failed first run leaves no folder behind
        execute_sweep(prepared, make_launcher(args, prepared.plan.output_dir))
    return os.path.join(prepared.plan.output_dir, "results.csv")
