"""Each seed's ranking against each random order, paired, from an lm sweep run with
`--seeds S1 S2 ... --rank_per_seed --random_orders N` (folders k_<k>_seed_<s>, random[i]_k_<k>_seed_<s>).

The sweep draws its random orders from --seed alone, so every seed has the same N orders, and an lm evaluation is
deterministic: an order evaluated under one seed stands for all (its folder under another seed is used where the
seed's own is missing; where both exist, their blocks must agree). `--orders_from OTHER_SWEEP` takes the orders
from another sweep of the same model, task, averages and held-out blocks (random[i]_k_<k> or random[i]_k_<k>_seed_<s>),
e.g. a one-seed sweep that already evaluated them; every order's blocks must match the seed's k = 0 blocks.

    python findings/smollm2_rankers_lm_qnli/seeds_vs_random.py SWEEP_FOLDER --ks 68 135 203 [--orders_from SWEEP] \
        [--out FILE.md]

Per run folder, eval_predictions.jsonl holds each held-out block's summed NLL and token count; perplexity =
exp(Σ NLL / Σ tokens). A difference is the sweep's (results.md, "Differences from PAPA"): the order's change minus
the ranking's, both against the seed's k = 0, in points of the k = 0 perplexity, (ppl_ranking − ppl_order) / ppl₀
× 100 (< 0: the order is worse). Its 95% interval: a bootstrap over the blocks (10 000 resamples, the same blocks
for every run of a seed), so it covers the evaluation text's variation, not the averaging data's.
"""

import argparse
import glob
import json
import os
import re

import numpy as np


def blocks(folder):
    """(block hashes, NLL sums, token counts) of a run folder, in index order."""
    with open(os.path.join(folder, "eval_predictions.jsonl")) as f:
        rows = sorted((json.loads(line) for line in f), key=lambda r: r["index"])
    return [r["block"] for r in rows], np.array([r["nll_sum"] for r in rows]), np.array([r["tokens"] for r in rows])


def order_folder(sweep, order, k, seed):
    """The order's run at k: the seed's own, else an unseeded one, else another seed's (the orders do not depend on
    the seed)."""
    names = [f"{order}_k_{k}_seed_{seed}", f"{order}_k_{k}"]
    names += sorted(os.path.basename(p) for p in glob.glob(os.path.join(sweep, f"{order}_k_{k}_seed_*")))
    for name in names:
        folder = os.path.join(sweep, name)
        if os.path.isfile(os.path.join(folder, "eval_predictions.jsonl")):
            return folder
    raise SystemExit(f"no run of {order} at k = {k} in {sweep}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", help="the sweep's output folder")
    parser.add_argument("--ks", type=int, nargs="+", required=True, help="the k values to compare")
    parser.add_argument("--orders_from", help="take the random orders' runs from this sweep folder instead")
    parser.add_argument("--samples", type=int, default=10000, help="bootstrap resamples")
    parser.add_argument("--out", help="write the markdown here too")
    args = parser.parse_args()
    seeds = sorted({int(m.group(1)) for p in glob.glob(os.path.join(args.sweep, "k_0_seed_*"))
                    if (m := re.search(r"_seed_(\d+)$", p))})
    order_sweep = args.orders_from or args.sweep
    orders = sorted({m.group(1) for p in glob.glob(os.path.join(order_sweep, "random*_k_*"))
                     if (m := re.match(r"(random\d*)_k_", os.path.basename(p)))}, key=lambda o: int(o[6:] or 1))
    title = os.path.basename(os.path.normpath(args.sweep))
    if args.orders_from:
        title += f" (the orders' runs from {os.path.basename(os.path.normpath(args.orders_from))})"
    lines = [f"# Each seed's ranking against its random orders: {title}", "",
             "Perplexity, and the paired difference order − ranking in points of k = 0 (< 0: the order is worse), "
             f"[95% interval] of a bootstrap over the held-out blocks ({args.samples} resamples); * marks an "
             "interval that excludes 0.", "",
             "| seed | k | ranking | " + " | ".join(f"order {i + 1}" for i in range(len(orders))) + " |",
             "| ---: | ---: | ---: | " + " | ".join("---:" for _ in orders) + " |"]
    ranking_better, order_better, total = 0, 0, 0
    for seed in seeds:
        hashes, nll0, tok0 = blocks(os.path.join(args.sweep, f"k_0_seed_{seed}"))
        rng = np.random.default_rng(seed)
        idx = np.concatenate([np.arange(len(hashes))[None], rng.integers(0, len(hashes), (args.samples, len(hashes)))])

        def ppl(nll, tok):
            return np.exp(nll[idx].sum(-1) / tok[idx].sum(-1))  # (1 + samples,)

        base = ppl(nll0, tok0)
        for k in args.ks:
            runs = {"ranking": os.path.join(args.sweep, f"k_{k}_seed_{seed}")}
            runs.update({o: order_folder(order_sweep, o, k, seed) for o in orders})
            values = {}
            for name, folder in runs.items():
                h, nll, tok = blocks(folder)
                if h != hashes:
                    raise SystemExit(f"{folder} evaluated other blocks than k = 0 of seed {seed}")
                values[name] = ppl(nll, tok)
            cells = []
            for o in orders:
                diff = 100 * (values["ranking"] - values[o]) / base
                low, high = np.percentile(diff[1:], [2.5, 97.5])
                star = "*" if low > 0 or high < 0 else ""
                ranking_better, order_better, total = ranking_better + (high < 0), order_better + (low > 0), total + 1
                cells.append(f"{values[o][0]:.1f} ({diff[0]:+.0f} [{low:+.0f}, {high:+.0f}]{star})")
            lines.append(f"| {seed} | {k} | {values['ranking'][0]:.1f} | " + " | ".join(cells) + " |")
    lines += ["", f"{ranking_better + order_better} of {total} differences exclude 0: {ranking_better} with the "
              f"ranking better, {order_better} with the order better."]
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        from papa.io import save_text

        save_text(report, args.out)


if __name__ == "__main__":
    main()
