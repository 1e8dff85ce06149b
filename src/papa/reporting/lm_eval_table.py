"""The sweep's lm-eval scores (--lm_eval_tasks): each probing run's lm_eval_results.json and lm_eval_samples.jsonl
(papa.evaluation.scoring) → columns of results.csv, a table of results.md and lm_eval.png.

Per run (PAPA's k and every control's), per task and metric: lm-eval's value and standard error
(`lmeval_<task>_<metric>`, `..._stderr`; a control's prefixed with its name, as the sweep's own columns), and the
relative change against PAPA's k = 0 run (negative = worse; lower is better for the perplexities) with a 95% paired
bootstrap interval over the documents both runs scored (papa.evaluation.sample_metrics), `rel_change_lmeval_...`
and its `_ci_low`/`_ci_high`. With --seeds, the first seed's runs.
"""

import json
import os

from ..evaluation.sample_metrics import direction, paired_change
from ..evaluation.scoring import RESULTS_FILE, SAMPLES_FILE
from ..io import atomic_path, load_json_object
from ..run_folders import CONTROLS, run_folder
from .intervals import change_text

PREFIX = "lmeval_"


def read_run(folder):
    """(results {task: {metric: value}}, samples {task: {metric: {doc_id: value}}}) of one run, or None."""
    path = os.path.join(folder, RESULTS_FILE)
    if not os.path.isfile(path):
        return None
    results = load_json_object(path, f"delete {folder} to redo that run")["results"]
    samples = {}
    with open(os.path.join(folder, SAMPLES_FILE), encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            task, doc = row.pop("task"), row.pop("doc_id")
            for metric, value in row.items():
                samples.setdefault(task, {}).setdefault(metric, {})[doc] = value
    return results, samples


def runs(plan):
    """{(control or None, k): (results, samples)} of the first seed's runs that hold lm-eval scores."""
    tag = plan.seed_runs[0][1]
    found = {}
    for control in (None, *plan.controls):
        for k in plan.ks:
            scored = read_run(os.path.join(plan.output_dir, run_folder(control, k, plan.total_heads, tag)))
            if scored is not None:
                found[control, k] = scored
    return found


def metrics_of(found):
    """[(task, metric)] in the order first seen, standard errors left out."""
    pairs = []
    for results, _ in found.values():
        for task, values in results.items():
            pairs += [(task, m) for m in values if not m.endswith("_stderr") and (task, m) not in pairs]
    return pairs


def column(control, task, metric):
    return f"{'' if control is None else control + '_'}{PREFIX}{task}_{metric}"


def add_columns(columns, rows, plan, samples=1000):
    """Add every run's lm-eval columns to results.csv's `rows` (one per k), in place; returns the runs found."""
    found = runs(plan)
    reference = found.get((None, 0))
    for control in (None, *plan.controls):
        for task, metric in metrics_of(found):
            name = column(control, task, metric)
            change = f"rel_change_{name}"
            new = [name, f"{name}_stderr", change, f"{change}_ci_low", f"{change}_ci_high"]
            columns += [c for c in new if c not in columns]
            for row in rows:
                results, per_doc = found.get((control, row["k"]), ({}, {}))
                values = results.get(task, {})
                row[name], row[f"{name}_stderr"] = values.get(metric), values.get(f"{metric}_stderr")
                ref_docs = reference[1].get(task, {}).get(metric) if reference else None
                docs = per_doc.get(task, {}).get(metric)
                low = high = value = None
                if docs and ref_docs:
                    value, low, high = paired_change(metric, docs, ref_docs, samples)
                row[change], row[f"{change}_ci_low"], row[f"{change}_ci_high"] = value, low, high
    return found


def is_lm_eval_column(name):
    return PREFIX in name


def markdown(rows, plan, found):
    """results.md's lm-eval table: a line per run, a cell per task and metric: value ± lm-eval's standard error,
    and the change against k = 0 with its paired interval."""
    pairs = metrics_of(found)
    if not pairs:
        return ""
    head = "| run | k | " + " | ".join(f"{t} {m}" for t, m in pairs) + " |"
    lines = ["## lm-eval tasks", "",
             f"Zero-shot, lm-eval's own metrics ± its standard errors; the change against k = 0 (negative = worse; "
             f"lower is better for perplexities and bits per byte) with a 95% paired bootstrap interval over the "
             f"documents (* it excludes 0). {_documents(found)}", "", head,
             "| --- | ---: | " + " | ".join("---:" for _ in pairs) + " |"]
    for control in (None, *plan.controls):
        label = "PAPA" if control is None else CONTROLS[control].label
        for row in rows:
            if (control, row["k"]) not in found:
                continue
            cells = []
            for task, metric in pairs:
                name = column(control, task, metric)
                value, err = row.get(name), row.get(f"{name}_stderr")
                text = "–" if value is None else f"{value:.4f}" + ("" if not isinstance(err, float) else f" ± {err:.4f}")
                change = f"rel_change_{name}"
                if row["k"] != 0 or control is not None:
                    text += f" ({change_text(row.get(change), row.get(f'{change}_ci_low'), row.get(f'{change}_ci_high'))})"
                cells.append(text)
            lines.append(f"| {label} | {row['k']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _documents(found):
    counts = {}
    for results, per_doc in found.values():
        for task, metrics in per_doc.items():
            counts[task] = max(counts.get(task, 0), max(map(len, metrics.values()), default=0))
    return "Documents: " + ", ".join(f"{t} {n}" for t, n in counts.items()) + "."


def plot(rows, plan, found, path, title):
    """lm_eval.png: each task's first metric against k, PAPA's and each control's, with ±1.96 standard errors."""
    from .plots import CONTROL_STYLES, DPI, Figure

    firsts = []
    for task, metric in metrics_of(found):
        if task not in [t for t, _ in firsts]:
            firsts.append((task, metric))
    if not firsts:
        return None
    fig = Figure(figsize=(4.2 * len(firsts), 3.4), layout="constrained")
    for i, (task, metric) in enumerate(firsts):
        ax = fig.add_subplot(1, len(firsts), i + 1)
        for j, control in enumerate((None, *plan.controls)):
            points = [(r["k"], r.get(column(control, task, metric)), r.get(column(control, task, metric) + "_stderr"))
                      for r in rows if r.get(column(control, task, metric)) is not None]
            if not points:
                continue
            ks, values, errs = zip(*points)
            errs = [1.96 * e if isinstance(e, float) else 0.0 for e in errs]
            style = {"marker": "o"} if control is None else CONTROL_STYLES[(j - 1) % len(CONTROL_STYLES)]
            ax.errorbar(ks, values, yerr=errs, capsize=3, label="PAPA" if control is None else CONTROLS[control].label,
                        **style)
        ax.set_xlabel(f"constant heads (of {plan.total_heads})")
        ax.set_ylabel(metric + (" (lower is better)" if direction(metric) < 0 else ""))
        ax.set_title(task)
        ax.legend(fontsize="small")
    fig.suptitle(title)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI)
    return path
