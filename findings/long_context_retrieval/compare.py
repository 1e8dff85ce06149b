"""Pass-key runs side by side: each run's keys found (exact match) with its 95% interval, and each run's paired
difference from a reference run on the examples both scored (a bootstrap over those examples).

    python findings/long_context_retrieval/compare.py --reference stock=RUNS/stock_smollm2_t8192 \
        --runs "taylor ½=RUNS/t8192/taylor_k135" "order 1 ½=RUNS/t8192/random1_k135" ... --out table.md

Runs are folders holding eval_predictions.jsonl (papa-glue --task_name passkey --do_eval). Examples are paired by
index; their token digests (`block`) must agree, so two runs evaluated on other texts are refused. Each row: keys
found / scored, the share [95% percentile bootstrap interval], and run − reference in points of exact match with
its interval (* where it excludes 0). With --pairs "A:B", also A − B for two named runs, on their shared examples.
With --metric token_accuracy (the copy task, whose answer is hundreds of tokens), an example's value is the share of
its answer tokens that are the greedy argmax, not all-or-nothing.
"""

import argparse
import json
import os

import numpy as np

SAMPLES, SEED = 10_000, 0


def found(folder, metric="exact"):
    """{index: (value, its digest)} of a run's eval_predictions.jsonl: 1.0 if the key was found else 0.0 (exact), or
    the share of the answer's tokens predicted (token_accuracy)."""
    out = {}
    with open(os.path.join(folder, "eval_predictions.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            value = r["correct"] / r["tokens"] if metric == "token_accuracy" else float(r["correct"] == r["tokens"])
            out[r["index"]] = (value, r["block"])
    return out


def shared(a, b):
    """(values of a, values of b) on the indices both hold, their digests checked."""
    common = sorted(set(a) & set(b))
    for i in common:
        if a[i][1] != b[i][1]:
            raise SystemExit(f"example {i} differs between the runs (other texts): not comparable")
    return np.array([a[i][0] for i in common]), np.array([b[i][0] for i in common])


def interval(values, rng):
    """(mean, low, high): the share and its 95% percentile bootstrap interval."""
    draws = rng.integers(0, len(values), size=(SAMPLES, len(values)))
    means = values[draws].mean(1)
    return float(values.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def difference(a, b, rng):
    """(mean of a − b, low, high), a paired bootstrap over the examples both scored."""
    draws = rng.integers(0, len(a), size=(SAMPLES, len(a)))
    diffs = (a[draws] - b[draws]).mean(1)
    return float((a - b).mean()), float(np.percentile(diffs, 2.5)), float(np.percentile(diffs, 97.5))


def emit(lines, path=None):
    """Print the markdown table of `lines`, and write it to `path` if given (every script here ends so)."""
    table = "\n".join(lines) + "\n"
    if path:
        with open(path, "w") as f:
            f.write(table)
    print(table)


def points(value, low, high):
    star = "*" if low > 0 or high < 0 else ""
    return f"{100 * value:+.0f} [{100 * low:+.0f}, {100 * high:+.0f}]{star}"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", required=True, help="name=FOLDER of the run the others are compared with")
    parser.add_argument("--runs", nargs="+", required=True, help="name=FOLDER of each run")
    parser.add_argument("--pairs", nargs="*", default=[], help="A:B, two names whose difference A − B is reported")
    parser.add_argument("--out", default=None, help="the markdown table")
    parser.add_argument("--metric", choices=("exact", "token_accuracy"), default="exact",
                        help="an example's value: its key found (exact), or its share of answer tokens predicted")
    args = parser.parse_args()
    rng = np.random.default_rng(SEED)
    reference_name, _, reference_folder = args.reference.rpartition("=")
    runs = dict(spec.rpartition("=")[::2] for spec in args.runs)
    reference = found(reference_folder, args.metric)
    scored = {name: found(folder, args.metric) for name, folder in runs.items()}
    exact = args.metric == "exact"
    count = (lambda v: f"{int(v.sum())}/{len(v)}") if exact else (lambda v: f"{len(v)}")
    lines = [f"| run | {'keys found' if exact else 'examples'} | share [95% interval] | "
             f"run − {reference_name}, points [95% interval] |", "| --- | ---: | ---: | ---: |"]
    values = np.array([v for v, _ in reference.values()])
    mean, low, high = interval(values, rng)
    lines.append(f"| {reference_name} | {count(values)} | {mean:.2f} [{low:.2f}, {high:.2f}] | |")
    for name, values in scored.items():
        a, b = shared(values, reference)
        mean, low, high = interval(a, rng)
        lines.append(f"| {name} | {count(a)} | {mean:.2f} [{low:.2f}, {high:.2f}] | "
                     f"{points(*difference(a, b, rng))} (n = {len(a)}) |")
    if args.pairs:
        lines += ["", "| pair | difference, points [95% interval] | examples |", "| --- | ---: | ---: |"]
        for pair in args.pairs:
            first, second = pair.split(":")
            a, b = shared(scored[first], scored[second])
            lines.append(f"| {first} − {second} | {points(*difference(a, b, rng))} | {len(a)} |")
    emit(lines, args.out)


if __name__ == "__main__":
    main()
