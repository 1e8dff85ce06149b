"""`papa-compare RUN_A RUN_B`: the paired difference between two finished sweeps of one task, with intervals.

Two sweeps (two models, two budgets, or PAPA against a control of the other) are compared at every fraction of
constant heads both ran: A's change against its own k = 0 run minus B's against its own, with the 95% interval of
the paired bootstrap. The pairing is the same as within a sweep (papa.reporting.differences): both runs' changes are
bootstrapped with the task's seed over the same number of seeds and the same evaluation examples, so resample r
draws the same seed positions and examples for A and for B, and what the two share (the examples' difficulty)
cancels. Two runs evaluated on different examples cannot be paired, and say so.
"""

import csv
import io
import os

from ..errors import PapaError
from ..io import load_json_object, save_text
from .aggregate import CHANGE_PREFIX
from ..run_folders import CONTROLS, run_folder
from .intervals import PredictionStore, change_distribution, change_text, percentile_interval

COLUMNS = ["fraction_constant", "k_a", "k_b", "change_a", "change_b", "diff", "diff_ci_low", "diff_ci_high"]


class Run:
    """A finished sweep's folder: its sweep.json and results.csv, and where each seed's run at k lies."""

    def __init__(self, folder, variant):
        self.folder = os.path.abspath(folder)
        hint = "pass the output folder of a finished papa-sweep (one model and task: <grid>/<model>/<task>)"
        self.sweep = load_json_object(os.path.join(self.folder, "sweep.json"), hint)
        if variant != "PAPA" and variant not in self.sweep.get("controls", []):
            ran = ", ".join(["PAPA"] + self.sweep.get("controls", []))
            raise PapaError(f"{self.folder} ran no {variant!r} variant; it has {ran}")
        self.variant = variant
        self.total = int(self.sweep["layers"]) * int(self.sweep["heads_per_layer"])
        seeds = self.sweep.get("seeds")
        self.tags = [None] if seeds is None else list(seeds)
        path = os.path.join(self.folder, "results.csv")
        if not os.path.isfile(path):
            raise PapaError(f"{path} does not exist: the sweep has not finished; re-run its command to finish it")
        with open(path, newline="") as f:
            self.rows = {int(row["k"]): row for row in csv.DictReader(f)}

    def folders(self, k, variant=None):
        return [os.path.join(self.folder, run_folder(None if variant == "PAPA" else variant, k, self.total, tag))
                for tag in self.tags]

    def change(self, k, metric_key):
        column = f"{CHANGE_PREFIX}{metric_key}" if self.variant == "PAPA" else (
            f"{CHANGE_PREFIX}{self.variant}_{metric_key}")
        value = self.rows.get(k, {}).get(column)
        return float(value) if value not in (None, "") else None


def compare_runs(folder_a, folder_b, variant_a="PAPA", variant_b="PAPA", metric=None, samples=1000):
    """[row of COLUMNS] at every fraction of constant heads both sweeps ran (k = 0 left out: 0 by definition)."""
    from ..data.tasks import get_task

    a, b = Run(folder_a, variant_a), Run(folder_b, variant_b)
    if a.sweep["task"] != b.sweep["task"]:
        raise PapaError(f"the runs are of different tasks ({a.sweep['task']} and {b.sweep['task']}): a difference "
                        "needs the same evaluation examples")
    if len(a.tags) != len(b.tags):
        raise PapaError(f"the runs have {len(a.tags)} and {len(b.tags)} seeds: the paired bootstrap draws the same "
                        "seed positions for both, so compare runs of as many seeds")
    task = get_task(a.sweep["task"])
    metric = metric or task.main_metrics[0]
    key = metric if metric.startswith("eval_") else f"eval_{metric}"
    fractions_b = {k / b.total: k for k in b.rows}
    store_a, store_b = PredictionStore(task), PredictionStore(task)
    rows = []
    for k_a in sorted(a.rows):
        k_b = fractions_b.get(k_a / a.total)
        if k_b is None or k_a == 0:
            continue
        change_a, change_b = a.change(k_a, key), b.change(k_b, key)
        stats = []
        for run, store, k in ((a, store_a, k_a), (b, store_b, k_b)):
            runs, references = run.folders(k, run.variant), run.folders(0, "PAPA")
            stats.append(change_distribution(store, runs, references, key, samples))
        examples_a, examples_b = (store.metric(run.folders(0, "PAPA")[0], key)[1]
                                  for run, store in ((a, store_a), (b, store_b)))
        if examples_a != examples_b:
            raise PapaError(f"{a.folder} and {b.folder} were evaluated on different examples (their k = 0 "
                            "predictions' labels differ): run both with the same data and --max_eval_samples")
        interval = None if any(s is None for s in stats) else percentile_interval(stats[0] - stats[1])
        diff = None if change_a is None or change_b is None else change_a - change_b
        rows.append({"fraction_constant": k_a / a.total, "k_a": k_a, "k_b": k_b, "change_a": change_a,
                     "change_b": change_b, "diff": diff,
                     "diff_ci_low": interval[0] if interval else None, "diff_ci_high": interval[1] if interval else None})
    if not rows:
        raise PapaError(f"the runs share no fraction of constant heads besides 0 (A ran k of {a.total}: "
                        f"{sorted(a.rows)}; B of {b.total}: {sorted(b.rows)})")
    return rows, task, key


def label(folder, variant):
    name = os.path.basename(os.path.normpath(folder))
    return name if variant == "PAPA" else f"{name} ({CONTROLS[variant].label})"


def compare_markdown(rows, key, name_a, name_b):
    lines = [f"# {name_a} − {name_b}: change in {key[len('eval_'):]} vs each run's own k = 0", "",
             f"| constant heads (fraction) | k (A, B) | A: {name_a} | B: {name_b} | A − B [95% interval] |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        lines.append(f"| {row['fraction_constant']:.3f} | {row['k_a']}, {row['k_b']} | {change_text(row['change_a'])} "
                     f"| {change_text(row['change_b'])} | "
                     f"{change_text(row['diff'], row['diff_ci_low'], row['diff_ci_high'])} |")
    lines += ["", "A − B > 0: A keeps more of its k = 0 performance. * marks an interval that excludes 0 (paired "
                  "bootstrap over the seeds and the shared evaluation examples; docs/error_bars.md).", ""]
    return "\n".join(lines)


def comparison_csv(rows):
    out = io.StringIO()
    writer = csv.DictWriter(out, COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows([{c: "" if r[c] is None else r[c] for c in COLUMNS} for r in rows])
    return out.getvalue()


def run_compare(folder_a, folder_b, variant_a="PAPA", variant_b="PAPA", metric=None, samples=1000, output=None):
    """Print the comparison; with `output`, also write it as CSV (atomically). Returns the rows."""
    rows, _, key = compare_runs(folder_a, folder_b, variant_a, variant_b, metric, samples)
    print(compare_markdown(rows, key, label(folder_a, variant_a), label(folder_b, variant_b)), flush=True)
    if output:
        save_text(comparison_csv(rows), output)
    return rows
