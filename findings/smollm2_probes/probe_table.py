"""repeat/results.md and sst2/results.md (and their .csv) from the hand runs' folders, as run.sh's chains leave them
(k_<k>/ and random_k_<k>/, each with eval_results.json and eval_predictions.jsonl):

    python findings/smollm2_probes/probe_table.py OUT/smollm2_repeat_lt --task_name repeat \
        --title "SmolLM2-135M on repeat (last-token probe)"

Per run: accuracy with its binomial standard error, the relative change against PAPA's k = 0 run with a 95% paired
bootstrap interval over the evaluation examples (papa.reporting.intervals.paired_bootstrap: 1 000 resamples, seed 0,
the same examples drawn for the run and for k = 0), and the share of examples predicted 1. The committed tables were
made this way by hand, before this script existed (their figures are not made here).
"""

import argparse
import math
import os

import numpy as np

from papa.data.tasks import get_task
from papa.io import save_text
from papa.reporting.results import relative_change
from papa.reporting.intervals import BOOTSTRAP_SEED, PredictionStore, paired_bootstrap, percentile_interval
from papa.runs.predictions import predictions_file, read_predictions

COLUMNS = ["variant", "k", "fraction", "accuracy", "se", "rel_change", "ci_low", "ci_high", "predicted_1", "n"]


def runs(folder):
    """[(variant, k, run folder)], PAPA's first, each by k."""
    found = []
    for name in os.listdir(folder):
        if os.path.isfile(os.path.join(folder, name, "eval_results.json")) and name.startswith(("k_", "random_k_")):
            variant = "random order" if name.startswith("random_k_") else "PAPA"
            found.append((variant != "PAPA", int(name.rsplit("_", 1)[1]), variant, os.path.join(folder, name)))
    return [(variant, k, path) for _, k, variant, path in sorted(found)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="a chain's output folder (OUT/smollm2_repeat_lt or OUT/smollm2_sst2_lt)")
    parser.add_argument("--task_name", required=True, help="the runs' task (repeat or sst2)")
    parser.add_argument("--title", required=True, help="the table's heading")
    parser.add_argument("--total_heads", type=int, default=270, help="the model's heads (SmolLM2: 30 x 9)")
    parser.add_argument("--samples", type=int, default=1000, help="bootstrap resamples")
    args = parser.parse_args(argv)
    found = runs(args.folder)
    reference = dict(((v, k), p) for v, k, p in found).get(("PAPA", 0))
    if reference is None:
        raise SystemExit(f"{args.folder} has no k_0 run with eval_results.json: the change needs PAPA's k = 0")
    store = PredictionStore(get_task(args.task_name))
    at_zero, labels = store.metric(reference, "eval_accuracy")
    rows = []
    for variant, k, path in found:
        _, predictions = read_predictions(os.path.join(path, predictions_file()))
        at_k, run_labels = store.metric(path, "eval_accuracy")
        if run_labels != labels:
            raise SystemExit(f"{path} was evaluated on other examples than {reference}")
        n = len(labels)
        accuracy, base = (float(f(np.arange(n)[None])[0]) for f in (at_k, at_zero))  # the whole evaluation set
        change = relative_change(accuracy, base)  # None where k = 0 scored 0
        low = high = 0.0
        if (variant, k) != ("PAPA", 0):
            low, high = percentile_interval(
                paired_bootstrap([(at_k, at_zero, n)], args.samples, seed=BOOTSTRAP_SEED)) or (None, None)
        rows.append({"variant": variant, "k": k, "fraction": k / args.total_heads, "accuracy": accuracy,
                     "se": math.sqrt(accuracy * (1 - accuracy) / n), "rel_change": change, "ci_low": low,
                     "ci_high": high, "predicted_1": sum(int(p) == 1 for p in predictions) / n, "n": n})
    save_text(",".join(COLUMNS) + "\n" + "".join(",".join("" if r[c] is None else str(r[c]) for c in COLUMNS) + "\n"
                                                  for r in rows),
              os.path.join(args.folder, "results.csv"))
    n = rows[0]["n"]
    lines = [f"# {args.title}", "", f"n = {n} evaluation examples, one seed (42). Change vs k = 0 with a 95% paired "
             f"bootstrap interval ({args.samples} resamples of the evaluation examples, seed {BOOTSTRAP_SEED}); "
             "* marks one that excludes 0.", "",
             "| variant | k | constant heads (fraction) | accuracy (± SE) | change vs k=0 [95% interval] "
             "| share predicted 1 |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        change = "undefined (k = 0 scored 0)" if r["rel_change"] is None else f"{100 * r['rel_change']:+.1f}%"
        if (r["variant"], r["k"]) != ("PAPA", 0) and r["ci_low"] is not None:
            star = "*" if r["ci_low"] > 0 or r["ci_high"] < 0 else ""
            change += f" [{100 * r['ci_low']:+.1f}, {100 * r['ci_high']:+.1f}]{star}"
        lines.append(f"| {r['variant']} | {r['k']} | {r['fraction']:.3f} | {r['accuracy']:.4f} (± {r['se']:.4f}) | "
                     f"{change} | {r['predicted_1']:.2f} |")
    save_text("\n".join(lines) + "\n", os.path.join(args.folder, "results.md"))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
