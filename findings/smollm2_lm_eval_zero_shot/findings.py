"""SmolLM2 zero-shot on the project's offline lm-eval tasks at several k
(findings/smollm2_lm_eval_zero_shot/README.md).

    python findings/smollm2_lm_eval_zero_shot/findings.py --static_heads_dir RUN/avgs \
        --sorting_heads_dir RUN/sort_taylor --data_dir ../shared/data --limit 200 --ks 0 68 135 \
        --work_dir outputs/smollm2_lm_eval

Each k is scored once through the model type `papa` (papa.evaluation.harness.PapaLM) into WORK_DIR/k_<k>/
(lm_eval_results.json, lm_eval_samples.jsonl; a task scored at a k is not redone, one added later goes into a
subfolder); then results.md and results.csv are written beside this script (or into --out_dir, as the replay
script run.sh does): per task, metric and k, lm-eval's value with a 95% interval (± 1.96 of its standard error), the
change against k = 0 with a 95% paired bootstrap interval over the documents, and, at k = 0, whether the model is
distinguishable from chance (the majority label's rate among the documents scored; MCC 0).
"""

import argparse
import csv
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TASKS = ["papa_sst2", "papa_cola", "papa_mrpc", "papa_qnli", "papa_wnli", "papa_lm_qnli"]
GLUE = {"papa_sst2": "sst2", "papa_cola": "cola", "papa_mrpc": "mrpc", "papa_qnli": "qnli", "papa_wnli": "wnli"}


def scored_folders(folder):
    """`folder` and its subfolders that hold lm-eval scores (a task added later is scored into a subfolder)."""
    subs = sorted(os.path.join(folder, name) for name in os.listdir(folder)) if os.path.isdir(folder) else []
    return [f for f in [folder, *subs] if os.path.isfile(os.path.join(f, "lm_eval_results.json"))]


def score(args, k):
    """(results, samples) of every task at k: the tasks not scored yet in WORK_DIR/k_<k>/ (or a subfolder) are
    scored, into k_<k>/ itself, or into k_<k>/<their names>/ when k_<k>/ holds others already."""
    from papa.evaluation.harness import PapaLM
    from papa.evaluation.scoring import evaluate_tasks, write_scores
    from papa.reporting.lm_eval_table import read_run

    folder = os.path.join(args.work_dir, f"k_{k}")
    runs = [read_run(f) for f in scored_folders(folder)]
    missing = [t for t in args.tasks if not any(t in results for results, _ in runs)]
    if missing:
        target = os.path.join(folder, "+".join(missing)) if runs else folder
        lm = PapaLM(pretrained=args.model, static_heads_dir=args.static_heads_dir,
                    sorting_heads_dir=args.sorting_heads_dir, static_heads_num=k, batch_size=args.batch_size)
        results, samples, counts = evaluate_tasks(lm, missing, args.data_dir, args.limit)
        write_scores(results, samples, counts, target, tasks=missing, limit=args.limit, k=k, model=args.model)
        runs.append(read_run(target))
    merged = ({}, {})
    for results, samples in runs:
        merged[0].update(results)
        merged[1].update(samples)
    return merged


def majority_rate(task, data_dir, n):
    from collections import Counter

    from papa.evaluation.data import glue_validation

    labels = glue_validation(GLUE[task], data_dir)["validation"]["label"][:n]
    return max(Counter(labels).values()) / len(labels)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--static_heads_dir", required=True)
    parser.add_argument("--sorting_heads_dir", required=True)
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--work_dir", required=True)
    parser.add_argument("--ks", type=int, nargs="+", default=[0, 68, 135])
    parser.add_argument("--tasks", nargs="+", default=TASKS)
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--bootstrap_samples", type=int, default=1000)
    parser.add_argument("--out_dir", default=HERE, help="where results.md and results.csv go (default: beside this "
                        "script, the committed tables)")
    args = parser.parse_args(argv)

    from papa.evaluation.sample_metrics import paired_change
    from papa.reporting.intervals import change_text
    runs = {k: score(args, k) for k in args.ks}
    rows = []
    for task in args.tasks:
        results0, samples0 = runs[args.ks[0]]
        for metric in [m for m in results0[task] if not m.endswith("_stderr")]:
            for k in args.ks:
                results, samples = runs[k]
                value, err = results[task][metric], results[task].get(f"{metric}_stderr")
                err = err if isinstance(err, float) else None
                change = (None, None, None) if k == args.ks[0] else paired_change(
                    metric, samples[task][metric], samples0[task][metric], args.bootstrap_samples)
                rows.append({"task": task, "metric": metric, "k": k, "documents": len(samples[task][metric]),
                             "value": value, "stderr": err,
                             "ci_low": None if err is None else value - 1.96 * err,
                             "ci_high": None if err is None else value + 1.96 * err,
                             "change": change[0], "change_ci_low": change[1], "change_ci_high": change[2]})
    chance = {}
    for task in args.tasks:
        if task in GLUE:
            n = len(runs[args.ks[0]][1][task][next(iter(runs[args.ks[0]][1][task]))])
            chance[task] = 0.0 if task == "papa_cola" else majority_rate(task, args.data_dir, n)
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "results.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| task | metric | k | value [95% interval] | change vs k = 0 [95% paired interval] | chance |",
             "| --- | --- | ---: | ---: | ---: | --- |"]
    for row in rows:
        interval = "" if row["stderr"] is None else f" [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
        note = ""
        if row["k"] == args.ks[0] and row["task"] in chance and row["metric"] in ("acc", "mcc"):
            base = chance[row["task"]]
            at = row["stderr"] is not None and row["ci_low"] <= base <= row["ci_high"]
            note = f"{'at chance' if at else 'above chance' if row['ci_low'] > base else 'below chance'} ({base:.3f})"
        lines.append(f"| {row['task']} | {row['metric']} | {row['k']} | {row['value']:.4f}{interval} | "
                     f"{change_text(row['change'], row['change_ci_low'], row['change_ci_high'])} | {note} |")
    with open(os.path.join(args.out_dir, "results.md"), "w") as f:
        command = " ".join(["python", "findings/smollm2_lm_eval_zero_shot/findings.py", *sys.argv[1:]])
        f.write(command + "\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
