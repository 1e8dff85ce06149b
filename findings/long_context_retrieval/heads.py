"""Which K/V groups retrieve, and whether each ranking keeps them dynamic.

    python findings/long_context_retrieval/heads.py --retrieval RUNS/sweep/sort_retrieval \
        --rankings taylor=RUNS/sweep/sort "text taylor=RUNS/text/sort" ... --fraction 0.5 --out heads.md

Reads head_scores.csv of K/V-group rankings (--rank_kv_groups: one unit per group, its query heads side by side).
The retrieval ranking's score is Wu et al.'s retrieval score of the group (its most retrieving head): the groups
scoring at least --threshold (0.1, Wu et al.'s) are the retrieval groups, listed with their layer, their heads'
profiles (papa.method.profiles) and score. For each other ranking: the rank of each retrieval group (0 = made
constant first), and how many of them stay dynamic with the first --fraction of the groups constant.
"""

import argparse
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import emit  # noqa: E402


def groups(folder):
    """[(unit, layer, [heads], [profiles], score)] in ranked order, from a ranking's head_scores.csv."""
    rows = list(csv.DictReader(open(os.path.join(folder, "head_scores.csv"))))
    units = {}
    for row in rows:
        unit = units.setdefault(int(row["unit"]), [int(row["layer"]), [], [], float(row["score"])])
        unit[1].append(int(row["head"]))
        unit[2].append(row["profile"])
    return [(u, *units[u]) for u in sorted(units)]


def key(entry):
    """A group's identity whatever the ranking: (layer, its first head)."""
    return entry[1], min(entry[2])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--retrieval", required=True, help="the retrieval ranking's folder")
    parser.add_argument("--rankings", nargs="+", required=True, help="name=FOLDER of each other ranking")
    parser.add_argument("--threshold", type=float, default=0.1)
    parser.add_argument("--fraction", type=float, default=0.5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    retrieval = groups(args.retrieval)
    heads_per_group = len(retrieval[0][2])
    chosen = [g for g in retrieval if g[4] >= args.threshold]
    chosen.sort(key=lambda g: -g[4])
    lines = [f"Retrieval groups (score ≥ {args.threshold}): {len(chosen)} of {len(retrieval)} K/V groups "
             f"({heads_per_group} query heads each).", "",
             "| layer | heads | profiles | retrieval score |", "| ---: | --- | --- | ---: |"]
    lines += [f"| {g[1]} | {min(g[2])}–{max(g[2])} | {', '.join(g[3])} | {g[4]:.2f} |" for g in chosen]
    constant = round(args.fraction * len(retrieval))
    lines += ["", f"Where each ranking puts them (rank 0 = made constant first; with the first {constant} of "
                  f"{len(retrieval)} groups constant, a group ranked {constant} or later stays dynamic):", "",
              "| ranking | ranks of the retrieval groups (in the order above) | kept dynamic |", "| --- | --- | ---: |"]
    for spec in args.rankings:
        name, _, folder = spec.rpartition("=")
        rank = {key(g): i for i, g in enumerate(groups(folder))}
        ranks = [rank[key(g)] for g in chosen]
        lines.append(f"| {name} | {', '.join(map(str, ranks))} | {sum(r >= constant for r in ranks)} of {len(ranks)} |")
    emit(lines, args.out)


if __name__ == "__main__":
    main()
