"""A run made outside a sweep (best_of from its own choice, optimal_output with a longer training) against the
sweep's runs at the same k (findings/smollm2_best_of/README.md): perplexity, change vs k = 0, and the paired
differences, with the sweep's own bootstrap (papa.reporting.intervals: 1000 resamples of the held-out blocks, and of
the seeds with --seeds, the same draws for every run).

    python findings/smollm2_best_of/compare_runs.py SWEEP_DIR RUN_PATTERN [--label NAME] [--ks 135 270]
        [--task lm_qnli] [--seeds 1 2 3]

RUN_PATTERN is the run's folder with {k} for k, e.g. outputs/bestof/bestof_k_{k}, and {seed} for the seed with
--seeds (the sweep's runs are then its k_<k>_seed_<seed> folders). The sweep's PAPA run (k_<k>/) and whichever of
its mean output, mean_corrected and optimal_output runs exist are compared. With seeds, the perplexity printed is
the mean over the seeds, and the per-seed values follow it."""
import argparse
import json
import os

from papa.data.tasks import get_task
from papa.reporting.intervals import PredictionStore, change_distribution, percentile_interval

SWEEP_RUNS = {"PAPA": "k_{k}", "mean_output": "mean_k_{k}", "mean_corrected": "corrected_k_{k}",
              "optimal_output": "optimal_k_{k}"}

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("sweep_dir")
parser.add_argument("run_pattern")
parser.add_argument("--label", default="best_of")
parser.add_argument("--ks", type=int, nargs="+", default=[135, 270])
parser.add_argument("--task", default="lm_qnli")
parser.add_argument("--seeds", nargs="+", default=None, help="the sweep's --seeds (default: a sweep without seeds)")
args = parser.parse_args()

suffixes = [""] if args.seeds is None else [f"_seed_{s}" for s in args.seeds]
store = PredictionStore(get_task(args.task))
refs = [os.path.join(args.sweep_dir, f"k_0{x}") for x in suffixes]


def perplexity(folder):
    return json.load(open(os.path.join(folder, "eval_results.json")))["eval_perplexity"]


base = [perplexity(ref) for ref in refs]  # the k = 0 perplexity, per seed (the same held-out blocks)
for k in args.ks:
    runs = {n: [os.path.join(args.sweep_dir, p.format(k=k) + x) for x in suffixes] for n, p in SWEEP_RUNS.items()}
    runs = {n: fs for n, fs in runs.items() if all(os.path.isdir(f) for f in fs)}
    runs[args.label] = [args.run_pattern.format(k=k, seed=s) for s in (args.seeds or [None])]
    dist = {n: change_distribution(store, fs, refs, "eval_perplexity", 1000) for n, fs in runs.items()}
    change = {}
    for n, fs in runs.items():
        ppl = [perplexity(f) for f in fs]
        # the sweep's change: the mean over seeds of each seed's change against its own k = 0 run
        change[n] = sum(100 * (b - p) / b for b, p in zip(base, ppl)) / len(ppl)
        lo, hi = percentile_interval(dist[n])
        per_seed = "" if len(ppl) == 1 else f" (seeds: {' / '.join(f'{p:.2f}' for p in ppl)})"
        print(f"k={k} {n}: perplexity {sum(ppl) / len(ppl):.2f}{per_seed}, change {change[n]:+.1f}% "
              f"[{100 * lo:+.1f}, {100 * hi:+.1f}]")
    for other in runs:
        if other != args.label:
            lo, hi = percentile_interval(dist[args.label] - dist[other])
            print(f"k={k} {args.label} - {other}: {change[args.label] - change[other]:+.1f} "
                  f"[{100 * lo:+.1f}, {100 * hi:+.1f}] pp")
