"""Paired differences between variants: is a control's change really different from PAPA's?

Each variant's change at k has an interval against k = 0 (papa.reporting.intervals); a reader comparing two
variants needs the interval of their difference. For a control c and k,

    diff_c(k) = change_c(k) − change_PAPA(k)      (both against the shared k = 0 run; > 0: c does better)

and its bootstrap statistics are the two changes' statistics subtracted resample by resample. That pairing
is exact, not approximate: every change's bootstrap of one sweep draws from a generator seeded by the task
alone (`task_seed`) with the same numbers of seeds and evaluation examples, so resample r of PAPA's change and
resample r of the control's drew the same seeds and the same examples. The difference's interval therefore keeps
what the two runs share (the k = 0 run, the examples' difficulty, each seed's probe), and is much narrower than
the two intervals side by side suggest when the variants move together.

Columns: `diff_<control>_eval_<metric>` and its `_ci_low` / `_ci_high`, in results.csv; results.md shows
them in a table of their own, and summary.md means them across tasks the way it means the changes.
"""

import numpy as np

from ..run_folders import shares_papa_run
from .intervals import change_text, mean_across_interval, percentile_interval

PAPAS_RUN = "(PAPA's run)"  # a control whose run at this k is PAPA's own: no difference to estimate

DIFF_PREFIX = "diff_"


def difference_column(control, metric_key):
    """`diff_<control>_<eval_metric>`."""
    return f"{DIFF_PREFIX}{control}_{metric_key}"


def add_differences(columns, rows, distributions, controls, metric_keys):
    """Append each control's difference from PAPA (and its interval) for each main metric `eval_<m>` of
    `metric_keys`, in place; the differences' bootstrap statistics join `distributions` under their column."""
    for control in controls:
        for metric in metric_keys:
            papa, other = f"rel_change_{metric}", f"rel_change_{control}_{metric}"
            if other not in columns or papa not in columns:
                continue
            column = difference_column(control, metric)
            columns += [column, f"{column}_ci_low", f"{column}_ci_high"]
            for row in rows:
                a, b = row.get(other), row.get(papa)
                row[column] = None if a is None or b is None else a - b
                stats_a, stats_b = distributions.get((other, row["k"])), distributions.get((papa, row["k"]))
                interval = None
                if row[column] is not None and stats_a is not None and stats_b is not None:
                    stats = np.asarray(stats_a) - np.asarray(stats_b)  # resample by resample: the same draws
                    distributions[(column, row["k"])] = stats
                    interval = percentile_interval(stats)
                row[f"{column}_ci_low"], row[f"{column}_ci_high"] = interval or (None, None)
    return columns, rows


def distinguishable(low, high):
    return low is not None and high is not None and (low > 0 or high < 0)


def differences_markdown(rows, metric_key, controls, labels, total_heads):
    """results.md's table of differences from PAPA for `metric_key`, with the headline of which are
    distinguishable from 0; `labels`: {control: its label}."""
    lines = [f"## Differences from PAPA: {metric_key[len('eval_'):]}", "",
             "| k | constant heads (fraction) | " + " | ".join(f"{labels[c]} − PAPA" for c in controls) + " |",
             "|" + " ---: |" * (2 + len(controls))]
    found = []
    for row in rows:
        if row["k"] == 0:
            continue  # every variant is PAPA's own k = 0 run
        cells = []
        for control in controls:
            column = difference_column(control, metric_key)
            value, low, high = row.get(column), row.get(f"{column}_ci_low"), row.get(f"{column}_ci_high")
            if shares_papa_run(control, row["k"], total_heads):
                cells.append(PAPAS_RUN)
                continue
            cells.append(change_text(value, low, high))
            if distinguishable(low, high):
                found.append(f"{labels[control]} at k={row['k']} ({'better' if low > 0 else 'worse'}: "
                             f"{change_text(value, low, high)})")
        lines.append(f"| {row['k']} | {row['k'] / total_heads:.3f} | " + " | ".join(cells) + " |")
    headline = ("Distinguishable from 0 (95% interval excludes it): " + "; ".join(found) + "."
                if found else "No difference from PAPA is distinguishable from 0 at this budget.")
    lines += ["", "A difference is the control's change minus PAPA's, both against the same k=0 run, in percentage "
                  "points of the k=0 score (> 0: the control does better than PAPA). Its 95% interval comes from the "
                  "same bootstrap draws as the two changes' (the same seeds and evaluation examples), so what the "
                  "runs share cancels (docs/error_bars.md). " + headline, ""]
    return "\n".join(lines)


def grid_differences_markdown(by_model, half_k, labels):
    """summary.md's differences from PAPA at ½ and all heads: per model, control and task, then the mean across the
    tasks in the means (the interval of the mean of their bootstrap statistics, resample by resample, as the
    changes' means); `by_model`: {model: [PairOutcome]}."""
    lines = ["## Differences from PAPA", "",
             "| model | control | task | ½ of the heads: control − PAPA | all heads: control − PAPA |",
             "| --- | --- | --- | ---: | ---: |"]
    found = []
    for model, outcomes in by_model.items():
        done = [o for o in outcomes if o.results is not None]
        for control in dict.fromkeys(c for o in done for c in o.controls):
            stats_by_k, points_by_k = {"half": [], "all": []}, {"half": [], "all": []}
            same_run = {"half": False, "all": False}  # the control's run is PAPA's (random order, all heads)
            for o in done:
                if control not in o.controls:
                    continue
                column = difference_column(control, f"eval_{o.metric}")
                by_k = {r["k"]: r for r in o.results.rows}
                cells = []
                for which, k in (("half", half_k(o.total_heads)), ("all", o.total_heads)):
                    if shares_papa_run(control, k, o.total_heads):
                        same_run[which] = True
                        cells.append(PAPAS_RUN)
                        continue
                    row = by_k.get(k, {})
                    value, low, high = (row.get(f"{column}{end}") for end in ("", "_ci_low", "_ci_high"))
                    cells.append(change_text(value, low, high))
                    if not o.results.warning:  # a pair at chance stays out of the means, as in the changes'
                        stats_by_k[which].append((o.results.distributions or {}).get((column, k)))
                        if value is not None:
                            points_by_k[which].append(value)
                    if distinguishable(low, high) and value != 0:
                        found.append(f"{labels[control]} on {o.task.name} at {which} ({change_text(value, low, high)})")
                lines.append(f"| {model} | {labels[control]} | {o.task.name} | {cells[0]} | {cells[1]} |")
            means = []
            for which in ("half", "all"):
                if same_run[which]:
                    means.append(PAPAS_RUN)
                    continue
                stats, points = stats_by_k[which], points_by_k[which]
                point = sum(points) / len(points) if points else None
                means.append(change_text(point, *(mean_across_interval(stats) or (None, None))))
            lines.append(f"| {model} | {labels[control]} | **mean across tasks** | {means[0]} | {means[1]} |")
    headline = ("Distinguishable from 0: " + "; ".join(found) + "." if found
                else "No difference from PAPA is distinguishable from 0 at this budget.")
    return lines + ["", "control − PAPA: the control's change minus PAPA's, both against the same k=0 run (> 0: the "
                        "control does better), with the 95% interval of the paired bootstrap (the same draws). "
                        + headline, ""]

