"""The paper's three claims as a table: each with its estimate, its 95% interval and a plain word.

Hassid et al. (2022) claim, for probes on pretrained encoders:

    1. half of the heads constant changes little        PAPA's change at k = ½ of the heads
    2. all heads constant costs a modest drop           PAPA's change at k = all heads (8% on average in the paper)
    3. the ranking beats a random order                 random order − PAPA at k = ½ (< 0: the ranking does better)

"Little" and "modest" need numbers to be testable: here a drop of at most LITTLE (5%) and at most MODEST (10%)
of the k = 0 score. A claim *holds* when its whole interval lies on its side of the line, *does not hold* when the
whole interval lies on the other side, and otherwise *cannot tell at this budget*: more seeds or evaluation
examples would narrow the interval. A claim whose k or control was not run says so.
"""

import math

from .intervals import change_text

LITTLE = 0.05  # claim 1: a drop of at most 5% of the k = 0 score
MODEST = 0.10  # claim 2: at most 10% (the paper's mean drop with all heads constant was 8%)

HOLDS, FAILS, UNSURE, NOT_RUN = "holds", "does not hold", "cannot tell at this budget", "not run"


def half_k(total_heads):
    """The k of '½ of the heads constant': rounded half up, as the sweep's default k values."""
    return math.floor(total_heads / 2 + 0.5)


def at_least(low, high, line):
    """The word for 'the value is at least `line`' from its interval."""
    if low is None or high is None:
        return UNSURE
    return HOLDS if low >= line else FAILS if high < line else UNSURE


def below(low, high, line):
    """The word for 'the value is below `line`' (strictly: a difference of exactly 0 does not beat anything)."""
    if low is None or high is None:
        return UNSURE
    return HOLDS if high < line else FAILS if low >= line else UNSURE


def claims(rows, metric_key, total_heads, best=None):
    """[(claim, k, estimate, low, high, word)] for one sweep's merged rows (results.csv) and main metric. `best`:
    (ranker, column of the random orders' mean − that ranker) when a sweep has several rankers or random orders
    (papa.reporting.orderings.best_ranker); the third claim then reads it."""
    by_k = {row["k"]: row for row in rows}
    half, change, diff = half_k(total_heads), f"rel_change_{metric_key}", f"diff_random_order_{metric_key}"
    third = "the ranking beats a random order (random order − PAPA < 0 at ½)"
    if best is not None:
        third = f"the best ranker ({best[0]}) beats the random orders (their mean − {best[0]} < 0 at ½)"
        diff = best[1]

    def measured(k, column, line, word_for=at_least):
        row = by_k.get(k)
        if row is None or row.get(column) is None:
            return (k, None, None, None, NOT_RUN)
        value, low, high = row[column], row.get(f"{column}_ci_low"), row.get(f"{column}_ci_high")
        return (k, value, low, high, word_for(low, high, line))

    return [
        ("½ of the heads constant changes little (a drop of at most 5%)", *measured(half, change, -LITTLE)),
        ("all heads constant costs a modest drop (at most 10%)", *measured(total_heads, change, -MODEST)),
        (third, *measured(half, diff, 0.0, below)),
    ]


def claims_markdown(table, header_cells=()):
    """Rows of claims, `table` = [(leading cells, claims(...))], as one markdown table under "## Claims"."""
    leading = list(header_cells)
    lines = ["## Claims", "", "| " + " | ".join(leading + ["claim", "k", "estimate [95% interval]", "verdict"]) + " |",
             "|" + " --- |" * len(leading) + " --- | ---: | ---: | --- |"]
    for cells, rows in table:
        for claim, k, value, low, high, word in rows:
            estimate = "–" if value is None else change_text(value, low, high)
            lines.append("| " + " | ".join(list(cells) + [claim, str(k), estimate, f"**{word}**"]) + " |")
    lines += ["", "The paper's claims (Hassid et al., 2022), each tested on its 95% interval: *holds* when the whole "
                  "interval is on the claim's side of its line (a drop of at most 5% at ½, at most 10% with all "
                  "heads; a difference below 0 for the ranking), *does not hold* when the whole interval is on the "
                  "other side, else *cannot tell at this budget*.", ""]
    return "\n".join(lines)
