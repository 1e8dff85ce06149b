"""The three benchmarks (inference, the averaging pass, a training step) and the run that ties them together.

1. inference (no attentions requested, torch.inference_mode): the stock encoder (sdpa, or eager
   for DeBERTa, which has no sdpa) vs PAPA-patched copies (workloads.INFERENCE_VARIANTS: how many
   heads and which — layer-major, every other head, or a real ranking from --sorted_heads) at each
   --seq_lens; speed ratio to stock and the FLOP bound (flops.py) of the work constant heads skip;
2. the averaging pass (`papa.method.averaging.accumulate_attention`) vs. a plain eager forward with
   output_attentions=True over the same batches vs. the original PAPA code's loop; peak memory of
   the pass at N and 4N batches, and with half the layers (each in a fresh child process);
3. one training step (forward + backward + AdamW, train mode) of a freeze-extract sequence probe in
   each of workloads.TRAINING_VARIANTS: median time and peak memory (child processes).

Variants are interleaved within each round and medians reported (harness.py). Inference runs the
stock model before and after every variant, and the averaging pass times every variant on the same
batch in turn, so each paired ratio compares runs a fraction of a second apart and a machine's
drift in speed over seconds cancels in it.
With --pool it measures nothing and reports earlier runs' inference rounds pooled (pool.py).
Entry point: `papa-benchmark` (papa.cli.benchmark, papa_scripts/benchmark_papa.py).
"""

import copy
import gc
import itertools
import os
import shlex
import statistics
import sys
import time

import torch

from .. import fork_server
from ..method.attention import patch_model
from ..io import save_json, save_text
from .flops import FLOP_NOTE, flop_bound, percent_of_bound, time_weighted_bound
from .harness import (clustered_median_interval, interleaved_times, median_interval, modelled_time_share, paired_ratios,
                      sandwiched_times, summary)
from .memory import measure_memory
from .pool import pool_runs, pooled_markdown
from .report import goals, machine_info, markdown
from .workloads import (AVERAGING_VARIANTS, FAMILY_CONFIGS, INFERENCE_VARIANTS, TRAINING_VARIANTS, averaging_batches,
                        chosen_heads, inference_inputs, load_config, load_encoder, quiet_transformers,
                        random_constants, stock_implementation, training_setup)


DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _with_settings(function, args, *more):
    """In a fresh child: the benchmark's settings (quiet transformers, --threads), then function(args, config, *more)."""
    quiet_transformers()
    torch.set_num_threads(args.threads or torch.get_num_threads())
    return function(args, load_config(args), *more)


def in_fresh_process(function, args, *more):
    """`function(args, config, *more)` in a fresh child process (papa.fork_server): its own memory layout and
    allocator state, no model run before it."""
    return fork_server.call(_with_settings, function, args, *more)


def time_inference(args, config):
    """Interleaved inference timings in this process: one dict per sequence length with the raw
    per-round seconds of every variant (`times`), the stock runs beside each (`beside`), the constant
    heads of each and the stock forward's modelled time share (profiler)."""
    L, H = config.num_hidden_layers, config.num_attention_heads
    stock = load_encoder(args, stock_implementation(config)).to(DTYPES[args.dtype])
    variants = {name: v for name, v in INFERENCE_VARIANTS.items()
                if (v.heads != "ranked" or args.sorted_heads) and (args.variants is None or name in args.variants)}
    measured = []
    for T in args.seq_lens:
        inputs = inference_inputs(config, args.batch_size, T, args.device, padded_rows=args.padded_rows)
        constants = random_constants(config, T)
        models = {"stock": stock}
        heads, static = {"stock": 0}, {"stock": {}}
        for label, variant in variants.items():
            k = round(variant.fraction * L * H)
            model = copy.deepcopy(stock)
            static[f"PAPA, {label}"] = chosen_heads(variant, k, L, H, args.sorted_heads)
            patch_model(model, constants, static_heads=static[f"PAPA, {label}"])
            models[f"PAPA, {label}"] = model.eval()
            heads[f"PAPA, {label}"] = k

        if args.compile:  # each variant its own graph; the warm-up rounds compile them
            torch._dynamo.reset()
            models = {name: torch.compile(m, fullgraph=True, dynamic=False) for name, m in models.items()}

        def runner(model):
            def run():
                with torch.inference_mode():
                    model(**inputs)
            return run

        print(f"[bench] inference T={T}: {len(models)} variants x {args.repeats} rounds", file=sys.stderr, flush=True)
        times, beside = sandwiched_times({name: runner(m) for name, m in models.items()}, "stock", args.repeats,
                                         args.warmup, args.device)
        profiled = not (str(args.device).startswith("cuda") or args.compile or args.dtype != "fp32")
        modelled = modelled_time_share(runner(stock)) if profiled else None  # the time-weighted bound: eager fp32 CPU
        measured.append({"seq_len": T, "times": times, "beside": beside, "heads": heads, "static_heads": static,
                         "modelled": modelled})
        del models
        gc.collect()
    return measured


def _pool(processes):
    """One process's measurements per sequence length, or several processes' pooled: samples
    concatenated in process order, with `process` giving each round's process."""
    pooled = []
    for per_length in zip(*processes):
        first = per_length[0]
        shares = [m["modelled"] for m in per_length if m["modelled"] is not None]
        pooled.append({
            "seq_len": first["seq_len"], "heads": first["heads"], "static_heads": first["static_heads"],
            "modelled": statistics.median(shares) if shares else None,
            "times": {name: [t for m in per_length for t in m["times"][name]] for name in first["times"]},
            "beside": {name: [t for m in per_length for t in m["beside"][name]] for name in first["beside"]},
            "process": [i for i, m in enumerate(per_length) for _ in next(iter(m["beside"].values()), [])],
        })
    return pooled


def bench_inference(args, config):
    if args.processes == 1:
        measured = _pool([time_inference(args, config)])
    else:  # each process loads its own models: its memory layout and allocator state are its own
        runs = []
        for index in range(args.processes):
            print(f"[bench] inference: process {index + 1} of {args.processes}", file=sys.stderr, flush=True)
            runs.append(in_fresh_process(time_inference, args))
        measured = _pool(runs)
    rows = []
    for measurement in measured:
        T, times, beside = measurement["seq_len"], measurement["times"], measurement["beside"]
        heads, modelled, process = measurement["heads"], measurement["modelled"], measurement["process"]

        def interval(per_round):  # a process's rounds share its state: with several, resample processes too
            return median_interval(per_round) if args.processes == 1 else clustered_median_interval(per_round, process)

        stock_median = statistics.median(times["stock"])
        for name in times:
            stats = summary(times[name])
            paired = [1.0] if name == "stock" else paired_ratios(beside[name], times[name])  # stock beside / variant
            flops = flop_bound(config, T, heads[name], args.batch_size, measurement["static_heads"][name])
            ratio = stock_median / stats["median_s"]
            weighted = None if modelled is None else time_weighted_bound(flops["removed_share"], modelled)
            rows.append({
                "seq_len": T, "variant": name, "constant_heads": heads[name],
                "total_heads": config.num_hidden_layers * config.num_attention_heads,
                **stats,
                "speed_ratio_to_stock": ratio,
                "time_ratio_to_stock": 1.0 / ratio,
                "paired_speed_ratio": statistics.median(paired),
                "paired_speed_ratio_ci95": (1.0, 1.0) if name == "stock" else interval(paired),
                "processes": args.processes,
                # the raw rounds, so runs can be pooled or re-analysed later: seconds, the stock runs around them
                "rounds": None if name == "stock" else {"seconds": times[name], "stock_beside_seconds": beside[name],
                                                        "process": process},
                "flop_removed_share": flops["removed_share"],
                "flop_bound_speedup": flops["bound_speedup"],
                "percent_of_bound": None if name == "stock" else percent_of_bound(ratio, flops["bound_speedup"]),
                "stock_modelled_time_share": modelled,
                "time_weighted_bound": weighted,
                "percent_of_time_weighted_bound": (None if weighted is None or name == "stock"
                                                   else percent_of_bound(ratio, weighted)),
            })
        # what mixing both kinds in a layer costs: every layer mixed against whole layers constant, same k
        mixed, whole = "PAPA, 1/2 constant, every other head", "PAPA, 1/2 constant"
        if mixed in times and whole in times:
            # per round: (mixed / the stock beside it) over (whole layers / the stock beside it)
            ratios = [(m / bm) / (w / bw) for m, bm, w, bw in zip(times[mixed], beside[mixed], times[whole], beside[whole])]
            row = next(r for r in rows if r["seq_len"] == T and r["variant"] == mixed)
            row["mixing_time_ratio"] = statistics.median(ratios)
            row["mixing_time_ratio_ci95"] = interval(ratios)
    return rows


def bench_averaging(args, config):
    T, N = args.avg_seq_len, args.avg_batches
    model = load_encoder(args, "eager")
    batches = averaging_batches(config, N, args.batch_size, T)
    plain_name = "plain eager forward, output_attentions"

    def on_next_batch(fn):
        # one batch per call, every variant on the same batch within a round: the paired samples are
        # a fraction of a second apart, so machine noise slower than that cancels in their ratio
        count = itertools.count()
        return lambda: fn(model, [batches[next(count) % N]], T, args.device)

    variants = {name: on_next_batch(fn) for name, fn in AVERAGING_VARIANTS.items()}
    repeats = args.avg_repeats * N
    print(f"[bench] averaging: {repeats} batches ({args.avg_repeats} passes over {N})", file=sys.stderr, flush=True)
    times = interleaved_times(variants, repeats, 1, args.device)
    plain = statistics.median(times[plain_name])
    timing = []
    ours = next(iter(AVERAGING_VARIANTS))
    for name in variants:
        stats = summary(times[name])
        ratios = paired_ratios(times[name], times[plain_name])  # variant time / plain time, per batch
        to_ours = paired_ratios(times[name], times[ours])  # and / our plain pass's time (mean_corrections' cost)
        timing.append({"variant": name, **stats, "time_ratio_to_plain": stats["median_s"] / plain,
                       "paired_time_ratio_to_plain": statistics.median(ratios),
                       "paired_time_ratio_ci95": median_interval(ratios),
                       "paired_time_ratio_to_ours": statistics.median(to_ours),
                       "paired_time_ratio_to_ours_ci95": median_interval(to_ours),
                       "seconds": times[name]})  # per batch, in the order run: the plain forward's beside it
    del model
    gc.collect()
    memory = []
    L = config.num_hidden_layers
    for name, count, layers in ((ours, N, L), (ours, 4 * N, L), (ours, N, max(1, L // 2)), ("original loop", N, L),
                                (plain_name, N, L), (plain_name, N, max(1, L // 2))):
        print(f"[bench] averaging memory: {name}, {count} batches, {layers} layers (child process)", file=sys.stderr,
              flush=True)
        job = {"kind": "averaging", "variant": name, "batches": count, "layers": layers}
        memory.append({"variant": name, "batches": count, "layers": layers, **in_fresh_process(measure_memory, args, job)})
    return {"seq_len": T, "batches": N, "batch_size": args.batch_size, "timing": timing, "memory": memory}


def bench_training(args, config):
    T = args.train_seq_len
    steps = {}
    trainable = {}
    chosen = {name: spec for name, spec in TRAINING_VARIANTS.items()
              if name == "probing" or args.train_variants is None or name in args.train_variants}
    for variant in chosen:
        model, _, step = training_setup(args, config, variant, T)
        steps[variant] = step
        trainable[variant] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"[bench] training: {len(steps)} modes x {args.train_repeats} repeats", file=sys.stderr, flush=True)
    # each mode beside the stock probe's step (R v1 R v2 … R): the probing steps' speed-ups are paired ratios
    times, beside = sandwiched_times(steps, "probing", args.train_repeats, args.warmup, args.device)
    # probing steps with constant heads: a forward of the frozen encoder, so they have the forward's FLOP bound
    bounded = {name for name, spec in chosen.items() if spec.mode == "grad_for_classifier_only"
               and spec.constant_fraction and not spec.stock_with_activation_grads}
    # the stock probing step's time share in matrix products (eager CPU): its Bernoulli draws, activations and
    # norms stay, so the time-weighted bound is what removing the FLOPs alone, at the stock's rate, would give
    profiled = bounded and not str(args.device).startswith("cuda")
    modelled = modelled_time_share(steps["probing"]) if profiled else None
    del steps
    gc.collect()
    L, H = config.num_hidden_layers, config.num_attention_heads
    rows = []
    for variant, spec in chosen.items():
        print(f"[bench] training memory: {variant} (child process)", file=sys.stderr, flush=True)
        memory = in_fresh_process(measure_memory, args, {"kind": "training", "variant": variant})
        row = {"variant": variant, "mode": spec.mode or "full fine-tuning",
               "trainable_parameters": trainable[variant], **summary(times[variant]), **memory}
        if variant != "probing":
            paired = paired_ratios(beside[variant], times[variant])  # stock probe beside / this mode
            row.update(paired_speed_ratio=statistics.median(paired), paired_speed_ratio_ci95=median_interval(paired),
                       # the raw rounds, so runs can be pooled later (--pool): one process, so one cluster
                       rounds={"seconds": times[variant], "stock_beside_seconds": beside[variant],
                               "process": [0] * len(paired)})
        if variant in bounded:
            static = spec.constant_heads(L, H)
            k = sum(len(heads) for heads in static.values())
            flops = flop_bound(config, T, k, args.batch_size, static)
            row["flop_bound_speedup"] = flops["bound_speedup"]
            row["percent_of_bound"] = percent_of_bound(row["paired_speed_ratio"], row["flop_bound_speedup"])
            if modelled is not None:
                row["stock_modelled_time_share"] = modelled
                row["time_weighted_bound"] = time_weighted_bound(flops["removed_share"], modelled)
                row["percent_of_time_weighted_bound"] = percent_of_bound(row["paired_speed_ratio"],
                                                                         row["time_weighted_bound"])
        rows.append(row)
    return {"seq_len": T, "batch_size": args.batch_size, "rows": rows}


def run_benchmark(args, argv):
    """Run the benchmarks `args` asks for (or pool earlier runs); print the report and write it (--json) atomically."""
    if args.pool:
        return _report(pool_runs(args.pool), pooled_markdown, args.json)
    quiet_transformers()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = load_config(args)
    busy = os.getloadavg()[0]
    if not str(args.device).startswith("cuda") and busy + torch.get_num_threads() > (os.cpu_count() or 1) + 0.5:
        print(f"[bench] warning: 1-min load average {busy:.2f} with {torch.get_num_threads()} torch threads on "
              f"{os.cpu_count()} CPUs: other processes compete for the cores and timings will be noisy"
              + (" (consider --threads 1)" if torch.get_num_threads() > 1 else ""), file=sys.stderr, flush=True)
    started = time.perf_counter()
    results = {
        "machine": machine_info(args),
        "settings": {
            "model": ("tiny random BERT" if args.tiny else f"random {args.model_type} ({FAMILY_CONFIGS[args.model_type][0]} "
                      "shapes)" if args.model_type else args.model_name_or_path
                      + (" (its config, random weights)" if args.random_weights else "")),
            "stock_attention": stock_implementation(config),
            "command": shlex.join(["papa-benchmark", *argv]),
            "layers": config.num_hidden_layers, "heads": config.num_attention_heads,
            "hidden_size": config.hidden_size, "intermediate_size": config.intermediate_size,
            "batch_size": args.batch_size, "seq_lens": args.seq_lens, "repeats": args.repeats,
            "padded_rows": args.padded_rows,
            "warmup": args.warmup, "avg_batches": args.avg_batches, "avg_seq_len": args.avg_seq_len,
            "avg_repeats": args.avg_repeats, "train_seq_len": args.train_seq_len,
            "train_repeats": args.train_repeats,
            "inference_head_choice": "layer-major: the first k heads layer by layer; every other head: odd heads of "
                                     "every layer first; ranked: the first k rows of --sorted_heads "
                                     f"({args.sorted_heads}); random constant matrices",
        },
        "flop_model": FLOP_NOTE,
    }
    if "inference" not in args.skip:
        results["inference"] = bench_inference(args, config)
    if "averaging" not in args.skip:
        results["averaging"] = bench_averaging(args, config)
    if "training" not in args.skip:
        results["training"] = bench_training(args, config)
    results["goals"] = goals(results)
    results["wall_seconds"] = time.perf_counter() - started
    results["machine"]["load_average_1m_end"] = os.getloadavg()[0]
    return _report(results, markdown, args.json)


def _report(results, to_markdown, json_path):
    table = to_markdown(results)
    print(table)
    if json_path:
        save_json(results, json_path, indent=2)
        save_text(table, os.path.splitext(json_path)[0] + ".md")
    return results
