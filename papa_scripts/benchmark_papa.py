#!/usr/bin/env python
"""Benchmark PAPA's speed and memory against the stock model and the original code's loops.

Measured side by side in one process, variants interleaved round-robin within each repetition
(the order rotates every repetition), medians reported after warm-up:

1. inference (no attentions requested, torch.inference_mode): stock sdpa encoder vs PAPA-patched
   copies with 0, 1/2, 7/8 and all heads constant, at each --seq_lens; speed ratio to stock and the
   FLOP bound of pruning the Q/K projections and QKᵀ of the constant heads;
2. the averaging pass (`papa.averaging.accumulate_attention`, eager model) vs. a plain eager forward
   with output_attentions=True over the same batches vs. the original PAPA code's loop; peak memory
   of the pass at N and 4N batches (each in a fresh child process);
3. one training step (forward + backward + AdamW, train mode) of a freeze-extract sequence probe in
   probing mode (stock backbone, and with half the heads constant), full fine-tuning and sorting
   mode: median time and peak memory (child processes).

Peak memory: each measurement runs in a fresh process forked from a forkserver that has only
imported the libraries; CPU: increase of ru_maxrss over the pass, CUDA: max_memory_allocated.

    HF_HUB_OFFLINE=1 python papa_scripts/benchmark_papa.py --threads 1 --json benchmarks/minilm_cpu.json
    python papa_scripts/benchmark_papa.py --tiny --repeats 2 --json /tmp/tiny.json   # smoke test
"""

import argparse
import copy
import datetime
import gc
import json
import os
import platform
import resource
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoConfig, AutoModel, BertConfig  # noqa: E402

from papa.attention import patch_model  # noqa: E402
from papa.averaging import accumulate_attention  # noqa: E402
from papa.modeling import build_model, default_model_path, set_trainable  # noqa: E402

transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

# fractions of all heads made constant in the inference benchmark (first k in layer-major order)
INFERENCE_FRACTIONS = (("0 constant", 0.0), ("1/2 constant", 0.5), ("7/8 constant", 0.875), ("all constant", 1.0))
TRAINING_VARIANTS = ("probing", "probing (1/2 constant)", "full fine-tuning", "sorting")
TRAINING_MODES = {
    "probing": "grad_for_classifier_only",
    "probing (1/2 constant)": "grad_for_classifier_only",
    "full fine-tuning": None,
    "sorting": "sort_calculating",
}
MEMORY_TOLERANCE = (0.10, 4.0)  # "equal" memory: within 10 % or 4 MB (RSS granularity and allocator noise)

FLOP_NOTE = (
    "FLOPs per layer per token: Q,K,V,O projections 4·2·h², FFN 2·2·h·ffn, QKᵀ 2·T·h, AV 2·T·h "
    "(embeddings, pooler, softmax, layer norms, biases and activations ignored). A constant head "
    "removes its Q and K projections (2·2·h·d) and its QKᵀ (2·T·d); bound speedup = 1/(1 − removed share)."
)


# ----------------------------------------------------------------------------- FLOP model


def flop_counts(hidden_size, intermediate_size, num_layers, num_heads, seq_len, num_constant_heads):
    """FLOPs per token of the encoder layers, and what making `num_constant_heads` heads constant removes.

    Returns dict(total, removed, removed_share, bound_speedup); see FLOP_NOTE for the model.
    """
    h, ffn, T = hidden_size, intermediate_size, seq_len
    d = h // num_heads
    per_layer = 4 * 2 * h * h + 2 * 2 * h * ffn + 2 * T * h + 2 * T * h
    total = num_layers * per_layer
    removed = num_constant_heads * (2 * 2 * h * d + 2 * T * d)
    share = removed / total
    return {"total": total, "removed": removed, "removed_share": share, "bound_speedup": 1.0 / (1.0 - share)}


def flop_bound(config, seq_len, num_constant_heads):
    """`flop_counts` for an HF BERT/RoBERTa config."""
    return flop_counts(config.hidden_size, config.intermediate_size, config.num_hidden_layers,
                       config.num_attention_heads, seq_len, num_constant_heads)


def percent_of_bound(ratio, bound):
    """(ratio − 1) / (bound − 1) in percent; None when the bound is 1 (nothing removed)."""
    if bound <= 1.0 + 1e-12:
        return None
    return 100.0 * (ratio - 1.0) / (bound - 1.0)


# ----------------------------------------------------------------------------- models and inputs


def tiny_config():
    return BertConfig(vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=512, pad_token_id=0)


def load_config(args):
    return tiny_config() if args.tiny else AutoConfig.from_pretrained(args.model_name_or_path)


def load_encoder(args, attn_implementation):
    """The bare encoder (AutoModel, with pooler) in eval mode on args.device."""
    if args.tiny:
        torch.manual_seed(0)
        model = AutoModel.from_config(tiny_config(), attn_implementation=attn_implementation)
    else:
        model = AutoModel.from_pretrained(args.model_name_or_path, attn_implementation=attn_implementation)
    return model.to(args.device).eval()


def first_k_heads(k, num_layers, num_heads):
    """The first k heads in layer-major order, as [[layer, head], ...]."""
    return [[i // num_heads, i % num_heads] for i in range(k)]


def random_constants(config, seq_len, seed=0):
    """Random [L, H, T, T] constant matrices (their values do not affect speed)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(config.num_hidden_layers, config.num_attention_heads, seq_len, seq_len, generator=generator)


def token_ids(config, lengths, seq_len, generator):
    """[CLS] w … w [SEP] [PAD] … rows with the given real lengths, ids in the word-piece range."""
    batch = len(lengths)
    low = min(1000, config.vocab_size // 2)
    ids = torch.randint(low, config.vocab_size, (batch, seq_len), generator=generator)
    mask = (torch.arange(seq_len)[None, :] < torch.as_tensor(lengths)[:, None]).long()
    cls_id, sep_id = (101, 102) if config.vocab_size > 1000 else (1, 2)
    ids[:, 0] = cls_id
    ids[torch.arange(batch), torch.as_tensor(lengths) - 1] = sep_id
    ids = ids * mask + (config.pad_token_id or 0) * (1 - mask)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def inference_inputs(config, batch_size, seq_len, device, seed=0):
    """Every row has its last quarter of positions padded, so the masking path is exercised."""
    generator = torch.Generator().manual_seed(seed)
    lengths = [seq_len - seq_len // 4] * batch_size
    return {k: v.to(device) for k, v in token_ids(config, lengths, seq_len, generator).items()}


def averaging_batches(config, num_batches, batch_size, seq_len, seed=0):
    """`num_batches` CPU batches with real lengths drawn uniformly in [T/4, T]."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(num_batches):
        lengths = torch.randint(max(2, seq_len // 4), seq_len + 1, (batch_size,), generator=generator).tolist()
        batches.append(token_ids(config, lengths, seq_len, generator))
    return batches


def touch_parameters(model):
    """Fault in memory-mapped weights so they count before a memory baseline is taken."""
    with torch.no_grad():
        for tensor in list(model.parameters()) + list(model.buffers()):
            tensor.sum()


# ----------------------------------------------------------------------------- the averaging variants


@torch.no_grad()
def plain_attention_pass(model, batches, seq_len, device):
    """The floor: an eager forward with output_attentions=True, attentions discarded."""
    encoder = model.base_model.eval()
    for batch in batches:
        inputs = {k: batch[k].to(device) for k in ("input_ids", "attention_mask", "token_type_ids")}
        encoder(**inputs, output_attentions=True, return_dict=True)


@torch.no_grad()
def original_accumulate(model, batches, seq_len, device):
    """The original PAPA averaging loop: a [B, L, H, T, T] copy per batch, masked, summed in float32."""
    config = model.config
    L, H, T = config.num_hidden_layers, config.num_attention_heads, seq_len
    attention_sums = torch.zeros(L, H, T, T, device=device)
    pattern_sums = torch.zeros(T, T, device=device)
    encoder = model.base_model.eval()
    for batch in batches:
        inputs = {k: batch[k].to(device) for k in ("input_ids", "attention_mask", "token_type_ids")}
        attentions = encoder(**inputs, output_attentions=True, return_dict=True).attentions
        B = inputs["input_ids"].shape[0]
        cur = torch.zeros(B, L, H, T, T, device=device)
        for layer in range(L):
            cur[:, layer] = attentions[layer]
        mask = inputs["attention_mask"].float()
        pattern = mask[:, :, None] * mask[:, None, :]  # (B, T, T)
        cur = cur * pattern.unsqueeze(1).unsqueeze(1)
        attention_sums += cur.sum(0)
        pattern_sums += pattern.sum(0)
    return attention_sums, pattern_sums


AVERAGING_VARIANTS = {
    "accumulate_attention (ours)": lambda model, batches, T, device: accumulate_attention(model, batches, T, device),
    "plain eager forward, output_attentions": plain_attention_pass,
    "original loop": original_accumulate,
}


# ----------------------------------------------------------------------------- training


def training_setup(args, config, variant, seq_len):
    """(model in train mode, AdamW over its trainable parameters, a step function)."""
    cfg = copy.deepcopy(config)
    cfg.num_labels = 2
    L, H = cfg.num_hidden_layers, cfg.num_attention_heads
    constants, static, mix = None, None, False
    if variant == "sorting":
        constants, mix = random_constants(cfg, seq_len), True
    elif variant == "probing (1/2 constant)":
        constants, static = random_constants(cfg, seq_len), first_k_heads(L * H // 2, L, H)
    torch.manual_seed(0)
    model = build_model("AutoModelForSequenceClassification", cfg, None if args.tiny else args.model_name_or_path,
                        constants, static, mix, freeze_extract_seq_len=seq_len)
    set_trainable(model, TRAINING_MODES[variant])
    model.to(args.device).train()  # as the Trainer does: dropout on
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    inputs = averaging_batches(cfg, 1, args.batch_size, seq_len, seed=1)[0]
    inputs = {k: v.to(args.device) for k, v in inputs.items()}
    labels = torch.randint(0, 2, (args.batch_size,), generator=torch.Generator().manual_seed(2)).to(args.device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = model(**inputs, labels=labels).loss
        loss.backward()
        optimizer.step()

    return model, optimizer, step


# ----------------------------------------------------------------------------- timing


def synchronize(device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def interleaved_times(variants, repeats, warmup, device):
    """{name: [seconds per repetition]}: every repetition runs every variant once, order rotated."""
    names = list(variants)
    times = {name: [] for name in names}
    for rep in range(warmup + repeats):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            synchronize(device)
            start = time.perf_counter()
            variants[name]()
            synchronize(device)
            elapsed = time.perf_counter() - start
            if rep >= warmup:
                times[name].append(elapsed)
    return times


def summary(samples):
    ordered = sorted(samples)
    q = statistics.quantiles(ordered, n=4) if len(ordered) >= 2 else [ordered[0]] * 3
    return {"median_s": statistics.median(ordered), "p25_s": q[0], "p75_s": q[2], "min_s": ordered[0],
            "n": len(ordered)}


def paired_ratio(reference, variant):
    """Median over repetitions of reference_time / variant_time (same round → same machine state)."""
    return statistics.median(r / v for r, v in zip(reference, variant))


# ----------------------------------------------------------------------------- benchmarks


def bench_inference(args, config):
    L, H = config.num_hidden_layers, config.num_attention_heads
    stock = load_encoder(args, "sdpa")
    rows = []
    for T in args.seq_lens:
        inputs = inference_inputs(config, args.batch_size, T, args.device)
        constants = random_constants(config, T)
        models = {"stock sdpa": stock}
        heads = {"stock sdpa": 0}
        for label, fraction in INFERENCE_FRACTIONS:
            k = round(fraction * L * H)
            model = copy.deepcopy(stock)
            patch_model(model, constants, static_heads=first_k_heads(k, L, H))
            models[f"PAPA, {label}"] = model.eval()
            heads[f"PAPA, {label}"] = k

        def runner(model):
            def run():
                with torch.inference_mode():
                    model(**inputs)
            return run

        print(f"[bench] inference T={T}: {len(models)} variants x {args.repeats} repeats", file=sys.stderr, flush=True)
        times = interleaved_times({name: runner(m) for name, m in models.items()}, args.repeats, args.warmup, args.device)
        stock_median = statistics.median(times["stock sdpa"])
        for name in models:
            stats = summary(times[name])
            flops = flop_bound(config, T, heads[name])
            ratio = stock_median / stats["median_s"]
            rows.append({
                "seq_len": T, "variant": name, "constant_heads": heads[name], "total_heads": L * H,
                **stats,
                "speed_ratio_to_stock": ratio,
                "time_ratio_to_stock": 1.0 / ratio,
                "paired_speed_ratio": paired_ratio(times["stock sdpa"], times[name]),
                "flop_removed_share": flops["removed_share"],
                "flop_bound_speedup": flops["bound_speedup"],
                "percent_of_bound": None if name == "stock sdpa" else percent_of_bound(ratio, flops["bound_speedup"]),
            })
        del models
        gc.collect()
    return rows


def bench_averaging(args, config):
    T, N = args.avg_seq_len, args.avg_batches
    model = load_encoder(args, "eager")
    batches = averaging_batches(config, N, args.batch_size, T)
    variants = {name: (lambda fn=fn: fn(model, batches, T, args.device)) for name, fn in AVERAGING_VARIANTS.items()}
    print(f"[bench] averaging: {N} batches x {args.avg_repeats} repeats", file=sys.stderr, flush=True)
    times = interleaved_times(variants, args.avg_repeats, 1, args.device)
    plain = statistics.median(times["plain eager forward, output_attentions"])
    timing = []
    for name in variants:
        stats = summary(times[name])
        timing.append({"variant": name, **stats, "time_ratio_to_plain": stats["median_s"] / plain,
                       "paired_time_ratio_to_plain": 1.0 / paired_ratio(times["plain eager forward, output_attentions"],
                                                                        times[name])})
    del model
    gc.collect()
    memory = []
    for name, count in ((next(iter(AVERAGING_VARIANTS)), N), (next(iter(AVERAGING_VARIANTS)), 4 * N),
                        ("original loop", N), ("plain eager forward, output_attentions", N)):
        print(f"[bench] averaging memory: {name}, {count} batches (child process)", file=sys.stderr, flush=True)
        memory.append({"variant": name, "batches": count,
                       **run_child(args, {"kind": "averaging", "variant": name, "batches": count})})
    return {"seq_len": T, "batches": N, "batch_size": args.batch_size, "timing": timing, "memory": memory}


def bench_training(args, config):
    T = args.train_seq_len
    steps = {}
    trainable = {}
    for variant in TRAINING_VARIANTS:
        model, _, step = training_setup(args, config, variant, T)
        steps[variant] = step
        trainable[variant] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"[bench] training: {len(steps)} modes x {args.train_repeats} repeats", file=sys.stderr, flush=True)
    times = interleaved_times(steps, args.train_repeats, args.warmup, args.device)
    del steps
    gc.collect()
    rows = []
    for variant in TRAINING_VARIANTS:
        print(f"[bench] training memory: {variant} (child process)", file=sys.stderr, flush=True)
        memory = run_child(args, {"kind": "training", "variant": variant})
        rows.append({"variant": variant, "mode": TRAINING_MODES[variant] or "full fine-tuning",
                     "trainable_parameters": trainable[variant], **summary(times[variant]), **memory})
    return {"seq_len": T, "batch_size": args.batch_size, "rows": rows}


# ----------------------------------------------------------------------------- peak memory in a child process


def current_rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def set_malloc_mmap_threshold(nbytes):
    """glibc: serve allocations ≥ nbytes by mmap, so freed tensors leave the RSS at once.

    A fixed threshold also switches off glibc's dynamic one, whose heap reuse otherwise makes
    the RSS peak drift by tens of MB between runs (and creep with the number of batches) for
    every variant alike. Returns whether it took effect.
    """
    if nbytes <= 0 or not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(-3, int(nbytes)))  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        return False


def measure_memory(args, job):
    """Run one measurement in this (fresh) process and return its peak memory figures."""
    torch.set_num_threads(args.threads or torch.get_num_threads())
    config = load_config(args)
    cuda = str(args.device).startswith("cuda")
    threshold = None if cuda else (args.malloc_mmap_threshold if set_malloc_mmap_threshold(args.malloc_mmap_threshold)
                                   else None)
    if job["kind"] == "averaging":
        model = load_encoder(args, "eager")
        batches = averaging_batches(config, job["batches"], args.batch_size, args.avg_seq_len)
        run = lambda: AVERAGING_VARIANTS[job["variant"]](model, batches, args.avg_seq_len, args.device)  # noqa: E731
    else:
        model, _, step = training_setup(args, config, job["variant"], args.train_seq_len)

        def run():
            for _ in range(2):  # the second step runs with AdamW's state already allocated
                step()
    touch_parameters(model)
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        run()
        torch.cuda.synchronize()
        return {"peak_increase_mb": (torch.cuda.max_memory_allocated() - base) / 2**20,
                "memory_kind": "torch.cuda.max_memory_allocated − memory_allocated before the pass"}
    rss_before, peak_before = current_rss_mb(), peak_rss_mb()
    run()
    peak_after = peak_rss_mb()
    return {"peak_increase_mb": peak_after - peak_before, "rss_before_mb": rss_before,
            "peak_rss_before_mb": peak_before, "peak_rss_after_mb": peak_after,
            "memory_kind": "child process ru_maxrss increase over the pass",
            "malloc_mmap_threshold": threshold}


def _child_entry(args, job, queue):
    try:
        queue.put(("ok", measure_memory(args, job)))
    except BaseException:  # noqa: BLE001 - reported to the parent
        import traceback

        queue.put(("error", traceback.format_exc()))


_FORKSERVER = None


def run_child(args, job):
    """`measure_memory` in a fresh child process.

    Children are forked from a forkserver that imported this script (torch, transformers, papa)
    once but never ran a model, so each starts clean without paying the imports again.
    """
    global _FORKSERVER
    if _FORKSERVER is None:
        import multiprocessing

        _FORKSERVER = multiprocessing.get_context("forkserver")
        # (Python < 3.12 ignores "__main__" here, so name the heavy modules; the children then
        # re-run only this script's cheap top level)
        _FORKSERVER.set_forkserver_preload(["__main__", "torch", "transformers", "transformers.models.bert.modeling_bert",
                                            "transformers.models.auto.modeling_auto", "papa.attention",
                                            "papa.averaging", "papa.modeling", "papa.poolers"])
    queue = _FORKSERVER.Queue()
    process = _FORKSERVER.Process(target=_child_entry, args=(args, job, queue))
    process.start()
    try:
        status, payload = queue.get(timeout=1800)
    finally:
        process.join(timeout=60)
    if status != "ok":
        raise RuntimeError(f"memory child {job} failed:\n{payload}")
    return payload


# ----------------------------------------------------------------------------- report


def machine_info(args):
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {
        "cpu": cpu, "logical_cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(), "python": platform.python_version(),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "load_average_1m": os.getloadavg()[0],
        "device": args.device, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    if str(args.device).startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(args.device)
    return info


def relative_spread(row):
    """Half the interquartile range over the median: the timing noise of one variant."""
    return (row["p75_s"] - row["p25_s"]) / (2 * row["median_s"])


def goals(results):
    """Each goal judged strictly on the medians; `noise` gives ± half the IQR (relative) of the
    two timings compared, so a miss smaller than that reads as 'within noise'."""
    out = []
    inference = results.get("inference") or []
    for T in sorted({r["seq_len"] for r in inference}):
        by_name = {r["variant"]: r for r in inference if r["seq_len"] == T}
        stock = by_name["stock sdpa"]
        zero = by_name.get("PAPA, 0 constant")
        if zero:
            out.append({"goal": f"T={T}: 0 constant heads ≤ 1.00x stock time",
                        "value": f"{zero['time_ratio_to_stock']:.3f}x stock time "
                                 f"(paired {1 / zero['paired_speed_ratio']:.3f}x)",
                        "met": zero["time_ratio_to_stock"] <= 1.0,
                        "noise": max(relative_spread(stock), relative_spread(zero))})
        full = by_name.get("PAPA, all constant")
        if full:
            noise = max(relative_spread(stock), relative_spread(full))
            out.append({"goal": f"T={T}: all heads constant ≥ 1.15x faster",
                        "value": f"{full['speed_ratio_to_stock']:.3f}x (paired {full['paired_speed_ratio']:.3f}x)",
                        "met": full["speed_ratio_to_stock"] >= 1.15, "noise": noise})
            pct = full["percent_of_bound"]
            out.append({"goal": f"T={T}: all heads constant ≥ 90% of the FLOP bound ({full['flop_bound_speedup']:.3f}x)",
                        "value": f"{pct:.1f}%", "met": pct is not None and pct >= 90, "noise": noise})
    averaging = results.get("averaging")
    if averaging:
        timing = {r["variant"]: r for r in averaging["timing"]}
        ours = timing["accumulate_attention (ours)"]
        plain = timing["plain eager forward, output_attentions"]
        out.append({"goal": "averaging: accumulate_attention ≤ 1.10x plain eager forward",
                    "value": f"{ours['time_ratio_to_plain']:.3f}x", "met": ours["time_ratio_to_plain"] <= 1.10,
                    "noise": max(relative_spread(ours), relative_spread(plain))})
        mem = [m for m in averaging["memory"] if m["variant"] == "accumulate_attention (ours)"]
        if len(mem) == 2:
            a, b = mem[0]["peak_increase_mb"], mem[1]["peak_increase_mb"]
            tolerance = max(MEMORY_TOLERANCE[0] * abs(a), MEMORY_TOLERANCE[1])
            out.append({"goal": f"averaging peak memory at {mem[1]['batches']} batches = at {mem[0]['batches']} "
                                f"(±max(10%, 4 MB))",
                        "value": f"{a:.1f} MB vs {b:.1f} MB", "met": abs(b - a) <= tolerance, "noise": None})
    return out


def fmt(value, spec=".3f", none="–"):
    return none if value is None else format(value, spec)


def markdown(results):
    lines = []
    m = results["machine"]
    s = results["settings"]
    lines.append(f"# PAPA benchmark — {s['model']}")
    lines.append("")
    lines.append(f"{m['cpu']} ({m['logical_cpus']} logical CPUs, torch threads {m['torch_threads']}), device "
                 f"{m['device']}{' ' + m['gpu'] if 'gpu' in m else ''}; torch {m['torch']}, transformers "
                 f"{m['transformers']}, Python {m['python']}; {m['date']}; 1-min load average "
                 f"{m['load_average_1m']:.2f} at start, {m.get('load_average_1m_end', float('nan')):.2f} at end. "
                 f"Command: `{s['command']}`. Medians of interleaved repetitions "
                 f"after warm-up.")
    if results.get("inference"):
        lines += ["", f"## Inference (batch {s['batch_size']}, last quarter of each row padded, no attentions, "
                      f"inference_mode; {s['repeats']} repeats)", "",
                  "| T | variant | constant heads | median ms | IQR ms | speed vs stock | paired | FLOP bound | % of bound |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in results["inference"]:
            lines.append(f"| {r['seq_len']} | {r['variant']} | {r['constant_heads']}/{r['total_heads']} | "
                         f"{1e3 * r['median_s']:.1f} | {1e3 * (r['p75_s'] - r['p25_s']):.1f} | "
                         f"{r['speed_ratio_to_stock']:.3f}x | {r['paired_speed_ratio']:.3f}x | {r['flop_bound_speedup']:.3f}x | "
                         f"{fmt(r['percent_of_bound'], '.0f')}{'%' if r['percent_of_bound'] is not None else ''} |")
        lines += ["", "speed vs stock = stock median / variant median; paired = median over repetitions of "
                      "stock time / variant time within the same round. FLOP model: " + FLOP_NOTE]
    if results.get("averaging"):
        a = results["averaging"]
        lines += ["", f"## Averaging pass ({a['batches']} batches of {a['batch_size']}, T={a['seq_len']}, eager model; "
                      f"{s['avg_repeats']} repeats)", "",
                  "| variant | median s | IQR s | time vs plain forward |", "|---|---|---|---|"]
        for r in a["timing"]:
            lines.append(f"| {r['variant']} | {r['median_s']:.3f} | {r['p75_s'] - r['p25_s']:.3f} | "
                         f"{r['time_ratio_to_plain']:.3f}x |")
        lines += ["", "| variant | batches | peak memory increase MB |", "|---|---|---|"]
        for r in a["memory"]:
            lines.append(f"| {r['variant']} | {r['batches']} | {r['peak_increase_mb']:.1f} |")
        threshold = a["memory"][0].get("malloc_mmap_threshold")
        lines += ["", "Memory: " + a["memory"][0]["memory_kind"] + " (each row a fresh child process; model "
                  "weights loaded and touched before the baseline"
                  + (f"; mallopt M_MMAP_THRESHOLD={threshold}" if threshold else "") + ")."]
    if results.get("training"):
        t = results["training"]
        lines += ["", f"## One training step (forward + backward + AdamW, batch {t['batch_size']}, T={t['seq_len']}, "
                      f"freeze-extract sequence probe, train mode; {s['train_repeats']} repeats)", "",
                  "| mode | set_trainable | trainable params | median ms/step | IQR ms | peak memory increase MB |",
                  "|---|---|---|---|---|---|"]
        for r in t["rows"]:
            lines.append(f"| {r['variant']} | {r['mode']} | {r['trainable_parameters']:,} | {1e3 * r['median_s']:.1f} | "
                         f"{1e3 * (r['p75_s'] - r['p25_s']):.1f} | {r['peak_increase_mb']:.1f} |")
        lines += ["", "Memory: peak increase over two steps (AdamW state included) in a fresh child process."]
    if results.get("goals"):
        lines += ["", "## Goals", "", "| goal | measured | met | timing noise (±½ IQR) |", "|---|---|---|---|"]
        for g in results["goals"]:
            noise = g.get("noise")
            lines.append(f"| {g['goal']} | {g['value']} | {'yes' if g['met'] else 'NO'} | "
                         f"{'–' if noise is None else f'±{100 * noise:.1f}%'} |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- CLI


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model_name_or_path", default=default_model_path(),
                   help="BERT/RoBERTa checkpoint (folder or hub name); default: the bundled all-MiniLM-L6-v2")
    p.add_argument("--tiny", action="store_true",
                   help="use a tiny random BERT (2 layers, 4 heads, hidden 32) instead: a smoke test in seconds")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where to run")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: torch's choice). On a shared machine use fewer threads than "
                        "idle cores: an intra-op thread that loses its core stalls every parallel region")
    p.add_argument("--batch_size", type=int, default=32, help="batch size of every benchmark")
    p.add_argument("--seq_lens", type=int, nargs="+", default=[64, 128], help="sequence lengths for inference")
    p.add_argument("--repeats", type=int, default=15, help="timed repetitions per inference variant")
    p.add_argument("--warmup", type=int, default=1, help="untimed warm-up rounds (inference and training)")
    p.add_argument("--avg_batches", type=int, default=8, help="N: batches in the averaging pass (memory: N and 4N)")
    p.add_argument("--avg_seq_len", type=int, default=64, help="sequence length of the averaging pass")
    p.add_argument("--avg_repeats", type=int, default=3, help="timed repetitions of each averaging variant")
    p.add_argument("--train_seq_len", type=int, default=64, help="sequence length of the training step")
    p.add_argument("--train_repeats", type=int, default=6, help="timed training steps per mode")
    p.add_argument("--malloc_mmap_threshold", type=int, default=131072,
                   help="CPU memory children call mallopt(M_MMAP_THRESHOLD, this many bytes), so freed tensors "
                        "leave the RSS at once and peaks are reproducible; 0 keeps glibc's dynamic default")
    p.add_argument("--skip", nargs="*", default=[], choices=["inference", "averaging", "training"],
                   help="benchmarks to leave out")
    p.add_argument("--json", default=None,
                   help="write all figures to this JSON file (and the markdown table to the same path with .md)")
    args = p.parse_args(argv)
    for name in ("batch_size", "repeats", "avg_batches", "avg_seq_len", "avg_repeats", "train_seq_len",
                 "train_repeats"):
        if getattr(args, name) <= 0:
            p.error(f"--{name} must be positive")
    if args.warmup < 0 or any(t <= 0 for t in args.seq_lens):
        p.error("--warmup must be ≥ 0 and --seq_lens positive")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda but CUDA is not available")
    return args


def main(argv=None):
    args = parse_args(argv)
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
            "model": "tiny random BERT" if args.tiny else args.model_name_or_path,
            "command": " ".join(["python", os.path.relpath(os.path.abspath(__file__))] + sys.argv[1:]
                                if argv is None else ["benchmark_papa.main"] + list(argv)),
            "layers": config.num_hidden_layers, "heads": config.num_attention_heads,
            "hidden_size": config.hidden_size, "intermediate_size": config.intermediate_size,
            "batch_size": args.batch_size, "seq_lens": args.seq_lens, "repeats": args.repeats,
            "warmup": args.warmup, "avg_batches": args.avg_batches, "avg_seq_len": args.avg_seq_len,
            "avg_repeats": args.avg_repeats, "train_seq_len": args.train_seq_len,
            "train_repeats": args.train_repeats,
            "inference_head_choice": "first k heads in layer-major order; random constant matrices",
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
    table = markdown(results)
    print(table)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
            f.write("\n")
        with open(os.path.splitext(args.json)[0] + ".md", "w") as f:
            f.write(table)


if __name__ == "__main__":
    main()
