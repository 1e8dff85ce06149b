"""The needle-in-a-haystack heatmap: pass-key accuracy by context length and depth, one panel per model, from the
eval_predictions.jsonl of stock runs (`papa-glue --task_name passkey --do_eval`, one folder per length).

    python findings/long_context_retrieval/heatmap.py --runs smollm2=RUNS/stock_smollm2_t{T} \
        gemma3=RUNS/stock_gemma3_t{T} --lengths 1024 2048 4096 8192 \
        --out findings/long_context_retrieval/stock_heatmap.png --table findings/long_context_retrieval/stock.md

Each cell: the fraction of that length's examples at that depth whose greedy continuation is the key (the record's
`correct` equals its `tokens`), with the number of examples. The table adds each length's accuracy with a 95%
Wilson interval.
"""

import argparse
import json
import math
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import emit  # noqa: E402


def records(folder):
    with open(os.path.join(folder, "eval_predictions.jsonl")) as f:
        return [json.loads(line) for line in f]


def by_depth(folder):
    """{depth (rounded to a quarter): (found, examples)}."""
    cells = defaultdict(lambda: [0, 0])
    for r in records(folder):
        cell = cells[round(r["depth"] * 4) / 4]
        cell[0] += int(r["correct"] == r["tokens"])
        cell[1] += 1
    return dict(sorted(cells.items()))


def wilson(found, n, z=1.96):
    """The 95% Wilson score interval of a proportion found / n."""
    if n == 0:
        return float("nan"), float("nan")
    p = found / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="+", required=True, help="model=FOLDER pattern, {T} standing for the length")
    parser.add_argument("--lengths", nargs="+", type=int, required=True)
    parser.add_argument("--out", required=True, help="the figure")
    parser.add_argument("--table", default=None, help="the markdown table")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = dict(spec.rpartition("=")[::2] for spec in args.runs)
    fig, axes = plt.subplots(1, len(models), figsize=(4.6 * len(models), 3.2), squeeze=False)
    lines = ["| model | T | found | accuracy [95% Wilson] | by depth 0 / ¼ / ½ / ¾ / 1 |", "| --- | ---: | ---: | ---: | --- |"]
    for ax, (model, pattern) in zip(axes[0], models.items()):
        grid, depths = [], None
        for T in args.lengths:
            folder = pattern.format(T=T)
            if not os.path.isfile(os.path.join(folder, "eval_predictions.jsonl")):
                grid.append(None)
                continue
            cells = by_depth(folder)
            depths = list(cells)
            grid.append([cells[d][0] / cells[d][1] for d in depths])
            found, n = sum(c[0] for c in cells.values()), sum(c[1] for c in cells.values())
            low, high = wilson(found, n)
            shown = " / ".join(f"{cells[d][0]}/{cells[d][1]}" for d in depths)
            lines.append(f"| {model} | {T} | {found}/{n} | {found / n:.2f} [{low:.2f}, {high:.2f}] | {shown} |")
        rows = [g if g is not None else [float("nan")] * len(depths or [0]) for g in grid]
        image = ax.imshow(rows, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
        ax.set_xticks(range(len(depths or [])), [f"{d:g}" for d in depths or []])
        ax.set_yticks(range(len(args.lengths)), [str(T) for T in args.lengths])
        ax.set_xlabel("depth of the key (fraction of the filler)")
        if ax is axes[0][0]:
            ax.set_ylabel("context length (tokens)")
        ax.set_title(f"{model}: pass key found (stock)")
        for i, row in enumerate(rows):
            for j, value in enumerate(row):
                if not math.isnan(value):
                    ax.text(j, i, f"{value:.1f}", ha="center", va="center", fontsize=8)
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8, label="accuracy")
    fig.savefig(args.out, dpi=120, bbox_inches="tight")
    emit(lines, args.table)


if __name__ == "__main__":
    main()
