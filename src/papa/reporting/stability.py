"""Is the ranking itself stable? Agreement between rankings of the same heads: seeds of a sweep, tasks of a grid.

With --rank_per_seed every seed trains its own λ; in a grid every task does. For two rankings a and b:

    Kendall τ       the rank correlation of their λ over all heads (τ-b: ties counted as scipy does); 1 = the
                    same order, 0 = unrelated (what two independent random orders give on average)
    dynamic overlap at each k of the sweep: of the N − k heads each ranking keeps dynamic (the last N − k rows of
                    its sorted_heads.json), the fraction both keep. Two independent random orders keep
                    (N − k)² / N heads in common on average, so chance is (N − k) / N.

`ranking_stability.csv` (in a sweep's folder: between its seeds; in a grid's: between its tasks, per seed they
share) has one row per pair and k — a, b, seed_a, seed_b, kendall_tau, k, dynamic_heads, dynamic_overlap,
chance_overlap — and then the means over the pairs (seed_a = seed_b = "mean").
"""

import csv
import io
import itertools
import os

import numpy as np

from ..artifacts import load_lambdas
from ..io import load_json, save_text

COLUMNS = ["a", "b", "seed_a", "seed_b", "kendall_tau", "k", "dynamic_heads", "dynamic_overlap", "chance_overlap"]
FILE = "ranking_stability.csv"


def read_ranking(folder):
    """(scores [L, H], sorted_heads [[layer, head], ...]) of a ranking run's folder, or None when it has not run:
    λ for the λ ranker (lambdas.npy), each head's rank in sorted_heads.json for the others (papa.method.rankers)."""
    lambdas, ranking = os.path.join(folder, "lambdas.npy"), os.path.join(folder, "sorted_heads.json")
    if not os.path.isfile(ranking) or not (os.path.isfile(lambdas) or
                                           os.path.isfile(os.path.join(folder, "head_scores.csv"))):
        return None
    order = load_json(ranking, f"delete {folder} to redo the ranking run")
    if os.path.isfile(lambdas):
        return load_lambdas(lambdas, order), order
    layers, heads = max(l for l, _ in order) + 1, max(h for _, h in order) + 1
    positions = np.zeros((layers, heads))
    for rank, (layer, head) in enumerate(order):
        positions[layer, head] = rank
    return positions, order


def kendall_tau(x, y):
    """Kendall's τ-b of two score vectors."""
    from scipy.stats import kendalltau

    return float(kendalltau(np.ravel(x), np.ravel(y)).statistic)


def dynamic_overlap(order_a, order_b, k):
    """The fraction of the N − k heads kept dynamic by ranking a (its last N − k) that ranking b keeps too."""
    keep_a, keep_b = {tuple(h) for h in order_a[k:]}, {tuple(h) for h in order_b[k:]}
    return len(keep_a & keep_b) / len(keep_a) if keep_a else None


def pair_rows(a, b, seed_a, seed_b, ranking_a, ranking_b, ks):
    """The rows of one pair of rankings (λ, sorted heads), one per k with 0 < k < N."""
    (lambdas_a, order_a), (lambdas_b, order_b) = ranking_a, ranking_b
    total = len(order_a)
    tau = kendall_tau(lambdas_a, lambdas_b)
    return [{"a": a, "b": b, "seed_a": seed_a, "seed_b": seed_b, "kendall_tau": tau, "k": k,
             "dynamic_heads": total - k, "dynamic_overlap": dynamic_overlap(order_a, order_b, k),
             "chance_overlap": (total - k) / total} for k in ks if 0 < k < total]


def with_means(rows, group=("a", "b")):
    """`rows` followed by their means per k (and per `group`), labelled seed_a = seed_b = "mean"."""
    means = {}
    for row in rows:
        means.setdefault(tuple(row[g] for g in group) + (row["k"],), []).append(row)
    out = list(rows)
    if len(rows) > len(means):  # several pairs per group: their mean
        for same in means.values():
            first = same[0]
            out.append({**{g: first[g] for g in group}, "seed_a": "mean", "seed_b": "mean", "k": first["k"],
                        **{c: float(np.mean([r[c] for r in same])) for c in ("kendall_tau", "dynamic_overlap")},
                        "dynamic_heads": first["dynamic_heads"], "chance_overlap": first["chance_overlap"]})
    return out


def seed_stability(task_name, rankings, ks):
    """Rows between every pair of seeds' rankings ({seed: (λ, sorted heads)}) of one task."""
    rows = []
    for (sa, ra), (sb, rb) in itertools.combinations(rankings.items(), 2):
        rows += pair_rows(task_name, task_name, sa, sb, ra, rb, ks)
    return with_means(rows)


def task_stability(rankings, ks):
    """Rows between every pair of tasks ({task: {seed: (λ, sorted heads)}} of one model), per seed both have."""
    rows = []
    for (ta, by_seed_a), (tb, by_seed_b) in itertools.combinations(rankings.items(), 2):
        for seed in [s for s in by_seed_a if s in by_seed_b]:
            rows += pair_rows(ta, tb, seed, seed, by_seed_a[seed], by_seed_b[seed], ks)
    return with_means(rows)


def stability_csv(rows):
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow(["" if row.get(c) is None else repr(row[c]) if isinstance(row[c], float) else row[c]
                         for c in COLUMNS])
    return out.getvalue()


def write_stability(rows, folder):
    """ranking_stability.csv in `folder` (atomically); none without a pair to compare."""
    path = os.path.join(folder, FILE)
    if rows:
        save_text(stability_csv(rows), path)
    elif os.path.exists(path):
        os.remove(path)


def stability_markdown(rows, between):
    """The table of Kendall τ and dynamic overlaps (with chance) per pair, `between` "seeds" or "tasks"."""
    ks = sorted({r["k"] for r in rows})
    pairs = list(dict.fromkeys((r["a"], r["b"], r["seed_a"], r["seed_b"]) for r in rows))
    lines = [f"## Ranking stability between {between}", "",
             "| pair | Kendall τ | " + " | ".join(f"dynamic overlap at k={k} (chance)" for k in ks) + " |",
             "| --- | ---: |" + " ---: |" * len(ks)]
    for a, b, sa, sb in pairs:
        same = {r["k"]: r for r in rows if (r["a"], r["b"], r["seed_a"], r["seed_b"]) == (a, b, sa, sb)}
        first = next(iter(same.values()))
        name = (f"seed {sa} vs {sb}" if a == b else f"{a} vs {b}, seed {sa}") if sa != "mean" else (
            "**mean**" if a == b else f"**{a} vs {b}, mean**")
        cells = [f"{same[k]['dynamic_overlap']:.2f} ({same[k]['chance_overlap']:.2f})" if k in same else "–" for k in ks]
        lines.append(f"| {name} | {first['kendall_tau']:.2f} | " + " | ".join(cells) + " |")
    lines += ["", "Kendall τ: the rank correlation of the two rankings over every head (of λ for the λ ranker, of the "
                  "ranks in sorted_heads.json for the others; 0: unrelated orders). "
                  "Dynamic overlap: of the heads each ranking keeps dynamic at k, the fraction both keep; chance, "
                  "for two random orders, is the fraction kept, (N − k) / N.", ""]
    return "\n".join(lines)
