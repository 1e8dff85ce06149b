"""The seeds' tables → results.csv: per k, each metric's mean over seeds and its std across seeds, and each
relative change's 95% interval; results_per_seed.csv keeps every (k, seed) row.

Each seed's table is what a one-seed sweep builds (papa.reporting.results.build_results and
add_control_columns): its changes are against the same seed's k = 0 run. A change's point estimate is
the mean over seeds of those per-seed changes, and its interval comes from the paired bootstrap over
seeds and evaluation examples (papa.reporting.intervals) on the runs' eval_predictions.jsonl.
"""

import os

import numpy as np

from ..errors import PapaError
from ..run_folders import run_folder
from .intervals import PredictionStore, change_distribution, percentile_interval

FIXED_COLUMNS = ("k", "fraction_constant")
CHANGE_PREFIX = "rel_change_"


def _mean(values):
    """Mean of the known values (one seed: the value itself, unchanged); None when none is known."""
    known = [v for v in values if v is not None]
    if not known:
        return None
    return known[0] if len(known) == 1 else sum(known) / len(known)


def _std(values):
    """Sample standard deviation (ddof 1) across seeds; None with fewer than two known values."""
    known = [v for v in values if v is not None]
    return float(np.std(known, ddof=1)) if len(known) > 1 else None


def union(lists):
    return list(dict.fromkeys(c for columns in lists for c in columns))


def merged_columns(columns):
    """results.csv's columns from a seed table's: n_seeds, and after each metric its `_std`, after each change its
    `_ci_low` and `_ci_high`."""
    merged = []
    for column in columns:
        merged.append(column)
        if column == "fraction_constant":
            merged.append("n_seeds")
        elif column.startswith(CHANGE_PREFIX):
            merged += [f"{column}_ci_low", f"{column}_ci_high"]
        elif column not in FIXED_COLUMNS:
            merged.append(f"{column}_std")
    return merged


def merge_seeds(tables):
    """(columns, rows) of results.csv from the seeds' [(seed, columns, rows)]: one row per k. A change is None when
    it is undefined for one of the seeds (its k = 0 value is 0)."""
    columns = union(c for _, c, _ in tables)
    by_k = {}
    for _, _, rows in tables:
        for row in rows:
            by_k.setdefault(row["k"], []).append(row)
    merged = []
    for k in sorted(by_k):
        seed_rows = by_k[k]
        row = {"k": k, "fraction_constant": seed_rows[0]["fraction_constant"], "n_seeds": len(seed_rows)}
        for column in columns:
            if column in FIXED_COLUMNS:
                continue
            values = [r.get(column) for r in seed_rows]
            if column.startswith(CHANGE_PREFIX):
                row[column] = None if None in values else _mean(values)
            else:
                row[column], row[f"{column}_std"] = _mean(values), _std(values)
        merged.append(row)
    return merged_columns(columns), merged


def per_seed_rows(tables):
    """(columns, rows) of results_per_seed.csv: `seed`, then a seed table's columns; by k, then seed."""
    columns = ["seed"] + union(c for _, c, _ in tables)
    rows = [{"seed": seed, **row} for seed, _, rows in tables for row in rows]
    return columns, sorted(rows, key=lambda r: r["k"])  # stable: the seeds stay in their order


def change_metric(column, controls):
    """(control or None for PAPA, eval_results key) of a `rel_change_...` column."""
    rest = column[len(CHANGE_PREFIX):]
    control = next((c for c in controls if rest.startswith(f"{c}_eval_")), None)
    return control, rest if control is None else rest[len(control) + 1:]


def add_intervals(columns, rows, plan):
    """Fill each change's `_ci_low`/`_ci_high` from the bootstrap; returns ({(change column, k): statistics},
    notes: why some intervals are missing)."""
    store, distributions, notes = PredictionStore(plan.task), {}, []
    tags = [tag for _, tag in plan.seed_runs]

    def folders(control, k):
        return [os.path.join(plan.output_dir, run_folder(control, k, plan.total_heads, tag)) for tag in tags]

    for column in [c for c in columns if c.startswith(CHANGE_PREFIX) and not c.endswith(("_ci_low", "_ci_high"))]:
        control, metric = change_metric(column, plan.controls)
        for row in rows:
            stats = None
            if row.get(column) is not None and 0 in plan.ks:
                runs, references = folders(control, row["k"]), folders(None, 0)
                try:
                    stats = (np.zeros(plan.bootstrap_samples) if runs == references
                             else change_distribution(store, runs, references, metric, plan.bootstrap_samples))
                except PapaError as err:
                    if str(err) not in notes:
                        notes.append(str(err))
            interval = None if stats is None else percentile_interval(stats)
            row[f"{column}_ci_low"], row[f"{column}_ci_high"] = interval or (None, None)
            if interval is not None:
                distributions[(column, row["k"])] = stats
    return distributions, notes
