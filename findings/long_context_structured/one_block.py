"""The README's T = 8 192 table, from its run folders: one evaluation block each, so no interval; perplexity from
eval_results.json, ln(ppl / ppl₀) against the stock run, peak RSS and wall time from each run's `/usr/bin/time -v`
file (RUNS/<name>.time, as run.sh writes them).

    python findings/long_context_structured/one_block.py --runs OUT/runs --stock t8192_k0 \
        --rows "t8192_toep128_k135:Toeplitz, averaged at 128 (16 384 tokens)" \
               "t8192_toep8192_k135:Toeplitz, averaged at 8 192 (one block, 8 192 tokens)" --out OUT/structured_t8192.md
"""

import argparse
import json
import math
import os
import re


def time_v(path):
    """(peak RSS in GB, wall seconds) from a `/usr/bin/time -v` report."""
    with open(path) as f:
        text = f.read()
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text).group(1)
    seconds = 0.0
    for part in wall.split(":"):  # h:mm:ss or m:ss
        seconds = 60 * seconds + float(part)
    return rss_kb * 1024 / 1e9, seconds


def wall_text(seconds):
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", required=True, help="the folder holding the run folders and their .time files")
    parser.add_argument("--stock", required=True, help="the k = 0 run folder's name")
    parser.add_argument("--rows", nargs="+", required=True, metavar="RUN:LABEL", help="runs to tabulate")
    parser.add_argument("--out", help="write the markdown here too")
    args = parser.parse_args(argv)
    rows = [(args.stock, "stock (k = 0)")] + [tuple(r.split(":", 1)) for r in args.rows]
    lines = ["| constants | perplexity | ln(ppl / ppl₀), nats/token | peak RSS | wall |",
             "| --- | ---: | ---: | ---: | ---: |"]
    stock_ppl = None
    for name, label in rows:
        with open(os.path.join(args.runs, name, "eval_results.json")) as f:
            ppl = json.load(f)["eval_perplexity"]
        rss, wall = time_v(os.path.join(args.runs, f"{name}.time"))
        change = "" if stock_ppl is None else f"{math.log(ppl / stock_ppl):+.3f}"
        stock_ppl = stock_ppl or ppl
        lines.append(f"| {label} | {ppl:.2f} | {change} | {rss:.2f} GB | {wall_text(wall)} |")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        from papa.io import save_text

        save_text(text, args.out)


if __name__ == "__main__":
    main()
