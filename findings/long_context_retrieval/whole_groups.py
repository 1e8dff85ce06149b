"""How many whole K/V groups a ranking of query heads makes constant at each k: memory (the group's keys, its K
projection) comes back only when every query head of a group is constant.

    python findings/long_context_retrieval/whole_groups.py --rankings "taylor=RUNS/sort_taylor_heads" \
        --ks 66 135 204 --group_size 3 --out whole_groups.md
"""

import argparse
import json
import os
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import emit  # noqa: E402


def whole_groups(heads, k, group_size):
    """(whole groups, groups touched) among the first k [layer, head] pairs; group g holds heads g·size … g·size + size − 1."""
    per_group = Counter((layer, head // group_size) for layer, head in heads[:k])
    return sum(n == group_size for n in per_group.values()), len(per_group)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rankings", nargs="+", required=True, help="name=FOLDER holding sorted_heads.json")
    parser.add_argument("--ks", nargs="+", type=int, required=True, help="the numbers of constant query heads")
    parser.add_argument("--group_size", type=int, required=True, help="query heads per K/V group")
    parser.add_argument("--out", default=None, help="the markdown table")
    args = parser.parse_args()
    lines = ["| ranking | " + " | ".join(f"k = {k}" for k in args.ks) + " |", "| --- |" + " ---: |" * len(args.ks)]
    for spec in args.rankings:
        name, _, folder = spec.rpartition("=")
        heads = json.load(open(os.path.join(folder, "sorted_heads.json")))
        cells = [f"{w} whole, {t} touched" for w, t in (whole_groups(heads, k, args.group_size) for k in args.ks)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    emit(lines, args.out)


if __name__ == "__main__":
    main()
