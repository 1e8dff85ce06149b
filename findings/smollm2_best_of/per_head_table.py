"""The per-head picture in numbers (findings/smollm2_best_of/README.md): from a head_replacements.csv or a
best_of.csv, per head profile, the median single-head loss change of each replacement, how often each is the
least costly, and how often the constant pattern beats the mean output and mean_corrected; then the costliest
heads under constant attention.

    python findings/smollm2_best_of/per_head_table.py CSV [CSV ...] [--profiles HEAD_SCORES_CSV] [--top 8]

Several files (best_of.csv of several seeds) are pooled head by head: each Δ is the mean of the files' Δs, and the
least costly replacement is taken from those means. A best_of.csv has no profile column: --profiles names a
head_scores.csv (any ranking run's on the same averages) to take them from.

The issue's question: the constant pattern Ā·V(x) should beat the mean output E[A·V] on positional heads (first
token, previous token, self: pattern and values uncorrelated) and lose to it on content (broad) heads."""
import argparse
import csv

import numpy as np
from scipy.stats import spearmanr

KINDS = ("first token", "previous token", "self", "broad")

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("csv_paths", nargs="+")
parser.add_argument("--profiles", help="a head_scores.csv to take the profiles from (for files without them)")
parser.add_argument("--top", type=int, default=8)
args = parser.parse_args()


def read(path):
    with open(path, newline="") as f:
        return {(int(r["layer"]), int(r["head"])): r for r in csv.DictReader(f)}


files = [read(p) for p in args.csv_paths]
heads = sorted(files[0])
names = [c[len("delta_"):] for c in next(iter(files[0].values())) if c.startswith("delta_")]
others = [n for n in ("mean_output", "mean_corrected") if n in names]  # what the constant pattern is set against
profiles = read(args.profiles) if args.profiles else files[0]
delta = {(h, n): float(np.mean([float(f[h][f"delta_{n}"]) for f in files])) for h in heads for n in names}
profile = {h: profiles[h]["profile"] for h in heads}
has_variance = "pattern_variance" in files[0][heads[0]]
variance = {h: float(np.mean([float(f[h]["pattern_variance"]) for f in files])) for h in heads} if has_variance else {}
best = {h: min(names, key=lambda n: (delta[h, n], n)) for h in heads}


extra = " | median pattern variance" if has_variance else ""
print("| profile | heads | " + " | ".join(f"median Δ {n}" for n in names) + " | least costly: "
      + " / ".join(names) + "".join(f" | constant < {n}" for n in others) + extra + " |")
print("| --- | ---: | " + " | ".join("---:" for _ in names) + " | ---:" * (len(others) + 1 + has_variance) + " |")
for kind in KINDS + ("all",):
    group = [h for h in heads if kind == "all" or profile[h] == kind]
    if not group:
        continue
    medians = " | ".join(f"{np.median([delta[h, n] for h in group]):+.4f}" for n in names)
    counts = " / ".join(str(sum(best[h] == n for h in group)) for n in names)
    beats = "".join(f" | {sum(delta[h, 'constant'] < delta[h, n] for h in group)} / {len(group)}" for n in others)
    tail = f" | {np.median([variance[h] for h in group]):.3f}" if has_variance else ""
    print(f"| {kind} | {len(group)} | {medians} | {counts}{beats}{tail} |")

if has_variance:
    print()
    for n in others:
        gap = [delta[h, "constant"] - delta[h, n] for h in heads]
        rho = spearmanr([variance[h] for h in heads], gap).statistic  # ties get average ranks
        print(f"Spearman(pattern variance, Δconstant − Δ{n}) = {rho:+.2f} over {len(heads)} heads")

print(f"\n| layer | head | profile | " + " | ".join(f"Δ {n}" for n in names) + (" | pattern variance" if has_variance
                                                                              else "") + " |")
print("| ---: | ---: | --- | " + " | ".join("---:" for _ in names) + (" | ---:" if has_variance else "") + " |")
for h in sorted(heads, key=lambda h: -delta[h, "constant"])[:args.top]:
    print(f"| {h[0]} | {h[1]} | {profile[h]} | " + " | ".join(f"{delta[h, n]:+.4f}" for n in names)
          + (f" | {variance[h]:.3f}" if has_variance else "") + " |")
