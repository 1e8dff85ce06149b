"""Does constant attention cost more at a long context? Two finished lm sweeps of one text, at T = long and T = short
(short dividing long), compared chunk by chunk.

    python findings/long_context_lengths/lengths.py --long outputs/lm_qnli_t1024 --short outputs/lm_qnli_t128 \
        --out findings/long_context_lengths/lm_qnli.md

Both sweeps evaluate the first blocks of the same validation token stream (papa.data.lm: concatenated, cut into
blocks of T in order), so long block c is exactly short blocks c·m .. c·m + m − 1 (m = long / short) when both
cover the same number of tokens. A chunk is one long block: per chunk and per k, each sweep's summed NLL and
token count (eval_predictions.jsonl). A bootstrap over chunks (the same resampled chunks for both lengths and
every k) gives 95% intervals of each length's perplexity change against its own k = 0 run (the sweep's measure:
(ppl0 − ppl) / ppl0, negative = worse), and of the difference of the log-perplexity increases, long − short, in
nats per token: positive = constant attention costs more at the long context.

Each sweep ranks its heads with its own ranking run, so at 0 < k < all the two lengths replace different heads.
--also LONG_RUN:SHORT_RUN[:LABEL] adds rows that pair other run folders of the two sweeps, e.g. the same heads at both
lengths: k_135 of the long sweep with k_135_other_ranking of the short one, made by
`papa-glue --do_eval ... --sorting_heads_dir <long sweep>/sort --output_dir <short sweep>/k_135_other_ranking`.
"""

import argparse
import json
import os

import numpy as np


def chunk_sums(sweep, run, per_chunk):
    """(NLL sum, tokens) per chunk of `per_chunk` consecutive blocks of the sweep's run folder `run`."""
    with open(os.path.join(sweep, run, "eval_predictions.jsonl")) as f:
        rows = sorted((json.loads(line) for line in f), key=lambda r: r["index"])
    nll = np.array([r["nll_sum"] for r in rows], dtype=np.float64)
    tokens = np.array([r["tokens"] for r in rows], dtype=np.float64)
    if len(rows) % per_chunk:
        raise SystemExit(f"{sweep}/{run}: {len(rows)} blocks are not whole chunks of {per_chunk}")
    return nll.reshape(-1, per_chunk).sum(1), tokens.reshape(-1, per_chunk).sum(1)


def change(nll, tokens, nll0, tokens0, idx):
    """The sweep's perplexity change at k against k = 0 over chunks `idx` (rows of resamples): (ppl0 − ppl) / ppl0,
    negative = worse, as results.md reports it."""
    ppl = np.exp(nll[idx].sum(-1) / tokens[idx].sum(-1))
    ppl0 = np.exp(nll0[idx].sum(-1) / tokens0[idx].sum(-1))
    return (ppl0 - ppl) / ppl0


def log_increase(nll, tokens, nll0, tokens0, idx):
    """ln(ppl / ppl0): the mean NLL per token at k minus at k = 0, over chunks `idx`."""
    return nll[idx].sum(-1) / tokens[idx].sum(-1) - nll0[idx].sum(-1) / tokens0[idx].sum(-1)


def sweep_info(folder):
    with open(os.path.join(folder, "sweep.json")) as f:
        return json.load(f)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--long", required=True, help="the long-context sweep's folder")
    parser.add_argument("--short", required=True, help="the short-context sweep's folder (same task and text)")
    parser.add_argument("--samples", type=int, default=10000, help="bootstrap resamples")
    parser.add_argument("--also", nargs="*", default=[], metavar="LONG_RUN:SHORT_RUN[:LABEL]",
                        help="more rows: a run folder of the long sweep against one of the short sweep")
    parser.add_argument("--out", help="write the markdown table here too")
    args = parser.parse_args()
    long_, short = sweep_info(args.long), sweep_info(args.short)
    T_long, T_short = int(long_["max_seq_length"]), int(short["max_seq_length"])
    if long_["task"] != short["task"] or T_long % T_short:
        raise SystemExit("the sweeps must be of one task, the long T a multiple of the short")
    rows = [(f"k_{k}", f"k_{k}") for k in long_["static_heads_nums"] if k in short["static_heads_nums"]]
    total = int(long_["layers"]) * int(long_["heads_per_layer"])
    labels = {(f"k_{k}",) * 2: f"k_{k}" + (", each length's own ranking" if 0 < k < total else "")
              for k in long_["static_heads_nums"]}
    for item in args.also:
        long_run, short_run, *label = item.split(":", 2)
        rows.append((long_run, short_run))
        labels[rows[-1]] = label[0] if label else f"{long_run} / {short_run}"
    folders = {T_long: (args.long, 1), T_short: (args.short, T_long // T_short)}
    sums = {(T, run): chunk_sums(folders[T][0], run, folders[T][1])
            for row in rows for T, run in zip((T_long, T_short), row)}
    chunks = len(sums[(T_long, "k_0")][0])
    if any(len(s[0]) != chunks for s in sums.values()):
        raise SystemExit(f"the runs cover different numbers of {T_long}-token chunks: evaluate the same text")
    rng = np.random.default_rng(0)
    idx = rng.integers(0, chunks, size=(args.samples, chunks))
    whole = np.arange(chunks)[None]
    lines = [f"# {long_['task']}: T = {T_long} against T = {T_short}, the same {chunks} × {T_long} tokens", "",
             f"Perplexity change against each length's own k = 0 (negative = worse), and long − short of the "
             f"log-perplexity increase ln(ppl / ppl at k = 0) in nats per token (positive = costs more at T = "
             f"{T_long}); [95% interval] of a bootstrap over the {chunks} chunks of {T_long} tokens ({args.samples} "
             f"resamples, the same for both lengths and every run); * marks an interval that excludes 0.", "",
             f"| run (T = {T_long} / T = {T_short}) | perplexity, T = {T_long} | perplexity, T = {T_short} | change, T = {T_long} | "
             f"change, T = {T_short} | long − short (nats/token) |", "| --- | ---: | ---: | ---: | ---: | ---: |"]

    def text(point, samples, scale=100, unit="%", digits=1):
        low, high = np.percentile(samples, [2.5, 97.5]) * scale
        star = "*" if low > 0 or high < 0 else ""
        return f"{point * scale:+.{digits}f}{unit} [{low:+.{digits}f}, {high:+.{digits}f}]{star}"

    for row in rows:
        run = dict(zip((T_long, T_short), row))
        label = labels.get(row, row[0])
        ppl = {T: float(np.exp(sums[(T, run[T])][0].sum() / sums[(T, run[T])][1].sum())) for T in (T_long, T_short)}
        if row == ("k_0", "k_0"):
            lines.append(f"| {label} | {ppl[T_long]:.2f} | {ppl[T_short]:.2f} | | | |")
            continue
        point = {T: change(*sums[(T, run[T])], *sums[(T, "k_0")], whole)[0] for T in (T_long, T_short)}
        boot = {T: change(*sums[(T, run[T])], *sums[(T, "k_0")], idx) for T in (T_long, T_short)}
        nats = {T: log_increase(*sums[(T, run[T])], *sums[(T, "k_0")], np.concatenate([whole, idx]))
                for T in (T_long, T_short)}
        difference = nats[T_long] - nats[T_short]
        lines.append(f"| {label} | {ppl[T_long]:.2f} | {ppl[T_short]:.2f} | {text(point[T_long], boot[T_long])} | "
                     f"{text(point[T_short], boot[T_short])} | "
                     f"{text(difference[0], difference[1:], scale=1, unit='', digits=3)} |")
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)


if __name__ == "__main__":
    main()
