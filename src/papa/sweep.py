"""The whole PAPA method for one model and task, resumable: averages → head ranking → probing for each k.

`run_sweep` runs the four original scripts as subprocesses (`sys.executable papa_scripts/<script>.py
...`), exactly as a user would type them, so no torch state leaks from one stage to the next:

    <output_dir>/avgs/      run_papa_{glue,ner}_avgs_creator.py          → avgs.pt
    <output_dir>/sort/      run_papa_{glue,ner}.py --sort_calculating    → lambdas.npy, sorted_heads.json
    <output_dir>/k_<k>/     run_papa_{glue,ner}.py --static_heads_num k  → eval_results.json

then collects every `k_<k>/eval_results.json` into `results.csv` / `results.md` and draws
`results.png`, `lambdas.png` and `constant_matrices.png` (see papa.plots).

Resuming and stale results: each stage folder gets a stamp, `stage.json`, written (atomically) only
after the stage succeeded. It holds a fingerprint of the stage's inputs: its command line (with the
output folder written as `<output_dir>`, so a moved sweep stays valid) and the sha256 of the
artifacts it reads (avgs.pt for the ranking and probing runs, sorted_heads.json for probing runs
with k > 0). A stage is done iff its stamp matches the current fingerprint and its output files
exist; otherwise its folder is emptied and the stage runs again. So a changed avgs.pt redoes the
ranking and every probing run, a deleted `k_<k>/` redoes only that k, and a changed
`--num_train_epochs` redoes the training stages.
"""

import csv
import hashlib
import io
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from . import data
from .errors import PapaError, check_positive
from .io import save_json, save_text

SCRIPTS_DIR = Path(__file__).resolve().parents[2] / "papa_scripts"
STAMP = "stage.json"
STAMP_VERSION = 1
OUTPUT_PLACEHOLDER = "<output_dir>"

# Main metric(s) per task, without the "eval_" prefix; the first one is plotted.
MAIN_METRICS = {
    "cola": ["matthews_correlation"],
    "sst2": ["accuracy"],
    "qnli": ["accuracy"],
    "rte": ["accuracy"],
    "wnli": ["accuracy"],
    "mnli": ["accuracy", "mnli-mm_accuracy"],
    "repeat": ["accuracy"],
    "mrpc": ["f1", "accuracy"],
    "qqp": ["f1", "accuracy"],
    "stsb": ["pearson", "spearmanr"],
    "ner": ["f1"],
    "pos": ["f1"],
    "chunk": ["f1"],
}

# eval_* keys that describe the run rather than the model's quality
NON_METRIC_SUFFIXES = ("runtime", "samples_per_second", "steps_per_second", "samples", "loss", "epoch")

# The original README's hyper-parameters (BERT-base, GLUE and CoNLL).
README_DEFAULTS = {
    "max_seq_length": 64,
    "num_train_epochs": 15.0,
    "sort_num_train_epochs": None,  # = num_train_epochs
    "learning_rate": 2e-5,
    "per_device_train_batch_size": 16,
    "per_device_eval_batch_size": 16,
    "avgs_batch_size": 8,
    "evaluation_strategy": "epoch",
}

# The built-in synthetic `repeat` task on the bundled MiniLM, for the README's main command (this
# whole sweep: averages, ranking run, 5 probing runs) to finish well under 15 minutes on a 2-core
# CPU. Measured on that machine: averages 19 s, ranking run 38 s, each probing run 38-42 s, the
# whole sweep 4.3 min; k=0 accuracy 0.888. Contention from other processes easily doubles CPU
# times, hence the margin.
# - T=32: a repeat sentence is at most 15 tokens and a single sentence gets T/2 = 16 positions in
#   the PAPA layout.
# - lr 1e-3, constant: the README's 2e-5 is for 15 epochs; a frozen encoder's probe takes a larger
#   step (the probe alone, on cached MiniLM states: 0.78 / 0.86 / 0.90 after 1 / 2 / 3 epochs).
# - the ranking run (backward pass through the encoder for the λ): 1 epoch.
# - evaluation only at the end of each run; batch 32 for the (gradient-free) averaging pass.
REPEAT_DEFAULTS = {
    "max_seq_length": 32,
    "num_train_epochs": 2.0,
    "sort_num_train_epochs": 1.0,
    "learning_rate": 1e-3,
    "per_device_train_batch_size": 16,
    "per_device_eval_batch_size": 64,
    "avgs_batch_size": 32,
    "evaluation_strategy": "no",
}

# Flags the sweep sets itself per stage; passing them through would break the method.
RESERVED_FLAGS = {
    "--output_dir", "--static_heads_dir", "--sorting_heads_dir", "--static_heads_num", "--sort_calculating",
    "--grad_for_classifier_only", "--grad_for_classifier_and_static_only", "--do_train", "--do_eval",
    "--task_name", "--model_name_or_path", "--use_freeze_extract_pooler", "--use_papa_preprocess",
    "--max_seq_length", "--data_dir", "--train_file", "--validation_file",
}


# ----------------------------------------------------------------------------- small pure helpers


def default_static_heads_nums(total_heads):
    """0, ½, ⅞, 15⁄16 and all of the heads (rounded half up): 72 → [0, 36, 63, 68, 72]."""
    if isinstance(total_heads, bool) or not isinstance(total_heads, int) or total_heads < 1:
        raise PapaError(f"a model needs at least one attention head; got {total_heads!r}")
    values = [math.floor(total_heads * f + 0.5) for f in (0, 1 / 2, 7 / 8, 15 / 16, 1)]
    return sorted(set(values))


def task_kind(task_name):
    """(canonical task name, "sequence" | "token"); an unknown name lists the valid ones."""
    name = data.canonical_task_name(task_name, data.SEQUENCE_TASKS + data.TOKEN_TASKS)
    return name, ("token" if name in data.TOKEN_TASKS else "sequence")


def main_metrics(task_name):
    """The task's main metric names (without "eval_"), the first one being the headline."""
    return list(MAIN_METRICS[task_kind(task_name)[0]])


def chance_level(task_name, metric):
    """The metric's value for a guess ignoring the input, where obvious: MCC 0; accuracy 1/classes on the
    balanced synthetic task (real GLUE dev sets are not balanced, so none there); else None."""
    task = task_kind(task_name)[0]
    if metric == "matthews_correlation":
        return 0.0
    if metric == "accuracy" and task == "repeat":
        return 1.0 / len(data.glue_label_names(task))
    return None


def _epochs(n):
    return f"{n:g} epoch" + ("" if n == 1 else "s")


def is_quality_metric(key):
    return key.startswith("eval_") and not key.endswith(NON_METRIC_SUFFIXES)


def sha256_file(path, chunk=1 << 20):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def relative_change(value, reference):
    """(value - reference) / |reference| as a fraction; None when undefined (no or zero reference)."""
    if value is None or reference is None or reference == 0 or any(
            isinstance(v, float) and math.isnan(v) for v in (value, reference)):
        return None
    return (value - reference) / abs(reference)


# ----------------------------------------------------------------------------- results table


def read_eval_results(folder):
    path = os.path.join(folder, "eval_results.json")
    try:
        with open(path) as f:
            results = json.load(f)
    except (OSError, ValueError) as err:
        raise PapaError(f"cannot read {path} ({err}); delete {folder} to redo that run") from None
    if not isinstance(results, dict):
        raise PapaError(f"{path} is not a JSON object of metrics; delete {folder} to redo that run")
    return results


def build_results(k_results, task_name, total_heads):
    """The results table from {k: eval_results dict}.

    Returns (columns, rows): one row per k (ascending) with `k`, `fraction_constant` (k / total
    heads), every eval_* quality metric (main ones first), and for each main metric
    `rel_change_eval_<metric>` = (value - value at k=0) / |value at k=0| as a fraction (None
    without a k=0 run or when its value is 0).
    """
    mains = [f"eval_{m}" for m in main_metrics(task_name)]
    seen = []
    for results in k_results.values():
        for key in results:
            if is_quality_metric(key) and key not in seen:
                seen.append(key)
    metric_columns = [m for m in mains if m in seen] + sorted(k for k in seen if k not in mains)
    change_columns = [f"rel_change_{m}" for m in mains if m in seen]
    reference = k_results.get(0, {})
    rows = []
    for k in sorted(k_results):
        results = k_results[k]
        row = {"k": k, "fraction_constant": k / total_heads}
        for column in metric_columns:
            row[column] = results.get(column)
        for column in change_columns:
            metric = column[len("rel_change_"):]
            row[column] = relative_change(results.get(metric), reference.get(metric))
        rows.append(row)
    return ["k", "fraction_constant"] + metric_columns + change_columns, rows


def results_csv(columns, rows):
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row[c] is None else repr(row[c]) if isinstance(row[c], float) else row[c]
                         for c in columns])
    return out.getvalue()


def _md_header(column):
    if column == "fraction_constant":
        return "constant heads (fraction)"
    if column.startswith("rel_change_eval_"):
        return f"{column[len('rel_change_eval_'):]} change vs k=0"
    return column[len("eval_"):] if column.startswith("eval_") else column


def _md_cell(column, value):
    if value is None:
        return "–"
    if column.startswith("rel_change_"):
        return f"{100 * value:+.1f}%"
    if column == "fraction_constant":
        return f"{value:.3f}"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


CHANCE_MARGIN = 0.05  # k=0 closer than this to chance: the curve is not interpretable


def chance_warning(task_name, rows):
    """A warning when the k=0 probe is not clearly above chance (None otherwise or when unknown)."""
    metric = main_metrics(task_name)[0]
    chance = chance_level(task_name, metric)
    reference = next((r.get(f"eval_{metric}") for r in rows if r["k"] == 0), None)
    if chance is None or reference is None or reference - chance >= CHANCE_MARGIN:
        return None
    return (f"at k=0 (no constant head) {metric} is {reference:.4f}, less than {CHANCE_MARGIN:g} above chance "
            f"({chance:g}): the probe learned (almost) nothing, so the curve says nothing about attention. "
            "Train longer (--num_train_epochs), on more data, or probe a task the model encodes.")


def results_markdown(columns, rows, title, total_heads, warning=None):
    lines = [f"# {title}", ""]
    if warning:
        lines += [f"**Warning:** {warning}", ""]
    lines.append("| " + " | ".join(_md_header(c) for c in columns) + " |")
    lines.append("|" + "|".join(" ---: " for _ in columns) + "|")
    for row in rows:
        lines.append("| " + " | ".join(_md_cell(c, row[c]) for c in columns) + " |")
    lines += ["", f"k = number of the model's {total_heads} attention heads replaced by constant matrices "
                  "(the k ranked most constant-friendly in sort/sorted_heads.json). "
                  "\"change vs k=0\" = (value − value at k=0) / |value at k=0|, in percent "
                  "(results.csv: the same as a fraction, columns rel_change_*).", ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- stages


class Stage:
    """One subprocess run: its folder, command, consumed artifacts and expected outputs."""

    def __init__(self, name, description, folder, command, inputs, outputs):
        self.name, self.description, self.folder = name, description, folder
        self.command, self.inputs, self.outputs = command, inputs, outputs

    def fingerprint(self, output_dir):
        """The stage's inputs: its command line (output folder abstracted) and sha256 of consumed files."""
        root = os.path.abspath(output_dir)
        argv = [OUTPUT_PLACEHOLDER + a[len(root):] if a == root or a.startswith(root + os.sep) else a
                for a in self.command[1:]]  # not the interpreter
        argv[0] = os.path.basename(argv[0])  # the script, wherever the checkout lives
        inputs = {}
        for path in self.inputs:
            if not os.path.isfile(path):
                return None  # an input is missing: cannot be up to date (the earlier stage failed?)
            inputs[os.path.relpath(path, root)] = sha256_file(path)
        return {"version": STAMP_VERSION, "argv": argv, "inputs": inputs}

    def why_not_done(self, fingerprint):
        """None when the stage is done (stamp matches, outputs present), else the reason to run it."""
        stamp_path = os.path.join(self.folder, STAMP)
        if not os.path.isfile(stamp_path):
            started = os.path.isdir(self.folder) and os.listdir(self.folder)
            return "unfinished earlier" if started else "new"
        try:
            with open(stamp_path) as f:
                stamp = json.load(f)
        except (OSError, ValueError):
            return "unreadable stage.json"
        if fingerprint is None:
            return "an input file is missing"
        if not isinstance(stamp, dict) or stamp.get("fingerprint") != fingerprint:
            return "inputs changed"
        missing = [o for o in self.outputs if not os.path.isfile(os.path.join(self.folder, o))]
        if missing:
            return f"{', '.join(missing)} missing"
        return None


def _human(seconds):
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _run_stage(stage, index, total, output_dir, env, log):
    prefix = f"[sweep] {index}/{total} {stage.description}"
    reason = stage.why_not_done(stage.fingerprint(output_dir))
    if reason is None:
        log(f"{prefix}: up to date, skipped")
        return False
    log(f"{prefix} ..." + ("" if reason == "new" else f" (redo: {reason})"))
    log("[sweep]   $ " + " ".join(shlex.quote(a) for a in stage.command))
    if os.path.isdir(stage.folder):
        shutil.rmtree(stage.folder)  # no stale file survives a redo, whatever the new run writes
    os.makedirs(stage.folder)
    start = time.monotonic()
    returncode = subprocess.call(stage.command, env=env)
    if returncode != 0:
        raise PapaError(f"{stage.description} failed (exit status {returncode}; its output is above). "
                        f"Fix the cause and re-run the sweep: finished stages are kept")
    missing = [o for o in stage.outputs if not os.path.isfile(os.path.join(stage.folder, o))]
    if missing:
        raise PapaError(f"{stage.description} exited normally but did not write {', '.join(missing)} "
                        f"in {stage.folder}")
    # the stamp last: only a finished stage has one; recomputed so it names what was actually read
    stamp = {"fingerprint": stage.fingerprint(output_dir), "stage": stage.name,
             "command": stage.command, "seconds": round(time.monotonic() - start, 1),
             "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
    save_json(stamp, os.path.join(stage.folder, STAMP), indent=2)
    log(f"{prefix}: done in {_human(stamp['seconds'])}")
    return True


# ----------------------------------------------------------------------------- the sweep


def _model_heads(model_path):
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(model_path)
    except (OSError, ValueError) as err:
        raise PapaError(f"cannot load the config of model {model_path!r}: {str(err).splitlines()[0]}") from None
    layers, heads = getattr(config, "num_hidden_layers", None), getattr(config, "num_attention_heads", None)
    if not layers or not heads:
        raise PapaError(f"{model_path}: its config names no num_hidden_layers / num_attention_heads")
    return layers, heads


def _check_passthrough(extra_args):
    for arg in extra_args:
        name = arg.split("=", 1)[0]
        if name in RESERVED_FLAGS:
            raise PapaError(f"{name} cannot be passed through to the training runs: the sweep sets it per stage "
                            "(use the sweep's own flag where there is one)")


def _check_training_command(command):
    """Parse a training run's flags as its script will, so a typo in a passed-through flag stops the
    sweep now rather than after the averaging stage."""
    import contextlib

    from .arguments import parse_training_args

    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            parse_training_args(command[2:])
    except PapaError as err:  # HfArgumentParser: flags no dataclass knows
        raise PapaError(f"the training runs would reject these flags: {err}") from None
    except SystemExit:  # argparse: a bad value
        message = stderr.getvalue().strip().splitlines()
        raise PapaError(f"the training runs would reject these flags: {message[-1] if message else 'bad value'}") from None


def model_display_name(model_name_or_path):
    if model_name_or_path is None:
        return "all-MiniLM-L6-v2 (bundled)"
    return os.path.basename(os.path.normpath(model_name_or_path)) or model_name_or_path


def run_sweep(model_name_or_path=None, task_name="repeat", data_dir=None, train_file=None,
              validation_file=None, output_dir=None, static_heads_nums=None, num_train_epochs=None,
              learning_rate=None, per_device_train_batch_size=None, max_seq_length=None,
              max_train_samples=None, max_eval_samples=None, seed=42, sort_num_train_epochs=None,
              extra_args=(), cache_dir=None, scripts_dir=None, log=None):
    """Run (or resume) the PAPA sweep; returns the path of results.csv.

    None means the default: the original README's hyper-parameters for a GLUE/CoNLL task, the
    measured quick settings (REPEAT_DEFAULTS) for the built-in `repeat` task.
    """
    log = log or (lambda message: print(message, flush=True))
    from .modeling import default_model_path

    task, kind = task_kind(task_name)
    defaults = REPEAT_DEFAULTS if task == "repeat" else README_DEFAULTS
    max_seq_length = int(check_positive(max_seq_length, "--max_seq_length") or defaults["max_seq_length"])
    num_train_epochs = float(check_positive(num_train_epochs, "--num_train_epochs") or defaults["num_train_epochs"])
    sort_num_train_epochs = float(check_positive(sort_num_train_epochs, "--sort_num_train_epochs")
                                  or defaults["sort_num_train_epochs"] or num_train_epochs)
    learning_rate = float(check_positive(learning_rate, "--learning_rate") or defaults["learning_rate"])
    train_batch = int(check_positive(per_device_train_batch_size, "--per_device_train_batch_size")
                      or defaults["per_device_train_batch_size"])
    check_positive(max_train_samples, "--max_train_samples")
    check_positive(max_eval_samples, "--max_eval_samples")
    extra_args = list(extra_args or ())
    _check_passthrough(extra_args)

    model_path = model_name_or_path or default_model_path()
    layers, heads_per_layer = _model_heads(model_path)
    total_heads = layers * heads_per_layer
    if static_heads_nums is None:
        ks = default_static_heads_nums(total_heads)
    else:
        ks = sorted(set(int(k) for k in static_heads_nums))
        if not ks:
            raise PapaError("--static_heads_nums needs at least one value")
        bad = [k for k in ks if not 0 <= k <= total_heads]
        if bad:
            raise PapaError(f"--static_heads_nums: {bad} outside 0..{total_heads} (the model has {layers} layers "
                            f"x {heads_per_layer} heads)")
    output_dir = os.path.abspath(output_dir or os.path.join("outputs", f"papa_sweep_{task}"))

    # ------------------------------------------------------------------ commands
    scripts_dir = Path(scripts_dir or SCRIPTS_DIR)
    script = lambda name: str(scripts_dir / name)
    for name in ("_avgs_creator.py", ".py"):
        if not (scripts_dir / f"{'run_papa_glue' if kind == 'sequence' else 'run_papa_ner'}{name}").is_file():
            raise PapaError(f"the PAPA scripts are not in {scripts_dir}; run the sweep from a checkout of the project")
    prefix = "run_papa_glue" if kind == "sequence" else "run_papa_ner"
    avgs_dir, sort_dir = os.path.join(output_dir, "avgs"), os.path.join(output_dir, "sort")
    source = ["--model_name_or_path", model_path, "--task_name", task]
    for flag, value in (("--data_dir", data_dir), ("--train_file", train_file), ("--cache_dir", cache_dir)):
        if value is not None:
            source += [flag, os.path.abspath(value) if flag != "--cache_dir" else value]
    validation = ["--validation_file", os.path.abspath(validation_file)] if validation_file else []
    limits = []
    for flag, value in (("--max_train_samples", max_train_samples), ("--max_eval_samples", max_eval_samples)):
        if value is not None:
            limits += [flag, str(int(value))]

    avgs_command = [sys.executable, script(f"{prefix}_avgs_creator.py"), *source,
                    "--max_length", str(max_seq_length),
                    "--per_device_train_batch_size", str(defaults["avgs_batch_size"]),
                    "--output_dir", avgs_dir, "--use_papa_preprocess", "true", "--pad_to_max_length",
                    "--seed", str(seed)]
    if max_train_samples is not None:  # average over the examples the probes are trained on
        avgs_command += ["--max_train_samples", str(int(max_train_samples))]

    def training_command(out, epochs, mode):
        return [sys.executable, script(f"{prefix}.py"), *source, *validation,
                "--do_train", "--do_eval", "--max_seq_length", str(max_seq_length),
                "--per_device_train_batch_size", str(train_batch),
                "--per_device_eval_batch_size", str(defaults["per_device_eval_batch_size"]),
                "--output_dir", out, "--num_train_epochs", repr(epochs), "--learning_rate", repr(learning_rate),
                "--lr_scheduler_type", "constant", "--evaluation_strategy", defaults["evaluation_strategy"],
                "--save_strategy", "no", "--use_papa_preprocess", "--use_freeze_extract_pooler", "true",
                "--static_heads_dir", avgs_dir, "--save_total_limit", "0", "--seed", str(seed),
                *limits, *mode, *extra_args]

    _check_training_command(training_command(sort_dir, sort_num_train_epochs, ["--sort_calculating", "True"]))

    avgs_pt = os.path.join(avgs_dir, "avgs.pt")
    sorted_json = os.path.join(sort_dir, "sorted_heads.json")
    stages = [
        Stage("avgs", f"averaging attention over the {task} training set (T={max_seq_length})", avgs_dir,
              avgs_command, [], ["avgs.pt"]),
        Stage("sort", f"ranking heads (λ mixing run, {_epochs(sort_num_train_epochs)})", sort_dir,
              training_command(sort_dir, sort_num_train_epochs, ["--sort_calculating", "True"]),
              [avgs_pt], ["lambdas.npy", "sorted_heads.json", "eval_results.json"]),
    ]
    for k in ks:
        folder = os.path.join(output_dir, f"k_{k}")
        mode = ["--grad_for_classifier_only", "true", "--static_heads_num", str(k), "--sorting_heads_dir", sort_dir]
        stages.append(Stage(f"k_{k}", f"probing with k={k} constant heads of {total_heads} "
                                      f"({_epochs(num_train_epochs)})",
                            folder, training_command(folder, num_train_epochs, mode),
                            [avgs_pt] + ([sorted_json] if k > 0 else []), ["eval_results.json"]))

    env = dict(os.environ)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    all_local = os.path.isdir(model_path) and (task == "repeat" or data_dir or train_file)
    if all_local:  # nothing to fetch: never wait on a network that may not be there
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.setdefault("HF_DATASETS_OFFLINE", "1")

    os.makedirs(output_dir, exist_ok=True)
    title_model = model_display_name(model_name_or_path)
    log(f"[sweep] PAPA sweep: {title_model}, {layers} layers x {heads_per_layer} heads = {total_heads}; task {task}; "
        f"k = {' '.join(map(str, ks))}; output in {output_dir}")
    save_json({"model": model_path, "task": task, "kind": kind, "layers": layers, "heads_per_layer": heads_per_layer,
               "static_heads_nums": ks, "max_seq_length": max_seq_length, "num_train_epochs": num_train_epochs,
               "sort_num_train_epochs": sort_num_train_epochs, "learning_rate": learning_rate,
               "per_device_train_batch_size": train_batch, "seed": seed, "extra_args": extra_args},
              os.path.join(output_dir, "sweep.json"), indent=2)

    start = time.monotonic()
    for index, stage in enumerate(stages, 1):
        _run_stage(stage, index, len(stages), output_dir, env, log)

    # ------------------------------------------------------------------ results
    k_results = {k: read_eval_results(os.path.join(output_dir, f"k_{k}")) for k in ks}
    columns, rows = build_results(k_results, task, total_heads)
    save_text(results_csv(columns, rows), os.path.join(output_dir, "results.csv"))
    title = f"PAPA sweep: {title_model} on {task}"
    warning = chance_warning(task, rows)
    markdown = results_markdown(columns, rows, title, total_heads, warning)
    save_text(markdown, os.path.join(output_dir, "results.md"))

    from . import plots

    main = f"eval_{main_metrics(task)[0]}"
    plots.plot_results([r["k"] for r in rows], [r.get(main) for r in rows], main[len("eval_"):], total_heads,
                       title, os.path.join(output_dir, "results.png"),
                       chance=chance_level(task, main[len("eval_"):]))
    plots.plot_lambdas(os.path.join(sort_dir, "lambdas.npy"), os.path.join(output_dir, "lambdas.png"),
                       f"Ranking run λ: {title_model} on {task}")
    plots.plot_constant_matrices(avgs_pt, sorted_json, os.path.join(output_dir, "constant_matrices.png"),
                                 f"Constant matrices (avgs.pt) of the top-ranked heads: {title_model} on {task}")
    log("")
    log(markdown)
    if warning:
        log(f"[sweep] warning: {warning}")
    log(f"[sweep] finished in {_human(time.monotonic() - start)}: results.csv, results.md, results.png, "
        f"lambdas.png, constant_matrices.png in {output_dir}")
    return os.path.join(output_dir, "results.csv")
