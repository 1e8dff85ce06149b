"""Pass-key accuracy against k, the number of heads made constant: one line per ranking (or random order), each point
the share of keys found with its 95% Wilson interval (heatmap.py's: a bootstrap's collapses to a point at 0 or
all found), from runs in folders named by k.

    python findings/long_context_retrieval/accuracy_vs_k.py --ks 0 66 135 --stock RUNS/k_0 \
        --runs "taylor=RUNS/k_{k}" "retrieval=RUNS/retrieval_k_{k}" "order 1=RUNS_random20/order_1_k{k}" \
        --title "SmolLM2, T = 2048" --out accuracy_vs_k.png --table accuracy_vs_k.md

k = 0 is the stock model's run (`--stock`) for every line. A folder that does not exist is a point not measured
(left out, and "–" in the table). Names starting with "order" are drawn thin, grey and dashed: the random orders.
The lines are set a little apart along k, so that equal shares stay visible.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import emit, found  # noqa: E402
from heatmap import wilson  # noqa: E402


def points(pattern, ks, stock):
    """{k: (share, low, high, found, scored)} of the runs that exist; k = 0 from the stock run."""
    out = {}
    for k in ks:
        folder = stock if k == 0 else pattern.format(k=k)
        if not os.path.isfile(os.path.join(folder, "eval_predictions.jsonl")):
            continue
        hits = [v for v, _ in found(folder).values()]
        low, high = wilson(sum(hits), len(hits))
        out[k] = (sum(hits) / len(hits), low, high, int(sum(hits)), len(hits))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ks", nargs="+", type=int, required=True, help="the numbers of constant heads")
    parser.add_argument("--stock", required=True, help="the stock run's folder (k = 0)")
    parser.add_argument("--runs", nargs="+", required=True, help="name=FOLDER pattern, {k} standing for k")
    parser.add_argument("--title", default="")
    parser.add_argument("--out", required=True, help="the figure")
    parser.add_argument("--table", default=None, help="the markdown table")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    lines = ["| run | " + " | ".join(f"k = {k}" for k in args.ks) + " |", "| --- |" + " ---: |" * len(args.ks)]
    colours = [c for c in plt.rcParams["axes.prop_cycle"].by_key()["color"] if c != "#7f7f7f"]  # grey: the random
    rankings = iter(colours * 3)
    for i, spec in enumerate(args.runs):
        name, _, pattern = spec.rpartition("=")
        measured = points(pattern, args.ks, args.stock)
        cells = [f"{p[3]}/{p[4]}: {p[0]:.2f} [{p[1]:.2f}, {p[2]:.2f}]" if (p := measured.get(k)) else "–"
                 for k in args.ks]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
        ks = sorted(measured)
        share = np.array([measured[k][0] for k in ks])
        errors = np.array([[measured[k][0] - measured[k][1] for k in ks],  # below, above the share
                           [measured[k][2] - measured[k][0] for k in ks]])
        random = name.startswith("order")
        style = (dict(color="grey", lw=0.8, ls="--", alpha=0.7) if random
                 else dict(color=next(rankings), lw=1.6, marker="o"))
        shift = (i - len(args.runs) / 2) * 0.004 * max(args.ks)  # apart, so that equal shares stay visible
        ax.errorbar([k + shift for k in ks], share, yerr=errors, capsize=2, label=name, **style)
    ax.set_xlabel("heads made constant (k)")
    ax.set_ylabel("pass keys found")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(args.title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.savefig(args.out, dpi=120, bbox_inches="tight")
    emit(lines, args.table)


if __name__ == "__main__":
    main()
