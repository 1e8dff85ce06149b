"""best_of against the sweep's runs (docs/replacements.md): perplexity, change vs k = 0 and paired differences, with
the sweep's own bootstrap (papa.sweep.intervals: 1000 resamples, the same draws for every run).
Usage: python compare_best_of.py SWEEP_DIR BEST_OF_DIR (the sweep's output folder; the folder of bestof_k_<k>/)."""
import json
import sys

from papa.data.tasks import get_task
from papa.sweep.intervals import PredictionStore, change_distribution, percentile_interval

src, out = sys.argv[1], sys.argv[2]
store = PredictionStore(get_task("lm_qnli"))
ref = f"{src}/k_0"
base = json.load(open(f"{ref}/eval_results.json"))["eval_perplexity"]
for k in (135, 270):
    runs = {"PAPA": f"{src}/k_{k}", "mean_output": f"{src}/mean_k_{k}", "mean_corrected": f"{src}/corrected_k_{k}",
            "best_of": f"{out}/bestof_k_{k}"}
    dist = {n: change_distribution(store, [f], [ref], "eval_perplexity", 1000) for n, f in runs.items()}
    change = {}
    for n, f in runs.items():
        ppl = json.load(open(f"{f}/eval_results.json"))["eval_perplexity"]
        change[n] = 100 * (base - ppl) / base
        lo, hi = percentile_interval(dist[n])
        print(f"k={k} {n}: perplexity {ppl:.2f}, change {change[n]:+.1f}% [{100 * lo:+.1f}, {100 * hi:+.1f}]")
    for other in ("PAPA", "mean_output", "mean_corrected"):
        lo, hi = percentile_interval(dist["best_of"] - dist[other])
        print(f"k={k} best_of - {other}: {change['best_of'] - change[other]:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] pp")
