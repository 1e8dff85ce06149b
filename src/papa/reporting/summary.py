"""A grid's summary across models and tasks: summary.csv, summary.md and summary.png.

Per pair (model, task) the score of the task's first main metric at k = 0 and, at each k, the
score and its relative change (score − score at k=0) / |score at k=0| — for PAPA and for each
control, all against the same k = 0 run. A relative change is a change in performance, negative = worse:
for a metric where lower is better (lm's perplexity) its sign is flipped (papa.reporting.results.relative_change),
so the means across tasks and the figure add up gains and losses alike whatever way each metric runs. Per model, the mean relative change across its tasks at
each k, and the headline: at ½ of the heads (k = round(heads / 2), the sweep's default) and at all
heads constant. A failed pair is listed with its error and left out of the means; so is a pair whose
k = 0 probe is at chance (its sweep's warning): relative changes of a score near zero are noise
(+300% of an MCC of 0.01), and would swamp the mean.

A standard error comes with each score where a formula exists: √(p(1−p)/n) for accuracies,
√((1−r²)/(n−2)) for correlations (Matthews, Pearson, Spearman); none for F1. Each change comes with its
95% interval (papa.reporting.intervals: over seeds and evaluation examples), and each mean across tasks with
the interval of the mean of the tasks' bootstrap statistics (the tasks' resamples are independent), so
the headline says whether it is distinguishable from zero.
"""

import csv
import io
import math
import os
from dataclasses import dataclass

from ..errors import first_line
from ..io import save_text
from .claims import claims, claims_markdown, half_k
from ..run_folders import CONTROLS
from .differences import difference_column, grid_differences_markdown
from .stability import stability_markdown, task_stability, write_stability
from .intervals import change_text, mean_across_interval

CSV_COLUMNS = ["model", "task", "status", "metric", "variant", "k", "fraction_constant", "score", "se",
               "rel_change", "ci_low", "ci_high", "diff_vs_papa", "diff_ci_low", "diff_ci_high", "eval_samples",
               "n_seeds", "error"]
CORRELATIONS = ("matthews_correlation", "pearson", "spearmanr")


@dataclass
class PairOutcome:
    """One pair of a grid: what was planned, and its results (papa.reporting.results.Results) or its error."""

    model: str  # display name
    task: object  # papa.data.tasks.TaskSpec
    total_heads: int
    ks: list
    controls: tuple = ()
    results: object = None
    error: str | None = None

    @property
    def metric(self):
        return self.task.main_metrics[0]

    def change_column(self, variant):
        key = f"eval_{self.metric}" if variant == "PAPA" else f"{variant}_eval_{self.metric}"
        return f"rel_change_{key}"

    def points(self, variant):
        """[(k, score, relative change)] of PAPA (variant "PAPA") or of a control, every k of the pair."""
        change = self.change_column(variant)
        return [(row["k"], row.get(change[len("rel_change_"):]), row.get(change)) for row in self.results.rows]

    def interval(self, variant, k):
        """(low, high) of the change at k (None, None when unknown)."""
        change = self.change_column(variant)
        row = next((r for r in self.results.rows if r["k"] == k), {})
        return row.get(f"{change}_ci_low"), row.get(f"{change}_ci_high")

    def difference(self, variant, k):
        """(control − PAPA, low, high) at k (papa.reporting.differences); Nones for PAPA itself or when unknown."""
        if variant == "PAPA":
            return None, None, None
        column = difference_column(variant, f"eval_{self.metric}")
        row = next((r for r in self.results.rows if r["k"] == k), {})
        return tuple(row.get(f"{column}{end}") for end in ("", "_ci_low", "_ci_high"))

    def distribution(self, variant, k):
        """The bootstrap statistics behind the change's interval at k, or None."""
        return (self.results.distributions or {}).get((self.change_column(variant), k))


def standard_error(metric, score, n):
    """Approximate standard error of a score on n evaluation examples; None without a formula."""
    if score is None or not n:
        return None
    if metric.endswith("accuracy") and 0 <= score <= 1:  # accuracy, mnli-mm_accuracy
        return math.sqrt(score * (1 - score) / n)
    if metric in CORRELATIONS and n > 2 and -1 <= score <= 1:
        return math.sqrt((1 - score * score) / (n - 2))
    return None


def variants(outcome):
    return ["PAPA"] + list(outcome.controls)


def summary_rows(outcomes):
    """summary.csv's rows: one per pair, variant and k; one per failed pair."""
    rows = []
    for o in outcomes:
        if o.results is None:
            rows.append({"model": o.model, "task": o.task.name, "status": "failed", "metric": o.metric,
                         "error": o.error or "failed"})
            continue
        n = o.results.eval_samples
        for variant in variants(o):
            for k, score, change in o.points(variant):
                low, high = o.interval(variant, k)
                diff = o.difference(variant, k)
                rows.append({"model": o.model, "task": o.task.name, "status": "ok", "metric": o.metric,
                             "variant": variant, "k": k, "fraction_constant": k / o.total_heads, "score": score,
                             "se": standard_error(o.metric, score, n), "rel_change": change, "ci_low": low,
                             "ci_high": high, "diff_vs_papa": diff[0], "diff_ci_low": diff[1],
                             "diff_ci_high": diff[2], "eval_samples": n, "n_seeds": o.results.n_seeds})
    return rows


def summary_csv(rows):
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        values = [row.get(c) for c in CSV_COLUMNS]
        writer.writerow(["" if v is None else repr(v) if isinstance(v, float) else v for v in values])
    return out.getvalue()


def mean_changes(outcomes, variant, k_of):
    """(mean relative change over the pairs that have one at k_of(pair), number of such pairs)."""
    changes = [c for _, c in _changes(outcomes, variant, k_of)]
    return (sum(changes) / len(changes) if changes else None), len(changes)


def _changes(outcomes, variant, k_of):
    """[(pair, its change at k_of(pair))] of the pairs in the means."""
    found = []
    for o in outcomes:
        if o.results is None or o.results.warning or variant not in variants(o):
            continue
        k = k_of(o)
        change = next((c for kk, _, c in o.points(variant) if kk == k), None)
        if change is not None:
            found.append((o, change))
    return found


def mean_interval(outcomes, variant, k_of):
    """(low, high) of the mean change across the pairs in the means: the percentile interval of the mean of their
    bootstrap statistics, resample by resample (independent across tasks); None unless every pair has one."""
    found = _changes(outcomes, variant, k_of)
    return mean_across_interval([o.distribution(variant, k_of(o)) for o, _ in found])


def _score(score, se=None):
    if score is None:
        return "–"
    return f"{score:.4f}" + ("" if se is None else f" ± {se:.4f}")


def _verdict(interval):
    if interval is None:
        return "no interval"
    return "yes" if interval[0] > 0 or interval[1] < 0 else "no"


def headline_markdown(by_model):
    lines = ["## Mean relative change across tasks", "",
             "| model | variant | ½ of the heads constant | all heads constant | tasks | distinguishable from 0 |",
             "| --- | --- | ---: | ---: | ---: | --- |"]
    for model, outcomes in by_model.items():
        done = [o for o in outcomes if o.results is not None]
        for variant in (variants(done[0]) if done else ["PAPA"]):
            cells = []
            for k_of in (lambda o: half_k(o.total_heads), lambda o: o.total_heads):
                mean, count = mean_changes(outcomes, variant, k_of)
                cells.append((mean, count, mean_interval(outcomes, variant, k_of)))
            (half, n_half, half_ci), (full, n_full, full_ci) = cells
            label = variant if variant == "PAPA" else CONTROLS[variant].label
            lines.append(f"| {model} | {label} | {change_text(half, *(half_ci or (None, None)))} | "
                         f"{change_text(full, *(full_ci or (None, None)))} | {max(n_half, n_full)} of "
                         f"{len(outcomes)} | ½: {_verdict(half_ci)}; all: {_verdict(full_ci)} |")
    return lines + ["", "Distinguishable from 0: the 95% interval of the mean change across tasks (* in the cell) "
                        "excludes 0.", ""]


def model_markdown(model, outcomes):
    """Per task and variant: the k = 0 score (± SE), then score and change at each k; means across tasks last."""
    ks = sorted({k for o in outcomes for k in o.ks})
    total = outcomes[0].total_heads
    header = ["task", "metric", "n", "k=0 (± SE)"] + [f"k={k} ({k / total:.2f})" for k in ks if k]
    lines = [f"## {model}", "", "| " + " | ".join(header) + " |",
             "| --- | --- | ---: |" + " ---: |" * (len(header) - 3)]
    for o in outcomes:
        if o.results is None:
            error = first_line(o.error or "")[:160]
            lines.append(f"| {o.task.name} | failed: {error} |" + " |" * (len(header) - 2))
            continue
        n = o.results.eval_samples
        for variant in variants(o):
            by_k = {k: (score, change) for k, score, change in o.points(variant)}
            label = o.task.name if variant == "PAPA" else f"{o.task.name}, {CONTROLS[variant].label}"
            if o.results.warning and variant == "PAPA":
                label += " (k=0 at chance: not in the means)"
            zero = by_k.get(0, (None, None))[0]
            metric = o.metric if o.task.direction(o.metric) > 0 else f"{o.metric} (lower is better)"
            cells = [label, metric, str(n or "–"),
                     _score(zero, standard_error(o.metric, zero, n)) if variant == "PAPA" else "(same)"]
            for k in ks:
                if k:
                    score, change = by_k.get(k, (None, None))
                    shown = change_text(change, *o.interval(variant, k))
                    cells.append("–" if score is None else f"{score:.4f} ({shown})")
            lines.append("| " + " | ".join(cells) + " |")
    done = [o for o in outcomes if o.results is not None]
    for variant in (variants(done[0]) if done else []):
        label = "PAPA" if variant == "PAPA" else CONTROLS[variant].label
        means = [change_text(mean_changes(outcomes, variant, lambda o, k=k: k)[0],
                             *(mean_interval(outcomes, variant, lambda o, k=k: k) or (None, None))) for k in ks if k]
        lines.append(f"| mean across tasks ({label}) | | | | " + " | ".join(means) + " |")
    return lines + [""]


def _by_model(outcomes):
    by_model = {}
    for o in outcomes:
        by_model.setdefault(o.model, []).append(o)
    return by_model


def task_stability_rows(by_model):
    """ranking_stability.csv's rows between the tasks of each model (their rankings of the same seed); a task is
    named model/task when the grid has several models."""
    rows = []
    for model, outcomes in by_model.items():
        done = [o for o in outcomes if o.results is not None and o.results.rankings]
        name = (lambda o: f"{model}/{o.task.name}") if len(by_model) > 1 else (lambda o: o.task.name)
        ks = sorted({k for o in done for k in o.ks})
        rows += task_stability({name(o): o.results.rankings for o in done}, ks)
    return rows


def summary_markdown(outcomes):
    by_model = _by_model(outcomes)
    tasks = list(dict.fromkeys(o.task.name for o in outcomes))
    failed = [o for o in outcomes if o.results is None]
    lines = [f"# PAPA grid: {len(by_model)} model(s) x {len(tasks)} task(s)", "",
             "Each task's first main metric. Relative change = the change in performance, negative = worse: "
             "(score − score at k=0) / |score at k=0|, or (score at k=0 − score) / |score at k=0| for a metric where "
             "lower is better (perplexity); every "
             "variant against the same k=0 run; a mean is over the tasks that finished with k=0 above chance. ± SE: approximate "
             "standard error of the score on n evaluation examples (accuracy √(p(1−p)/n), correlations "
             "√((1−r²)/(n−2)), none for F1 or perplexity). [low, high]: 95% interval of a change from a paired bootstrap over the "
             "seeds and the evaluation examples (a mean's: over its tasks' resamples); * marks one that excludes 0.",
             ""]
    lines += headline_markdown(by_model)
    for model, pairs in by_model.items():
        lines += model_markdown(model, pairs)
    if any(o.controls for o in outcomes):
        lines += grid_differences_markdown(by_model, half_k, {c: CONTROLS[c].label for o in outcomes for c in o.controls})
    done = [o for o in outcomes if o.results is not None]
    several = len(by_model) > 1
    lines += claims_markdown([((o.model, o.task.name) if several else (o.task.name,),
                               claims(o.results.rows, f"eval_{o.metric}", o.total_heads)) for o in done],
                             ("model", "task") if several else ("task",)).splitlines() + [""]
    stability = task_stability_rows(by_model)
    if stability:
        lines += stability_markdown(stability, "tasks (the same seed's rankings)").splitlines() + [""]
    if failed:
        lines += ["## Failed pairs", ""] + [f"- {o.model} × {o.task.name}: {o.error}" for o in failed] + [""]
    return "\n".join(lines)


def summary_panels(outcomes):
    """plot_summary's input: per model, per task, per variant label, (fraction, relative change) points
    (pairs at chance left out, as from the means: their changes are noise on a far larger scale)."""
    panels = {}
    for o in outcomes:
        if o.results is None or o.results.warning:
            continue
        tasks = panels.setdefault(o.model, {})
        tasks[o.task.name] = {("PAPA" if v == "PAPA" else CONTROLS[v].label):
                              [(k / o.total_heads, change, *o.interval(v, k)) for k, _, change in o.points(v)]
                              for v in variants(o)}
    return list(panels.items())


def write_summary(output_dir, outcomes):
    """summary.csv, summary.md and (when a pair finished above chance) summary.png in `output_dir`; returns the
    markdown."""
    from . import plots

    save_text(summary_csv(summary_rows(outcomes)), os.path.join(output_dir, "summary.csv"))
    write_stability(task_stability_rows(_by_model(outcomes)), output_dir)
    markdown = summary_markdown(outcomes)
    save_text(markdown, os.path.join(output_dir, "summary.md"))
    panels, png = summary_panels(outcomes), os.path.join(output_dir, "summary.png")
    if panels:
        plots.plot_summary(panels, png)
    elif os.path.exists(png):  # nothing to plot (every pair failed or is at chance): no stale figure
        os.remove(png)
    return markdown
