"""The timing: interleaved rounds, medians and their intervals.

Every repetition runs every variant once, the order rotating, so drift in the machine's state hits
all variants alike; medians (and the IQR) after warm-up. `sandwiched_times` also runs a reference
before and after each variant, so each variant pairs with reference runs next to it.

With --processes N the inference rounds run in N fresh child processes, one after another, and
pool; `clustered_median_interval` then treats each process's rounds as one cluster. (Peak memory:
memory.py.)
"""

import math
import random
import statistics
import time

import torch


def synchronize(device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def timed(run, device):
    """Seconds `run()` takes, the device's queued work finished on both sides."""
    synchronize(device)
    start = time.perf_counter()
    run()
    synchronize(device)
    return time.perf_counter() - start


def interleaved_times(variants, repeats, warmup, device):
    """{name: [seconds per repetition]}: every repetition runs every variant once, order rotated."""
    names = list(variants)
    times = {name: [] for name in names}
    for rep in range(warmup + repeats):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            elapsed = timed(variants[name], device)
            if rep >= warmup:
                times[name].append(elapsed)
    return times


def sandwiched_times(variants, reference, repeats, warmup, device):
    """({name: [seconds]}, {name: [reference seconds beside it]}): each round runs the reference
    before and after every other variant (order rotated), R v1 R v2 R … vk R, so each variant's
    paired reference time is the mean of the two runs around it, a fraction of a second away,
    and machine noise slower than that cancels in their ratio."""
    others = [name for name in variants if name != reference]
    times = {name: [] for name in variants}
    beside = {name: [] for name in others}
    for rep in range(warmup + repeats):
        shift = rep % len(others) if others else 0
        reference_times, pairs = [timed(variants[reference], device)], {}
        for name in others[shift:] + others[:shift]:
            elapsed = timed(variants[name], device)
            reference_times.append(timed(variants[reference], device))
            pairs[name] = elapsed, (reference_times[-2] + reference_times[-1]) / 2
        if rep >= warmup:
            times[reference] += reference_times
            for name, (elapsed, around) in pairs.items():
                times[name].append(elapsed)
                beside[name].append(around)
    return times, beside


def summary(samples):
    ordered = sorted(samples)
    q = statistics.quantiles(ordered, n=4) if len(ordered) >= 2 else [ordered[0]] * 3
    return {"median_s": statistics.median(ordered), "p25_s": q[0], "p75_s": q[2], "min_s": ordered[0],
            "n": len(ordered)}


def paired_ratios(numerator, denominator):
    """numerator[i] / denominator[i] for each round: two timings taken in the same machine state."""
    return [a / b for a, b in zip(numerator, denominator)]


# kernels whose work the FLOP model counts: matrix products and fused attention
MODELLED_KERNELS = {"aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm", "aten::_scaled_dot_product_flash_attention_for_cpu",
                    "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_flash_attention"}


def modelled_time_share(run, repeats=3):
    """Share of `run`'s CPU operator time spent in MODELLED_KERNELS (torch.profiler, self times).

    The FLOP bound assumes all of a forward's time scales with its FLOPs; the rest (activations,
    norms, copies, masking) is not removed by constant heads, so it caps what a speed-up can reach.
    """
    from torch.profiler import ProfilerActivity, profile

    run()  # warm
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(repeats):
            run()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    return sum(e.self_cpu_time_total for e in events if e.key in MODELLED_KERNELS) / total if total else None


def median_interval(samples, level=0.95):
    """Distribution-free confidence interval of the median: (low, high) order statistics.

    The number of samples below the true median is Binomial(n, ½); the interval [x_(j), x_(n−1−j)]
    (sorted, 0-based) covers the median with probability P(j ≤ that count ≤ n−1−j), and j is the
    largest with coverage ≥ `level`. Too few samples for that level: the whole range.
    """
    ordered = sorted(samples)
    n = len(ordered)
    p_count = [math.comb(n, k) / 2**n for k in range(n + 1)]  # P(count = k)

    def coverage(j):  # x_(j) < median ⟺ count ≥ j + 1; x_(n−1−j) > median ⟺ count ≤ n − 1 − j
        return sum(p_count[j + 1 : n - j])

    j = 0
    while j + 1 <= n - 2 - j and coverage(j + 1) >= level:
        j += 1
    return ordered[j], ordered[n - 1 - j]


def clustered_median_interval(samples, clusters, level=0.95, resamples=2000, seed=0):
    """95% interval of the median of samples that come in clusters (rounds of one process).

    Rounds of one process share its state (memory layout, allocator, caches), so they are not
    independent and the binomial interval of `median_interval` would be too narrow. This is a
    two-stage bootstrap: draw the clusters with replacement, then each drawn cluster's samples
    with replacement, and take the median of the pooled draw; the interval is the central `level`
    of those medians (percentile method; seeded, so a report is reproducible).
    """
    groups = {}
    for value, cluster in zip(samples, clusters, strict=True):
        groups.setdefault(cluster, []).append(value)
    groups = list(groups.values())
    rng = random.Random(seed)
    medians = []
    for _ in range(resamples):
        drawn = [rng.choice(group) for group in rng.choices(groups, k=len(groups)) for _ in group]
        medians.append(statistics.median(drawn))
    medians.sort()
    tail = (1 - level) / 2
    return medians[int(tail * resamples)], medians[min(resamples - 1, int((1 - tail) * resamples))]
