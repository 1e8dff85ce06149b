"""Which heads each ranker keeps dynamic at k: the profiles (papa.method.profiles) of the last N − k heads of each
ranking, from the sweep's head_scores.csv files, and the random orders' for reference.

    python findings/smollm2_rankers_lm_qnli/kept_dynamic.py SWEEP_FOLDER K [--out FILE.md]
"""

import argparse
import collections
import csv
import glob
import json
import os

KINDS = ("first token", "previous token", "self", "broad")


def profiles(sweep):
    """{(layer, head): profile} from any ranking folder's head_scores.csv (the profile is the averages')."""
    path = sorted(glob.glob(os.path.join(sweep, "sort*", "head_scores.csv")))[0]
    with open(path) as f:
        return {(int(r["layer"]), int(r["head"])): r["profile"] for r in csv.DictReader(f)}


def kept(order, k, kinds):
    counts = collections.Counter(kinds[tuple(h)] for h in order[k:])
    return [counts.get(kind, 0) for kind in KINDS]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep")
    parser.add_argument("k", type=int)
    parser.add_argument("--out")
    args = parser.parse_args()
    kinds = profiles(args.sweep)
    rows = []
    for folder in sorted(glob.glob(os.path.join(args.sweep, "sort*"))) + sorted(
            glob.glob(os.path.join(args.sweep, "random_order*"))):
        if not os.path.isfile(os.path.join(folder, "sorted_heads.json")):
            continue  # a ranking run not finished
        order = json.load(open(os.path.join(folder, "sorted_heads.json")))
        name = os.path.basename(folder)
        if name == "sort":
            name = f"sort ({json.load(open(os.path.join(args.sweep, 'sweep.json')))['rankers'][0]})"
        rows.append((name, kept(order, args.k, kinds)))
    total = [sum(1 for v in kinds.values() if v == kind) for kind in KINDS]
    lines = [f"Heads kept dynamic at k = {args.k} (of {len(kinds)}), by the profile of their averages:", "",
             "| ranking | " + " | ".join(KINDS) + " |", "| --- |" + " ---: |" * len(KINDS),
             "| all heads | " + " | ".join(map(str, total)) + " |"]
    lines += [f"| {name} | " + " | ".join(map(str, counts)) + " |" for name, counts in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
