"""What a mixed layer costs beyond whole constant layers, operator by operator (torch.profiler), in one process.

MiniLM, batch 32, T = 64 (or as given), every third row's last quarter padded (the issue's check), random constants:
PAPA with every other head constant (every layer mixes both kinds), PAPA with the first three layers constant (the
same 36 heads' worth of FLOPs removed, no layer mixed), and the stock SDPA model, interleaved. Each forward is
profiled; an operator's self CPU time is summed per forward by (operator, input shapes), so GEMMs of different widths
stay apart. Printed: medians over rounds (the first three dropped) in ms per forward, and the paired median of the
difference every-other-head − first-three-layers per row, whose sum is what mixing costs. The profiler adds a little
time to every operator alike.

    python benchmarks/mixed_layers_ops.py [rounds, default 40] [T, default 64]
"""

import collections
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from mixed_layers_parts import B, models_to_compare  # this folder is on sys.path when run as a script

SHOWN_MS = 0.2  # rows below this in every model are summed into "other"


def profiled_ms(model, ids, mask):
    """{(operator, input shapes): self CPU ms} of one forward."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        model(input_ids=ids, attention_mask=mask)
    times = collections.Counter()
    for event in prof.key_averages(group_by_input_shape=True):
        shapes = ", ".join(str(s) for s in event.input_shapes if s)
        times[(event.key, shapes)] += event.self_cpu_time_total / 1e3
    return times


def main(rounds, T=64):
    models, ids = models_to_compare(T)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[::3, 3 * T // 4:] = 0
    runs = {name: [] for name in models}
    with torch.inference_mode():
        for r in range(rounds):
            names = list(models)[r % 3:] + list(models)[:r % 3]  # the order rotates
            for name in names:
                runs[name].append(profiled_ms(models[name], ids, mask))
    runs = {name: per_round[3:] for name, per_round in runs.items()}
    rows = sorted(set().union(*(t for per_round in runs.values() for t in per_round)))
    median = {name: {row: statistics.median(t[row] for t in per_round) for row in rows} for name, per_round in runs.items()}
    shown = [row for row in rows if max(median[name][row] for name in models) >= SHOWN_MS]
    mixed, whole = runs["every other head"], runs["first three layers"]

    def paired(keep):  # median over rounds of (every other head − first three layers), summed over the rows kept
        return statistics.median(sum(a[row] - b[row] for row in rows if keep(row)) for a, b in zip(mixed, whole))

    names = list(models)
    print("| operator | input shapes | " + " | ".join(names) + " | mixing's cost, paired |")
    print("|---|---|" + "---|" * (len(names) + 1))
    for row in sorted(shown, key=lambda row: -median["stock"][row] - median["every other head"][row]):
        print(f"| {row[0]} | {row[1]} | " + " | ".join(f"{median[name][row]:.2f}" for name in names)
              + f" | {paired(lambda other, row=row: other == row):+.2f} |")
    print("| other | | " + " | ".join(f"{sum(median[name][r] for r in rows if r not in shown):.2f}" for name in names)
          + f" | {paired(lambda row: row not in shown):+.2f} |")
    print("| **total** | | " + " | ".join(f"{statistics.median(sum(t.values()) for t in runs[name]):.1f}" for name in names)
          + f" | {paired(lambda row: True):+.2f} |")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
