"""Where a forward's time goes, stock against PAPA with some heads constant: torch.profiler self times per operator.

The benchmark (papa-benchmark) says how much faster a variant is; this says why it is not faster still. Both
models run the benchmark's inference inputs (batch of rows with their last quarter padded) and its random
constants, interleaved, under one profiler each; the table lists every operator's self CPU time per forward in
both, and the difference, largest first. Run on an idle machine: shares are robust to load, milliseconds are not.

    python benchmarks/profile_constant_heads.py --model_name_or_path smollm2 --seq_len 512 \
        --sorted_heads findings/smollm2_probes/repeat/sorted_heads.json --k 135 --out benchmarks/results/profile.md
"""

import argparse
import collections
import copy
import datetime
import os
import platform
import statistics
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile
from transformers import AutoConfig

from papa.benchmark.workloads import (INFERENCE_VARIANTS, chosen_heads, inference_inputs, load_encoder,
                                      quiet_transformers, random_constants)
from papa.method.attention import patch_model
from papa.models.bundled import local_model_path


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_name_or_path", default="smollm2", help="a model folder, .gguf file or bundled name")
    parser.add_argument("--seq_len", type=int, default=512, help="T of the forward")
    parser.add_argument("--batch_size", type=int, default=1, help="rows per forward")
    parser.add_argument("--sorted_heads", help="a sorted_heads.json: its first --k heads go constant "
                                               "(default: layer by layer)")
    parser.add_argument("--k", type=int, default=None, help="constant heads (default: half of them)")
    parser.add_argument("--rounds", type=int, default=6, help="profiled forwards of each model, interleaved")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--top", type=int, default=25, help="operators listed")
    parser.add_argument("--out", help="write the markdown table here (default: print it)")
    return parser.parse_args()


def per_operator_ms(prof, rounds):
    """{operator: self CPU ms per forward}, and operator calls per forward."""
    events = prof.key_averages()
    return {e.key: e.self_cpu_time_total / 1000 / rounds for e in events}, sum(e.count for e in events) / rounds


def wall_ms(model, inputs):
    start = time.perf_counter()
    with torch.inference_mode():
        model(**inputs)
    return (time.perf_counter() - start) * 1000


def main():
    args = parse_args()
    quiet_transformers()
    if args.threads:
        torch.set_num_threads(args.threads)
    path = local_model_path(args.model_name_or_path)
    config = AutoConfig.from_pretrained(path)
    L, H, T = config.num_hidden_layers, config.num_attention_heads, args.seq_len
    k = args.k if args.k is not None else (L * H) // 2
    load_args = argparse.Namespace(model_name_or_path=path, device="cpu", tiny=False, model_type=None)
    stock = load_encoder(load_args, "sdpa")
    variant = INFERENCE_VARIANTS["1/2 constant, ranked" if args.sorted_heads else "1/2 constant"]
    static = chosen_heads(variant, k, L, H, args.sorted_heads)
    patched = patch_model(copy.deepcopy(stock), random_constants(config, T), static_heads=static).eval()
    inputs = inference_inputs(config, args.batch_size, T, "cpu")
    models = {"stock": stock, "patched": patched}
    times = collections.defaultdict(lambda: collections.defaultdict(float))
    calls, walls = collections.defaultdict(float), collections.defaultdict(list)
    for model in models.values():  # warm-up
        wall_ms(model, inputs)
    for _ in range(args.rounds):
        for name, model in models.items():
            walls[name].append(wall_ms(model, inputs))  # without the profiler's own overhead
            with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
                model(**inputs)
            per_op, count = per_operator_ms(prof, args.rounds)
            calls[name] += count
            for op, ms in per_op.items():
                times[name][op] += ms
    total = {name: sum(ops.values()) for name, ops in times.items()}
    wall = {name: statistics.median(w) for name, w in walls.items()}
    ops = sorted(set(times["stock"]) | set(times["patched"]),
                 key=lambda op: -abs(times["patched"][op] - times["stock"][op]))
    lines = [f"# Operator self times: stock vs {k} of {L * H} heads constant",
             "",
             f"`python benchmarks/{os.path.basename(__file__)} " + " ".join(sys.argv[1:]) + "`; "
             f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs, torch threads "
             f"{torch.get_num_threads()}, torch {torch.__version__}; {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} "
             f"UTC, load average at the end {os.getloadavg()[0]:.2f}. Batch {args.batch_size}, T = {T}, the last "
             f"quarter of each row padded, fp32, inference_mode; {args.rounds} profiled forwards of each, "
             "interleaved; ms per forward (sum of operator self times).",
             "",
             "| per forward | stock | patched | stock / patched |",
             "| --- | ---: | ---: | ---: |",
             f"| operator self time (ms) | {total['stock']:.1f} | {total['patched']:.1f} | "
             f"{total['stock'] / total['patched']:.3f} |",
             f"| wall time without the profiler, median (ms) | {wall['stock']:.1f} | {wall['patched']:.1f} | "
             f"{wall['stock'] / wall['patched']:.3f} |",
             f"| operator calls | {calls['stock']:.0f} | {calls['patched']:.0f} | {calls['stock'] / calls['patched']:.3f} |",
             "",
             "Per operator, largest difference first:",
             "",
             "| operator | stock ms | patched ms | patched − stock |",
             "| --- | ---: | ---: | ---: |"]
    for op in ops[:args.top]:
        s, p = times["stock"][op], times["patched"][op]
        lines.append(f"| `{op}` | {s:.2f} | {p:.2f} | {p - s:+.2f} |")
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out + ".tmp", "w") as f:
            f.write(text)
        os.replace(args.out + ".tmp", args.out)
    print(text)


if __name__ == "__main__":
    main()
