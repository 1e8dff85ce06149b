"""A run made outside a sweep (best_of from its own choice, optimal_output with a longer training) against the
sweep's runs at the same k (docs/replacements.md): perplexity, change vs k = 0, and the paired differences, with the
sweep's own bootstrap (papa.sweep.intervals: 1000 resamples of the held-out blocks, the same draws for every run).

    python docs/replacements/compare_runs.py SWEEP_DIR RUN_PATTERN [--label NAME] [--ks 135 270] [--task lm_qnli]

RUN_PATTERN is the run's folder with {k} for k, e.g. outputs/bestof/bestof_k_{k}. The sweep's PAPA run (k_<k>/) and
whichever of its mean output, mean_corrected and optimal_output runs exist are compared."""
import argparse
import json
import os

from papa.data.tasks import get_task
from papa.sweep.intervals import PredictionStore, change_distribution, percentile_interval

SWEEP_RUNS = {"PAPA": "k_{k}", "mean_output": "mean_k_{k}", "mean_corrected": "corrected_k_{k}",
              "optimal_output": "optimal_k_{k}"}

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("sweep_dir")
parser.add_argument("run_pattern")
parser.add_argument("--label", default="best_of")
parser.add_argument("--ks", type=int, nargs="+", default=[135, 270])
parser.add_argument("--task", default="lm_qnli")
args = parser.parse_args()

store = PredictionStore(get_task(args.task))
ref = os.path.join(args.sweep_dir, "k_0")
base = json.load(open(os.path.join(ref, "eval_results.json")))["eval_perplexity"]
for k in args.ks:
    runs = {n: os.path.join(args.sweep_dir, p.format(k=k)) for n, p in SWEEP_RUNS.items()}
    runs = {n: f for n, f in runs.items() if os.path.isdir(f)}
    runs[args.label] = args.run_pattern.format(k=k)
    dist = {n: change_distribution(store, [f], [ref], "eval_perplexity", 1000) for n, f in runs.items()}
    change = {}
    for n, f in runs.items():
        ppl = json.load(open(os.path.join(f, "eval_results.json")))["eval_perplexity"]
        change[n] = 100 * (base - ppl) / base
        lo, hi = percentile_interval(dist[n])
        print(f"k={k} {n}: perplexity {ppl:.2f}, change {change[n]:+.1f}% [{100 * lo:+.1f}, {100 * hi:+.1f}]")
    for other in runs:
        if other != args.label:
            lo, hi = percentile_interval(dist[args.label] - dist[other])
            print(f"k={k} {args.label} - {other}: {change[args.label] - change[other]:+.1f} "
                  f"[{100 * lo:+.1f}, {100 * hi:+.1f}] pp")
