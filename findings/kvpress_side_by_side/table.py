"""The side-by-side table: per prompt length, each method and fraction's keys found (95% Wilson interval), its
cache during decoding as measured (× the stock model's on the same prompts) and as the press says it removed, median
prefill seconds, decode milliseconds per token and how far the resident memory grew during a prompt (measure.PeakRss);
then each PAPA row minus each press at the nearest nominal fraction (within 0.05: PAPA's fractions are whole K/V
groups), in points of keys found, with a 95% paired bootstrap interval over the prompts both ran (10 000 resamples,
seed 0; * where it excludes 0).

    python findings/kvpress_side_by_side/table.py --rows OUT/papa.jsonl OUT/presses.jsonl --out OUT/results.md
"""

import argparse
import json
import math
import os
import statistics
import time
from collections import defaultdict

import numpy as np

Z = 1.959963984540054  # the 97.5th percentile of the standard normal


def wilson(found, n, z=Z):
    """The Wilson score interval of a proportion found / n, as (low, high)."""
    if n == 0:
        return (0.0, 1.0)
    p = found / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def stock_bytes(rows):
    """{(length, index): the stock model's cache bytes on that prompt}."""
    return {(r["length"], r["index"]): r["cache_bytes"] for r in rows if r["method"] == "stock"}


SAMPLES, SEED = 10_000, 0


def paired_difference(a, b, rng):
    """(mean of a − b, low, high) in points: a paired bootstrap over the prompts both methods ran (a, b: 0/1 arrays
    in prompt order)."""
    draws = rng.integers(0, len(a), size=(SAMPLES, len(a)))  # (samples, prompts)
    diffs = 100 * (a[draws] - b[draws]).mean(1)
    low, high = np.percentile(diffs, [2.5, 97.5])
    return 100 * float((a - b).mean()), float(low), float(high)


NEAREST = 0.05  # a PAPA fraction is compared with the presses' nearest one within this distance


def nearest_fraction(fraction, press_fractions):
    """The press fraction nearest a PAPA row's nominal one (whole K/V groups: 66 of 270 heads is 0.244), or None
    when none lies within NEAREST."""
    best = min(press_fractions, key=lambda p: (abs(p - fraction), p), default=None)
    return best if best is not None and abs(best - fraction) <= NEAREST else None


def differences(rows):
    """Per length and PAPA fraction, each PAPA row − each press's at the nearest nominal fraction (within NEAREST),
    keys found in points with its interval."""
    found = defaultdict(dict)  # (length, method, fraction) -> {prompt index: 0/1}
    for r in rows:
        found[(r["length"], r["method"], r["fraction"])][r["index"]] = float(r["found"])
    lines, rng = [], np.random.default_rng(SEED)
    for length in sorted({r["length"] for r in rows}):
        at = lambda prefix: {f for ln, m, f in found if ln == length and f > 0 and m.startswith(prefix)}  # noqa: E731
        press_fractions = sorted(at("kvpress"))
        for fraction in sorted(at("PAPA")):
            pressed = nearest_fraction(fraction, press_fractions)
            papa = sorted(m for ln, m, f in found if (ln, f) == (length, fraction) and m.startswith("PAPA"))
            presses = sorted(m for ln, m, f in found if (ln, f) == (length, pressed) and m.startswith("kvpress"))
            if not papa or not presses:
                continue
            lines += [f"### {length} tokens, PAPA {fraction:.3f} removed against the presses' {pressed:.2f} "
                      "(nominal): PAPA − press, keys found in points "
                      "[95% paired bootstrap interval over the prompts]",
                      "", "| press | " + " | ".join(f"{m} −" for m in papa) + " |",
                      "| --- |" + " ---: |" * len(papa)]
            for press in presses:
                cells = []
                for method in papa:
                    a, b = found[(length, method, fraction)], found[(length, press, pressed)]
                    both = sorted(set(a) & set(b))
                    mean, low, high = paired_difference(np.array([a[i] for i in both]),
                                                        np.array([b[i] for i in both]), rng)
                    star = "*" if low > 0 or high < 0 else ""
                    cells.append(f"{mean:+.0f} [{low:+.0f}, {high:+.0f}]{star} (n = {len(both)})")
                lines.append(f"| {press} | " + " | ".join(cells) + " |")
            lines.append("")
    return lines


def spread(values, fmt, ranges):
    """The median of values, formatted, with (min–max) after it when ranges is set."""
    text = fmt.format(statistics.median(values))
    return text + (" (" + fmt.format(min(values)) + "–" + fmt.format(max(values)) + ")" if ranges else "")


def table(rows, ranges=False):
    stock = stock_bytes(rows)
    missing = sorted({(r["length"], r["index"]) for r in rows} - set(stock))
    if missing:
        raise SystemExit(f"no stock row for the prompts (length, index) {missing[:3]}...: the cache ratios divide by "
                         "it; pass papa_side.py's rows (its method 'stock') beside the presses'")
    cells = defaultdict(list)
    for r in rows:
        cells[(r["length"], r["method"], r["fraction"])].append(r)
    lines = []
    for length in sorted({r["length"] for r in rows}):
        lines += [f"## {length} tokens", "",
                  "| method | removed (nominal) | cache × stock (measured) | removed (the press's own) | keys found | "
                  "95% interval | prefill s | decode ms/token | RSS growth MB |",
                  "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
        keyed = sorted((k for k in cells if k[0] == length), key=lambda k: (k[2], k[1] != "stock", k[1]))
        for _, method, fraction in keyed:
            group = cells[(length, method, fraction)]
            hits, n = sum(r["found"] for r in group), len(group)
            low, high = wilson(hits, n)
            ratio = statistics.median(r["cache_bytes"] / stock[(length, r["index"])] for r in group)
            own = statistics.median(r.get("removed_share", 1 - r["cache_bytes"] / stock[(length, r["index"])])
                                    for r in group)
            lines.append(
                f"| {method} | {fraction:.2f} | {ratio:.3f} | {own:.3f} | {hits}/{n} | [{low:.2f}, {high:.2f}] | "
                f"{spread([r['prefill_s'] for r in group], '{:.2f}', ranges)} | "
                f"{spread([1000 * r['decode_s_per_token'] for r in group], '{:.1f}', ranges)} | "
                f"{statistics.median(r['peak_rss_growth'] for r in group) / 1e6:.0f} |")
        lines.append("")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", nargs="+", required=True, help="papa_side.py's and press_side.py's JSON lines.")
    parser.add_argument("--out", required=True, help="The markdown table to write.")
    parser.add_argument("--ranges", action="store_true", help="Times as median (min–max) over the prompts.")
    args = parser.parse_args(argv)
    rows = [json.loads(line) for path in args.rows for line in open(path)]
    load = os.getloadavg()
    head = [f"# PAPA and kvpress's presses, SmolLM2, pass key: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
            "", f"{os.cpu_count()} cores, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} when this table "
            "was made; float32, batch 1. Times are medians over the prompts" + (" (min–max)" if args.ranges else "") +
            ", each side's methods interleaved per prompt.", ""]
    from papa.io import save_text

    text = "\n".join(head + table(rows, args.ranges) + differences(rows)) + "\n"
    save_text(text, args.out)
    print(text)


if __name__ == "__main__":
    main()
