"""Structured constants at long contexts: evaluation runs of one length compared block by block.

    python findings/long_context_structured/structured.py --runs outputs/lc51 --seq_len 1024 \
        --rows "t1024_k0:stock" "t1024_full1024_k135:full, averaged at 1024, k = 135" ... \
        --pairs "t1024_toep128_k135:t1024_full1024_k135:Toeplitz(128) − full(1024), k = 135" ... \
        --out findings/long_context_structured/structured_t1024.md

Every run folder is a `papa-glue --do_eval` of the same lm task at the same --max_seq_length and
--max_eval_samples, so all evaluate the same blocks (checked: eval_predictions.jsonl's block hashes). Per block,
its summed NLL and token count; log-perplexity = Σ NLL / Σ tokens over the blocks. A bootstrap over the blocks
(the same resampled blocks for every run) gives 95% intervals of each run's ln(ppl / ppl at k = 0), in nats per
token, and of the paired differences of log-perplexity between two runs (positive = the first run is worse).
"""

import argparse
import json
import os

import numpy as np


def blocks(folder):
    """(block hashes, NLL sums, token counts) of a run folder's eval_predictions.jsonl, in index order."""
    with open(os.path.join(folder, "eval_predictions.jsonl")) as f:
        rows = sorted((json.loads(line) for line in f), key=lambda r: r["index"])
    return ([r["block"] for r in rows], np.array([r["nll_sum"] for r in rows], dtype=np.float64),
            np.array([r["tokens"] for r in rows], dtype=np.float64))


def log_ppl(nll, tokens, idx):
    """Mean NLL per token over blocks `idx` (rows of resamples)."""
    return nll[idx].sum(-1) / tokens[idx].sum(-1)


def interval(samples, digits=3):
    """'+point [low, high]' from samples[0] (the whole data) and samples[1:] (resamples); * when 0 is outside."""
    low, high = np.percentile(samples[1:], [2.5, 97.5])
    star = "*" if low > 0 or high < 0 else ""
    return f"{samples[0]:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]{star}"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", required=True, help="the folder holding the run folders")
    parser.add_argument("--seq_len", type=int, required=True, help="their --max_seq_length (for the title)")
    parser.add_argument("--stock", required=True, help="the k = 0 run folder's name")
    parser.add_argument("--rows", nargs="+", required=True, metavar="RUN:LABEL", help="runs to tabulate")
    parser.add_argument("--pairs", nargs="*", default=[], metavar="A:B:LABEL", help="paired differences A − B")
    parser.add_argument("--samples", type=int, default=10000, help="bootstrap resamples")
    parser.add_argument("--out", help="write the markdown here too")
    args = parser.parse_args()
    names = [args.stock] + [r.split(":", 1)[0] for r in args.rows] + \
        [x for p in args.pairs for x in p.split(":", 2)[:2]]
    data = {n: blocks(os.path.join(args.runs, n)) for n in dict.fromkeys(names)}
    hashes = data[args.stock][0]
    for n, (h, _, _) in data.items():
        if h != hashes:
            raise SystemExit(f"{n} evaluated other blocks than {args.stock}: evaluate the same text")
    count = len(hashes)
    rng = np.random.default_rng(0)
    idx = np.concatenate([np.arange(count)[None], rng.integers(0, count, size=(args.samples, count))])
    lp = {n: log_ppl(nll, tokens, idx) for n, (_, nll, tokens) in data.items()}
    tokens = int(data[args.stock][2].sum())
    lines = [f"# SmolLM2-135M, lm_qnli, T = {args.seq_len}: {count} held-out blocks ({tokens} scored tokens)", "",
             f"ln(ppl / ppl at k = 0) in nats per token, [95% interval] of a bootstrap over the {count} blocks "
             f"({args.samples} resamples, the same for every run); * marks an interval that excludes 0.", "",
             "| run | perplexity | ln(ppl / ppl₀) |", "| --- | ---: | ---: |",
             f"| stock (k = 0) | {np.exp(lp[args.stock][0]):.2f} | |"]
    for row in args.rows:
        n, label = row.split(":", 1)
        lines.append(f"| {label} | {np.exp(lp[n][0]):.2f} | {interval(lp[n] - lp[args.stock])} |")
    if args.pairs:
        lines += ["", "Paired differences of log-perplexity, A − B, nats per token (positive = A is worse):", "",
                  "| A − B | nats/token |", "| --- | ---: |"]
        for pair in args.pairs:
            a, b, label = pair.split(":", 2)
            lines.append(f"| {label} | {interval(lp[a] - lp[b])} |")
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)


if __name__ == "__main__":
    main()
