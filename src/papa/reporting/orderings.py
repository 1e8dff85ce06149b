"""Orderings in the results: each ranker against every random order and against their mean.

A sweep with several rankers or random orders lays out their runs as controls (papa.sweep.orderings: `ranker_<B>`
in sort_B/ and B_k_<k>/, `random_order_<i>` in random_order_<i>/), sharing PAPA's runs at k = 0 and k = all heads.
Every ranker r gets, per k, its paired difference from each random order c and from their mean (both changes
against the same k = 0 run; > 0: the random orders do better than r):

    diff_<c>_eval_<m>                       c − PAPA's ranker (papa.reporting.differences, as every control)
    diff_<c>_vs_ranker_<r>_eval_<m>         c − ranker r (the other rankers)
    diff_random_mean_vs_<r>_eval_<m>        the random orders' mean change − ranker r's (every ranker, PAPA's too)

with intervals from the same bootstrap draws (resample by resample). results.md shows them in one table, the random
orders' spread beside it, and each ranker's ranking time; the claims' third row reads the best ranker at ½ (the one
with the best change there, chosen on the same data: a selection the reader should know of) against the mean of
the random orders.
"""

import os

import numpy as np

from ..errors import PapaError
from ..io import load_json_object
from ..run_folders import STAMP, is_random_order
from .intervals import change_text, percentile_interval


def ranker_change_columns(plan, metric):
    """{ranker: its change column}: PAPA's ranker's is rel_change_<m>, another's rel_change_ranker_<r>_<m>."""
    return {r: f"rel_change_{metric}" if i == 0 else f"rel_change_ranker_{r}_{metric}"
            for i, r in enumerate(plan.rankers)}


def random_orders_in(plan):
    return [c for c in plan.controls if is_random_order(c)]


def mean_column(ranker, metric):
    return f"diff_random_mean_vs_{ranker}_{metric}"


def add_ordering_differences(columns, rows, distributions, plan, metrics):
    """Each ranker's difference from each random order (other rankers; PAPA's are the controls' differences) and
    from their mean, with intervals, in place."""
    orders = random_orders_in(plan)
    if not orders:
        return
    for metric in metrics:
        for index, (ranker, own) in enumerate(ranker_change_columns(plan, metric).items()):
            if own not in columns:
                continue
            pairs = [] if index == 0 else [(f"diff_{c}_vs_ranker_{ranker}_{metric}", [c]) for c in orders]
            for column, members in pairs + [(mean_column(ranker, metric), orders)]:
                columns += [column, f"{column}_ci_low", f"{column}_ci_high"]
                for row in rows:
                    changes = [row.get(f"rel_change_{c}_{metric}") for c in members]
                    value = None if row.get(own) is None or None in changes else np.mean(changes) - row[own]
                    row[column] = None if value is None else float(value)
                    stats = [distributions.get((f"rel_change_{c}_{metric}", row["k"])) for c in members]
                    mine = distributions.get((own, row["k"]))
                    interval = None
                    if value is not None and mine is not None and all(s is not None for s in stats):
                        diff = np.mean([np.asarray(s) for s in stats], axis=0) - np.asarray(mine)
                        distributions[(column, row["k"])] = diff
                        interval = percentile_interval(diff)
                    row[f"{column}_ci_low"], row[f"{column}_ci_high"] = interval or (None, None)


def best_ranker(rows, plan, metric, k):
    """(ranker, its mean-difference column) with the best change at k, or None without random orders."""
    if not random_orders_in(plan):
        return None
    row = next((r for r in rows if r["k"] == k), {})
    changes = {r: row.get(c) for r, c in ranker_change_columns(plan, metric).items()}
    known = [r for r, v in changes.items() if v is not None]
    if not known:
        return None
    best = max(known, key=lambda r: (changes[r], -plan.rankers.index(r)))
    return best, mean_column(best, metric)


def ranking_seconds(plan, ranker):
    """The wall time of `ranker`'s ranking runs (summed over seeds), from their stage.json; None if unknown."""
    total = 0.0
    for seed in plan.ranking_seeds:
        try:
            seconds = load_json_object(os.path.join(plan.ranking_folder(seed, ranker), STAMP), "").get("seconds")
        except PapaError:
            return None
        if seconds is None:
            return None
        total += seconds
    return total


def orderings_markdown(rows, plan, metric, stability=None):
    """results.md's table of each ranker against the random orders: its value, its change, the random orders'
    spread and the mean difference with its interval; then each ranker's time and seeds' agreement."""
    orders = random_orders_in(plan)
    rankers = list(plan.rankers)
    columns = ranker_change_columns(plan, metric)
    short = metric[len("eval_"):]
    lines = [f"## Rankers against {len(orders)} random order{'s' * (len(orders) != 1)}: {short}", "",
             "| k | " + " | ".join(f"{r}: {short} (change) | random mean − {r}" for r in rankers)
             + " | random orders: range of " + short + " |",
             "|" + " ---: |" * (2 + 2 * len(rankers))]
    for row in rows:
        if row["k"] in (0, plan.total_heads):  # every ordering replaces no head, or all of them: the same run
            continue
        cells = []
        for r in rankers:
            value_column = metric if r == rankers[0] else f"ranker_{r}_{metric}"
            value, change = row.get(value_column), row.get(columns[r])
            low, high = row.get(f"{columns[r]}_ci_low"), row.get(f"{columns[r]}_ci_high")
            cells.append("–" if value is None else f"{value:.4g} ({change_text(change, low, high)})")
            mean = mean_column(r, metric)
            cells.append(change_text(row.get(mean), row.get(f"{mean}_ci_low"), row.get(f"{mean}_ci_high"))
                         if row.get(mean) is not None else "–")
        values = [v for c in orders if (v := row.get(f"{c}_{metric}")) is not None]
        cells.append(f"{min(values):.4g} – {max(values):.4g}" if values else "–")
        lines.append(f"| {row['k']} | " + " | ".join(cells) + " |")
    times = [f"{r}: {'–' if (s := ranking_seconds(plan, r)) is None else f'{s:.0f} s'}" for r in rankers]
    lines += ["", "random mean − r: the mean change of the random orders minus ranker r's, in points of the k=0 score, "
                  "with its 95% paired-bootstrap interval (< 0: r beats the random orders; * where the interval "
                  "excludes 0). Ranking time (all seeds' ranking runs): " + "; ".join(times) + "."]
    if stability:
        lines.append("Seeds' agreement (Kendall τ of each ranker's rankings, mean over pairs of seeds): "
                     + "; ".join(f"{r}: {tau:.2f}" for r, tau in stability.items()) + ".")
    return "\n".join(lines + [""])
