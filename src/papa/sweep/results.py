"""The sweep's results: every `k_<k>/eval_results.json` → results.csv, results.md and the figures."""

import csv
import io
import json
import math
import os

from ..errors import PapaError
from ..io import save_text

# eval_* keys that describe the run rather than the model's quality
NON_METRIC_SUFFIXES = ("runtime", "samples_per_second", "steps_per_second", "samples", "loss", "epoch")
CHANCE_MARGIN = 0.05  # k=0 closer than this to chance: the curve is not interpretable


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


def is_quality_metric(key):
    return key.startswith("eval_") and not key.endswith(NON_METRIC_SUFFIXES)


def relative_change(value, reference):
    """(value - reference) / |reference| as a fraction; None when undefined (no or zero reference)."""
    if value is None or reference is None or reference == 0 or any(
            isinstance(v, float) and math.isnan(v) for v in (value, reference)):
        return None
    return (value - reference) / abs(reference)


def build_results(k_results, task, total_heads):
    """The results table from {k: eval_results dict}, for `task` (a papa.tasks.TaskSpec).

    Returns (columns, rows): one row per k (ascending) with `k`, `fraction_constant` (k / total
    heads), every eval_* quality metric (main ones first), and for each main metric
    `rel_change_eval_<metric>` = (value - value at k=0) / |value at k=0| as a fraction (None
    without a k=0 run or when its value is 0).
    """
    mains = [f"eval_{m}" for m in task.main_metrics]
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


def chance_warning(task, rows):
    """A warning when the k=0 probe is not clearly above chance (None otherwise, or when chance is unknown)."""
    metric = task.main_metrics[0]
    reference = next((r.get(f"eval_{metric}") for r in rows if r["k"] == 0), None)
    if task.chance is None or reference is None or reference - task.chance >= CHANCE_MARGIN:
        return None
    return (f"at k=0 (no constant head) {metric} is {reference:.4f}, less than {CHANCE_MARGIN:g} above chance "
            f"({task.chance:g}): the probe learned (almost) nothing, so the curve says nothing about attention. "
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


def write_results(output_dir, task, ks, total_heads, model_name):
    """results.csv, results.md, results.png, lambdas.png, constant_matrices.png; returns (markdown, warning)."""
    from .. import plots

    k_results = {k: read_eval_results(os.path.join(output_dir, f"k_{k}")) for k in ks}
    columns, rows = build_results(k_results, task, total_heads)
    save_text(results_csv(columns, rows), os.path.join(output_dir, "results.csv"))
    title = f"PAPA sweep: {model_name} on {task.name}"
    warning = chance_warning(task, rows)
    markdown = results_markdown(columns, rows, title, total_heads, warning)
    save_text(markdown, os.path.join(output_dir, "results.md"))

    main = task.main_metrics[0]
    avgs_pt = os.path.join(output_dir, "avgs", "avgs.pt")
    sort_dir = os.path.join(output_dir, "sort")
    plots.plot_results([r["k"] for r in rows], [r.get(f"eval_{main}") for r in rows], main, total_heads,
                       title, os.path.join(output_dir, "results.png"), chance=task.chance)
    plots.plot_lambdas(os.path.join(sort_dir, "lambdas.npy"), os.path.join(output_dir, "lambdas.png"),
                       f"Ranking run λ: {model_name} on {task.name}")
    plots.plot_constant_matrices(avgs_pt, os.path.join(sort_dir, "sorted_heads.json"),
                                 os.path.join(output_dir, "constant_matrices.png"),
                                 f"Constant matrices (avgs.pt) of the top-ranked heads: {model_name} on {task.name}")
    return markdown, warning
