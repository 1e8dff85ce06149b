"""The sweep's results: every `k_<k>/eval_results.json` (and the controls' runs) → results.csv, results.md
and the figures.

A relative change is always a change in performance, negative = worse: (value − reference) / |reference|
for a metric where higher is better, (reference − value) / |reference| for one where lower is better
(`TaskSpec.lower_is_better`: perplexity, so a rise from 10 to 12 is −20%); the value columns keep the
metric itself.

The controls (papa.sweep.controls) add, per main metric, a column of their value and one of its
relative change against PAPA's k = 0 run (the run they share); results.md shows them in a second
table, and the stages' wall times (from their stage.json) in a third.

Every seed's runs make one such table (results_per_seed.csv); results.csv merges them (papa.reporting.aggregate):
the mean over seeds, the std across them, and each change's 95% bootstrap interval, which results.md
prints as `-1.3% [-2.1, -0.4]*` (* the interval excludes 0).
"""

import csv
import io
import itertools
import math
import os
from dataclasses import dataclass, field

from ..method.rankers import RANKERS
from ..errors import PapaError
from ..io import load_json_object, save_text
from .aggregate import add_intervals, merge_seeds, per_seed_rows
from . import lm_eval_table, orderings
from .claims import claims, claims_markdown, half_k
from .differences import DIFF_PREFIX, add_differences, difference_column, differences_markdown
from .intervals import change_text
from .stability import kendall_tau, read_ranking, seed_stability, stability_markdown, write_stability
from ..run_folders import CONTROLS, STAMP, run_folder

# eval_* keys that describe the run rather than the model's quality
NON_METRIC_SUFFIXES = ("runtime", "samples_per_second", "steps_per_second", "samples", "loss", "epoch",
                       "model_preparation_time")  # the Trainer's, in an evaluation-only run (lm)
CHANCE_MARGIN = 0.05  # k=0 closer than this to chance: the curve is not interpretable


def read_eval_results(folder):
    return load_json_object(os.path.join(folder, "eval_results.json"), f"delete {folder} to redo that run")


def is_quality_metric(key):
    return key.startswith("eval_") and not key.endswith(NON_METRIC_SUFFIXES)


def relative_change(value, reference, direction=1):
    """The change in performance as a fraction, negative = worse: direction · (value − reference) / |reference|,
    `direction` -1 for a metric where lower is better (TaskSpec.direction); None when undefined (no or zero
    reference)."""
    if value is None or reference is None or reference == 0 or any(
            isinstance(v, float) and math.isnan(v) for v in (value, reference)):
        return None
    return direction * (value - reference) / abs(reference) + 0.0  # + 0.0: no "-0.0%" where nothing changed


def build_results(k_results, task, total_heads):
    """The results table from {k: eval_results dict}, for `task` (a papa.data.tasks.TaskSpec).

    Returns (columns, rows): one row per k (ascending) with `k`, `fraction_constant` (k / total
    heads), every eval_* quality metric (main ones first), and for each main metric
    `rel_change_eval_<metric>` = ± (value - value at k=0) / |value at k=0| as a fraction, the sign making it a
    change in performance (negative = worse; relative_change), None without a k=0 run or when its value is 0.
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
            row[column] = relative_change(results.get(metric), reference.get(metric), task.direction(metric))
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


def _interval(row, change_column):
    """(low, high) of a change's interval, or (None, None) for k = 0: the reference against itself."""
    if row.get("k") == 0:
        return None, None
    return row.get(f"{change_column}_ci_low"), row.get(f"{change_column}_ci_high")


def _md_cell(column, value, row=None):
    row = row or {}
    if value is None:
        return "–"
    if column.startswith("rel_change_"):
        return change_text(value, *_interval(row, column))
    if column == "fraction_constant":
        return f"{value:.3f}"
    if isinstance(value, float):
        std = row.get(f"{column}_std")
        return f"{value:.4f}" + ("" if std is None else f" ± {std:.4f}")
    return str(value)


def interval_note(rows, bootstrap_samples):
    """What the numbers in results.md are, when several seeds or intervals are in it."""
    seeds = max((r.get("n_seeds") or 1 for r in rows), default=1)
    parts = []
    if seeds > 1:
        parts.append(f"Each value is the mean over {seeds} seeds ± their standard deviation; each change the mean "
                     "over seeds of the change of the same seed's runs.")
    if any(r.get(c) is not None for r in rows for c in r if c.endswith("_ci_low")):
        parts.append(f"[low, high]: 95% interval of the change from a paired bootstrap ({bootstrap_samples} "
                     "resamples of the seeds and of the evaluation examples, the same examples for every seed, "
                     "k and k=0); "
                     "* marks an interval that excludes 0: a change distinguishable from noise at this budget.")
    return " ".join(parts) or None


def chance_warning(task, rows):
    """A warning when the k=0 probe is not clearly above chance (None otherwise, or when chance is unknown)."""
    metric = task.main_metrics[0]
    reference = next((r.get(f"eval_{metric}") for r in rows if r["k"] == 0), None)
    if task.chance is None or reference is None or reference - task.chance >= CHANCE_MARGIN:
        return None
    return (f"at k=0 (no constant head) {metric} is {reference:.4f}, less than {CHANCE_MARGIN:g} above chance "
            f"({task.chance:g}): the probe learned (almost) nothing, so the curve says nothing about attention. "
            "Train longer (--num_train_epochs), on more data, or probe a task the model encodes.")


def change_definition(task):
    """What "change vs k=0" means for `task`'s main metrics (None: higher is better), for the tables' notes."""
    lower = [] if task is None else [m for m in task.main_metrics if task.direction(m) < 0]
    if not lower:
        return "\"change vs k=0\" = (value − value at k=0) / |value at k=0|"
    return (f"\"change vs k=0\" = the change in performance, negative = worse: (value at k=0 − value) / |value at "
            f"k=0| for {', '.join(lower)} (lower is better), (value − value at k=0) / |value at k=0| otherwise")


def results_markdown(columns, rows, title, total_heads, warning=None, note=None, task=None):
    lines = [f"# {title}", ""]
    if warning:
        lines += [f"**Warning:** {warning}", ""]
    lines.append("| " + " | ".join(_md_header(c) for c in columns) + " |")
    lines.append("|" + "|".join(" ---: " for _ in columns) + "|")
    for row in rows:
        lines.append("| " + " | ".join(_md_cell(c, row[c], row) for c in columns) + " |")
    lines += ["", f"k = number of the model's {total_heads} attention heads replaced by constant matrices "
                  "(the k ranked most constant-friendly in sort/sorted_heads.json). "
                  f"{change_definition(task)}, in percent "
                  "(results.csv: the same as a fraction, columns rel_change_*).", ""]
    if note:
        lines += [note, ""]
    return "\n".join(lines)


def add_control_columns(columns, rows, control_results, task):
    """Append, for each control ({name: {k: eval_results}}) and main metric, `<name>_eval_<metric>` and
    `rel_change_<name>_eval_<metric>` (against PAPA's k = 0 value, the run every control shares)."""
    mains = [f"eval_{m}" for m in task.main_metrics if f"eval_{m}" in columns]
    reference = next((r for r in rows if r["k"] == 0), {})
    for name, by_k in control_results.items():
        for metric in mains:
            value_column, change_column = f"{name}_{metric}", f"rel_change_{name}_{metric}"
            columns += [value_column, change_column]
            for row in rows:
                value = by_k.get(row["k"], {}).get(metric)
                row[value_column] = value
                row[change_column] = relative_change(value, reference.get(metric), task.direction(metric))
    return columns, rows


def controls_markdown(rows, task, controls):
    """The controls' table: per k, the first main metric of PAPA and of each control, with its change."""
    metric = f"eval_{task.main_metrics[0]}"

    def cell(row, value_column, change_column):
        if row.get(value_column) is None:
            return "–"
        change = change_text(row.get(change_column), *_interval(row, change_column))
        return f"{row[value_column]:.4f} ({change})"

    lines = [f"## Controls: {metric[len('eval_'):]} (change vs k=0)", "",
             "| k | constant heads (fraction) | PAPA | " + " | ".join(CONTROLS[c].label for c in controls) + " |",
             "|" + " ---: |" * (3 + len(controls))]
    for row in rows:
        cells = [cell(row, metric, f"rel_change_{metric}")]
        cells += [cell(row, f"{c}_{metric}", f"rel_change_{c}_{metric}") for c in controls]
        lines.append(f"| {row['k']} | {row['fraction_constant']:.3f} | " + " | ".join(cells) + " |")
    legend = " ".join(f"{CONTROLS[c].label}: {CONTROLS[c].legend};" for c in controls)
    lines += ["", legend + " every change is against the same k=0 run; k=0 (and, for random order, k = all heads) "
                  "is PAPA's own run.", ""]
    return "\n".join(lines)


def stage_times(stages):
    """[(stage name, seconds)] from each finished stage's stage.json (the time it took when it ran)."""
    times = []
    for stage in stages:
        try:
            seconds = load_json_object(os.path.join(stage.folder, STAMP), "").get("seconds")
        except PapaError:
            seconds = None
        times.append((stage.name, seconds))
    return times


def times_markdown(times):
    known = [s for _, s in times if s is not None]
    lines = ["## Stage times", ""] + [f"- {name}: {'–' if s is None else f'{s:.1f} s'}" for name, s in times]
    lines += [f"- total: {sum(known):.1f} s", "",
              "Each stage's wall time when it ran (from its stage.json): a stage skipped as up to date keeps the time "
              "of the run that made it.", ""]
    return "\n".join(lines)


@dataclass
class Results:
    """A sweep's results, as written: the table, its markdown, the warning, and what a grid summary needs."""

    columns: list
    rows: list
    markdown: str
    warning: str | None
    eval_samples: int | None  # evaluation examples of the k = 0 run
    # {(change column, k): the bootstrap statistics of its interval} (papa.reporting.intervals), for the grid's means
    distributions: dict = field(default_factory=dict)
    n_seeds: int = 1
    rankings: dict = field(default_factory=dict)  # {seed: (λ, sorted heads)} of the ranking runs (stability)


def seed_tables(plan):
    """[(seed, columns, rows)]: each seed's table from its runs' eval_results.json, as a one-seed sweep builds it;
    and the evaluation examples of the first seed's k = 0 run."""
    output_dir, task, total_heads = plan.output_dir, plan.task, plan.total_heads
    tables, samples = [], None
    for seed, tag in plan.seed_runs:
        k_results = {k: read_eval_results(os.path.join(output_dir, run_folder(None, k, total_heads, tag)))
                     for k in plan.ks}
        columns, rows = build_results(k_results, task, total_heads)
        control_results = {c: {k: read_eval_results(os.path.join(output_dir, run_folder(c, k, total_heads, tag)))
                               for k in plan.ks} for c in plan.controls}
        tables.append((seed, *add_control_columns(columns, rows, control_results, task)))
        samples = k_results.get(0, {}).get("eval_samples") if samples is None else samples
    return tables, samples


def is_summary_column(column):
    """A column results.md shows in its own cell (n_seeds, std and intervals go into the value and change cells)."""
    return column != "n_seeds" and not column.endswith(("_std", "_ci_low", "_ci_high"))


RESULTS_FILES = ("results.csv", "results_per_seed.csv", "results.md", "results.png", "lambdas.png",
                 "constant_matrices.png", "differences.png", "ranking_stability.csv", "lm_eval.png")


def remove_results(output_dir):
    """Delete a sweep's results files (RESULTS_FILES), before stages they describe are redone: a rerun that then
    fails leaves no results that no longer match its stages."""
    for name in RESULTS_FILES:
        path = os.path.join(output_dir, name)
        if os.path.exists(path):
            os.remove(path)


def write_results(plan, model_name, stages=()):
    """results.csv, results_per_seed.csv, results.md, results.png, lambdas.png, constant_matrices.png for `plan`
    (papa.sweep.plan.Plan)."""
    from . import plots

    output_dir, task, total_heads = plan.output_dir, plan.task, plan.total_heads
    # the rankings first: a damaged lambdas.npy stops the results before any file is written (papa.artifacts)
    rankings = {s: r for s in plan.ranking_seeds if (r := read_ranking(plan.ranking_folder(s))) is not None}
    taus = ranker_taus(plan)
    tables, samples = seed_tables(plan)
    columns, rows = merge_seeds(tables)
    distributions, notes = add_intervals(columns, rows, plan)
    main = f"eval_{task.main_metrics[0]}"
    add_differences(columns, rows, distributions, plan.controls, [f"eval_{m}" for m in task.main_metrics])
    orderings.add_ordering_differences(columns, rows, distributions, plan, [f"eval_{m}" for m in task.main_metrics])
    scored = lm_eval_table.add_columns(columns, rows, plan, plan.bootstrap_samples) if plan.lm_eval_tasks else {}
    save_text(results_csv(columns, rows), os.path.join(output_dir, "results.csv"))
    save_text(results_csv(*per_seed_rows(tables)), os.path.join(output_dir, "results_per_seed.csv"))
    title = f"PAPA sweep: {model_name} on {task.name}"
    warning = chance_warning(task, rows)
    papa_columns = [c for c in columns if is_summary_column(c) and not c.startswith(DIFF_PREFIX) and
                    not lm_eval_table.is_lm_eval_column(c) and not any(c.startswith((f"{n}_", f"rel_change_{n}_")) for n in plan.controls)]
    note = interval_note(rows, plan.bootstrap_samples)
    if notes:
        note = (note + " " if note else "") + f"No interval where a run's predictions are missing: {notes[0]}"
    markdown = results_markdown(papa_columns, rows, title, total_heads, warning, note, task)
    labels = {c: CONTROLS[c].label for c in plan.controls}
    if plan.controls:
        markdown += "\n" + controls_markdown(rows, task, plan.controls)
        markdown += "\n" + differences_markdown(rows, main, plan.controls, labels, total_heads)
    stability = seed_stability(task.name, rankings, plan.ks) if len(rankings) > 1 else []
    several = len(plan.rankers) > 1 or len(orderings.random_orders_in(plan)) > 1
    if several:
        markdown += "\n" + orderings.orderings_markdown(rows, plan, main, taus)
    best = orderings.best_ranker(rows, plan, main, half_k(total_heads)) if several else None
    markdown += "\n" + claims_markdown([((), claims(rows, main, total_heads, best))])
    write_stability(stability, output_dir)
    if stability:
        markdown += "\n" + stability_markdown(stability, "seeds")
    if scored:
        markdown += "\n" + lm_eval_table.markdown(rows, plan, scored)
        lm_eval_table.plot(rows, plan, scored, os.path.join(output_dir, "lm_eval.png"), f"lm-eval: {title[12:]}")
    if stages:
        markdown += "\n" + times_markdown(stage_times(stages))
    save_text(markdown, os.path.join(output_dir, "results.md"))

    avgs_pt = os.path.join(output_dir, "avgs", "avgs.pt")
    sort_dir = plan.ranking_folder(plan.ranking_seeds[0])  # with --rank_per_seed: the first seed's ranking
    lines = {CONTROLS[c].label: [r.get(f"{c}_{main}") for r in rows] for c in plan.controls}
    bands = {label: metric_band(rows, change, main, task.direction(main)) for label, change in
             [(None, f"rel_change_{main}")] + [(CONTROLS[c].label, f"rel_change_{c}_{main}") for c in plan.controls]}
    plots.plot_results([r["k"] for r in rows], [r.get(main) for r in rows], main[len("eval_"):], total_heads,
                       title, os.path.join(output_dir, "results.png"), chance=task.chance, controls=lines,
                       bands=bands, lower_is_better=task.direction(main) < 0)
    if RANKERS[plan.rankers[0]].in_trainer:  # λ: its lambdas.npy
        plots.plot_lambdas([os.path.join(plan.ranking_folder(s), "lambdas.npy") for s in plan.ranking_seeds],
                           os.path.join(output_dir, "lambdas.png"), f"Ranking run λ: {model_name} on {task.name}")
    if plan.controls:
        columns_of = {labels[c]: difference_column(c, main) for c in plan.controls}
        plots.plot_differences([r["k"] for r in rows], {
            label: [(r.get(col), r.get(f"{col}_ci_low"), r.get(f"{col}_ci_high")) for r in rows]
            for label, col in columns_of.items()}, os.path.join(output_dir, "differences.png"),
            f"Controls against PAPA: {model_name} on {task.name}", total_heads)
    if os.path.isfile(avgs_pt):  # full constants only (not --constants toeplitz / sink_window)
        plots.plot_constant_matrices(avgs_pt, os.path.join(sort_dir, "sorted_heads.json"),
                                     os.path.join(output_dir, "constant_matrices.png"),
                                     f"Constant matrices (avgs.pt) of the top-ranked heads: {model_name} on "
                                     f"{task.name}")
    return Results(columns, rows, markdown, warning, samples, distributions, len(tables), rankings)


def ranker_taus(plan):
    """{ranker: the mean Kendall τ between its seeds' rankings}, for the rankers ranked per seed."""
    taus = {}
    for ranker in plan.rankers:
        found = {s: r for s in plan.ranking_seeds if (r := read_ranking(plan.ranking_folder(s, ranker))) is not None}
        pairs = [kendall_tau(found[a][0], found[b][0]) for a, b in itertools.combinations(sorted(found), 2)]
        if pairs:
            taus[ranker] = sum(pairs) / len(pairs)
    return taus


def metric_band(rows, change_column, metric, direction=1):
    """A change's interval on the metric's axis: the k = 0 value of `metric` (every change's reference) moved by
    the interval's ends, (lows, highs) per row, None where unknown. `direction` -1 (lower is better): a change
    of −c is a rise of c·|reference|, so the ends swap (lows stay the smaller values)."""
    reference = next((r.get(metric) for r in rows if r["k"] == 0), None)

    def at(end):
        return [None if reference is None or r.get(f"{change_column}_{end}") is None
                else reference + direction * r[f"{change_column}_{end}"] * abs(reference) for r in rows]
    lows, highs = at("ci_low"), at("ci_high")
    return (lows, highs) if direction > 0 else (highs, lows)
