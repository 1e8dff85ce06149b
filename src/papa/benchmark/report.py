"""The benchmark's report: the machine, the goals judged on the medians, and the markdown tables."""

import datetime
import os
import platform

import torch
import transformers

from .. import hugepages
from .flops import FLOP_NOTE, percent_of_bound

MEMORY_TOLERANCE = (0.10, 4.0)  # "equal" memory: within 10 % or 4 MB (RSS granularity and allocator noise)


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
        "load_average_1m": os.getloadavg()[0], "huge_pages": hugepages.describe(),
        "device": args.device, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    if str(args.device).startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(args.device)
    return info


def relative_spread(row):
    """Half the interquartile range over the median: the timing noise of one variant."""
    return (row["p75_s"] - row["p25_s"]) / (2 * row["median_s"])


def _speed_goals(T, by_name):
    stock = by_name["stock"]
    out = []
    zero = by_name.get("PAPA, 0 constant")
    if zero:
        out.append({"goal": f"T={T}: 0 constant heads ≤ 1.00x stock time",
                    "value": f"{zero['time_ratio_to_stock']:.3f}x stock time "
                             f"(paired {1 / zero['paired_speed_ratio']:.3f}x)",
                    "met": zero["time_ratio_to_stock"] <= 1.0,
                    "noise": max(relative_spread(stock), relative_spread(zero))})
    full = by_name.get("PAPA, all constant")
    if full:
        out.append({"goal": f"T={T}: all heads constant ≥ 1.15x faster",
                    "value": f"{full['speed_ratio_to_stock']:.3f}x (paired {full['paired_speed_ratio']:.3f}x)",
                    "met": full["speed_ratio_to_stock"] >= 1.15,
                    "noise": max(relative_spread(stock), relative_spread(full))})
    for name in ("PAPA, all constant", "PAPA, 1/2 constant, ranked", "PAPA, 7/8 constant, ranked",
                 "PAPA, 1/2 constant, every other head"):
        row = by_name.get(name)
        if row:
            pct, bound = row["percent_of_bound"], row["flop_bound_speedup"]
            low, high = (percent_of_bound(r, bound) for r in row["paired_speed_ratio_ci95"])
            out.append({"goal": f"T={T}: {name[len('PAPA, '):]} ≥ 90% of the FLOP bound ({bound:.3f}x)",
                        "value": f"{pct:.1f}% ({row['speed_ratio_to_stock']:.3f}x); paired "
                                 f"{percent_of_bound(row['paired_speed_ratio'], bound):.0f}% (95% CI {low:.0f}–{high:.0f}%)"
                                 + _time_weighted_value(row),
                        "met": pct is not None and pct >= 90,
                        "noise": max(relative_spread(stock), relative_spread(row))})
    return out


def _time_weighted_value(row):
    pct = row.get("percent_of_time_weighted_bound")
    return "" if pct is None else f"; {pct:.0f}% of the time-weighted bound ({row['time_weighted_bound']:.3f}x)"


def _same_memory(a, b):
    return abs(b - a) <= max(MEMORY_TOLERANCE[0] * abs(a), MEMORY_TOLERANCE[1])


def goals(results):
    """Each goal judged strictly on the medians; `noise` gives ± half the IQR (relative) of the
    two timings compared, so a miss smaller than that reads as 'within noise'."""
    out = []
    inference = results.get("inference") or []
    for T in sorted({r["seq_len"] for r in inference}):
        out += _speed_goals(T, {r["variant"]: r for r in inference if r["seq_len"] == T})
    averaging = results.get("averaging")
    if averaging:
        timing = {r["variant"]: r for r in averaging["timing"]}
        ours = timing["accumulate_attention (ours)"]
        plain = timing["plain eager forward, output_attentions"]
        out.append({"goal": "averaging: accumulate_attention ≤ 1.00x plain eager forward with output_attentions",
                    "value": f"{ours['time_ratio_to_plain']:.3f}x (paired "
                             f"{ratio_with_interval(ours['paired_time_ratio_to_plain'], ours.get('paired_time_ratio_ci95'))})",
                    "met": ours["time_ratio_to_plain"] <= 1.00,
                    "noise": max(relative_spread(ours), relative_spread(plain))})
        corrected = timing.get("accumulate_attention, --mean_corrections")
        if corrected and "paired_time_ratio_to_ours" in corrected:
            ratio = corrected["paired_time_ratio_to_ours"]
            out.append({"goal": "averaging: --mean_corrections ≤ 1.05x accumulate_attention",
                        "value": f"paired {ratio_with_interval(ratio, corrected.get('paired_time_ratio_to_ours_ci95'))}",
                        "met": ratio <= 1.05, "noise": max(relative_spread(ours), relative_spread(corrected))})
        mem = [m for m in averaging["memory"] if m["variant"] == "accumulate_attention (ours)"]
        full = [m for m in mem if m["layers"] == max(x["layers"] for x in mem)]
        if len(full) == 2:
            a, b = full[0]["peak_increase_mb"], full[1]["peak_increase_mb"]
            out.append({"goal": f"averaging peak memory at {full[1]['batches']} batches = at {full[0]['batches']} "
                                f"(±max(10%, 4 MB))",
                        "value": f"{a:.1f} MB vs {b:.1f} MB", "met": _same_memory(a, b), "noise": None})
        half = [m for m in mem if m["layers"] < full[0]["layers"]] if full else []
        if half:
            a, b = half[0]["peak_increase_mb"], full[0]["peak_increase_mb"]
            out.append({"goal": f"averaging peak memory with {full[0]['layers']} layers = with {half[0]['layers']} "
                                f"(±max(10%, 4 MB), float64 sums aside)",
                        "value": f"{b:.1f} MB vs {a:.1f} MB", "met": _same_memory(a, b), "noise": None})
    training = {r["variant"]: r for r in (results.get("training") or {}).get("rows", [])}
    probing = training.get("probing (all constant)")
    if probing and probing.get("percent_of_bound") is not None:
        low, high = (percent_of_bound(r, probing["flop_bound_speedup"]) for r in probing["paired_speed_ratio_ci95"])
        out.append({"goal": "probing step, all heads constant: ≥ 90% of the FLOP bound's gain (paired)",
                    "value": f"{probing['percent_of_bound']:.0f}% ({probing['paired_speed_ratio']:.3f}x; 95% CI "
                             f"{low:.0f}–{high:.0f}%)",
                    "met": probing["percent_of_bound"] >= 90, "noise": relative_spread(probing)})
    sorting, reference = training.get("sorting"), training.get("stock probe, backward through the encoder")
    if sorting and reference:
        ratio = sorting["median_s"] / reference["median_s"]
        out.append({"goal": "ranking step ≤ 1.20x the stock probe's step with backward through the encoder",
                    "value": f"{ratio:.3f}x", "met": ratio <= 1.20,
                    "noise": max(relative_spread(sorting), relative_spread(reference))})
    return out


def markdown_table(headers, rows):
    """A markdown table: a header, the rule, one line per row of cells."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def percent_cell(value):
    return "–" if value is None else f"{value:.0f}%"


def ratio_with_interval(ratio, interval):
    low, high = interval or (None, None)
    return f"{ratio:.3f}x" + ("" if low is None else f" ({low:.3f}–{high:.3f})")


def _paired(row):
    if row["variant"] == "stock":
        return "1.000x"
    return ratio_with_interval(row["paired_speed_ratio"], row.get("paired_speed_ratio_ci95"))


def _time_weighted_note(rows):
    shares = {r["seq_len"]: r["stock_modelled_time_share"] for r in rows
              if r["variant"] == "stock" and r.get("stock_modelled_time_share") is not None}
    if not shares:
        return ""
    return ("Time-weighted bound = 1/(1 − removed FLOP share · s), s = the share of the stock forward's CPU operator "
            "time spent in matrix products and attention kernels (torch.profiler; "
            + ", ".join(f"T={T}: s = {s:.2f}" for T, s in shares.items())
            + "): the rest (activations, norms, copies) is not removed by constant heads.")


def _mixing_note(rows):
    """One line: the paired time ratio of ½ constant with every layer mixed against whole layers constant."""
    parts = [f"T={r['seq_len']}: {r['mixing_time_ratio']:.3f}x (95% CI {r['mixing_time_ratio_ci95'][0]:.3f}–"
             f"{r['mixing_time_ratio_ci95'][1]:.3f})" for r in rows if "mixing_time_ratio" in r]
    if not parts:
        return []
    return ["", "Cost of mixing dynamic and constant heads in a layer: time of 1/2 constant with every other head "
                "(every layer mixed) over 1/2 constant layer by layer (no layer mixed), paired: " + "; ".join(parts) + "."]


def _inference_section(rows, s):
    table = markdown_table(
        ["T", "variant", "constant heads", "median ms", "IQR ms", "speed vs stock", "paired (95% CI)", "FLOP bound",
         "% of bound", "time-weighted bound", "% of it"],
        [[r["seq_len"], r["variant"], f"{r['constant_heads']}/{r['total_heads']}", f"{1e3 * r['median_s']:.1f}",
          f"{1e3 * (r['p75_s'] - r['p25_s']):.1f}", f"{r['speed_ratio_to_stock']:.3f}x", _paired(r),
          f"{r['flop_bound_speedup']:.3f}x", percent_cell(r["percent_of_bound"]),
          "–" if r.get("time_weighted_bound") is None else f"{r['time_weighted_bound']:.3f}x",
          percent_cell(r.get("percent_of_time_weighted_bound"))] for r in rows])
    processes = rows[0].get("processes", 1) if rows else 1
    rounds = f"{s['repeats']} rounds" + (f" in each of {processes} fresh processes, pooled" if processes > 1 else "")
    interval = ("a distribution-free 95% confidence interval of that median (binomial order statistics)"
                if processes == 1 else
                "a 95% interval of that median from a two-stage bootstrap (processes drawn with replacement, then "
                "their rounds), since rounds of one process share its state")
    padded = "each row" if s.get("padded_rows", "all") == "all" else f"{s['padded_rows']} row"
    return ([f"## Inference (batch {s['batch_size']}, last quarter of {padded} padded, no attentions, "
             f"inference_mode; {rounds})", ""] + table
            + ["", f"stock = the stock model with {s.get('stock_attention', 'sdpa')} attention. Constant heads: "
                   f"{s.get('inference_head_choice', '')}. speed vs stock = stock median / variant median; paired = "
                   "median over rounds of the mean time of the stock runs just before and after the variant / the variant's "
                   "time (each round runs stock, v1, stock, v2, …, stock), with " + interval + ". FLOP model: "
                   + FLOP_NOTE + " " + _time_weighted_note(rows)] + _mixing_note(rows))


def _averaging_section(a, s):
    timing = markdown_table(["variant", "median ms per batch", "IQR ms", "time vs plain forward", "paired (95% CI)"],
                    [[r["variant"], f"{1e3 * r['median_s']:.1f}", f"{1e3 * (r['p75_s'] - r['p25_s']):.1f}",
                      f"{r['time_ratio_to_plain']:.3f}x", ratio_with_interval(r["paired_time_ratio_to_plain"],
                                                                               r.get("paired_time_ratio_ci95"))]
                     for r in a["timing"]])
    memory = markdown_table(["variant", "batches", "layers", "peak memory increase MB"],
                    [[r["variant"], r["batches"], r.get("layers", "–"), f"{r['peak_increase_mb']:.1f}"]
                     for r in a["memory"]])
    threshold = a["memory"][0].get("malloc_mmap_threshold")
    return ([f"## Averaging pass (batches of {a['batch_size']}, T={a['seq_len']}, eager attention; {s['avg_repeats']} "
             f"passes over {a['batches']} batches, timed batch by batch, every variant on the same batch in turn)", ""]
            + timing + ["", "paired = median over batches of the variant's time / the plain forward's time on the same "
                        "batch in the same round, with its distribution-free 95% confidence interval.", ""] + memory
            + ["", "Memory: " + a["memory"][0]["memory_kind"] + " (each row a fresh child process; model "
               "weights loaded and touched before the baseline"
               + (f"; mallopt M_MMAP_THRESHOLD={threshold}" if threshold else "") + ")."])


def _training_section(t, s):
    def bound(r):
        if "flop_bound_speedup" not in r:
            return "", "", "", ""
        weighted = r.get("time_weighted_bound")
        return (f"{r['flop_bound_speedup']:.3f}x", percent_cell(r["percent_of_bound"]),
                "–" if weighted is None else f"{weighted:.3f}x", percent_cell(r.get("percent_of_time_weighted_bound")))

    shares = {r["stock_modelled_time_share"] for r in t["rows"] if r.get("stock_modelled_time_share") is not None}
    weighted_note = ("" if not shares else
                     f" Time-weighted bound = 1/(1 − removed FLOP share · s), s = {shares.pop():.2f}, the share of the "
                     "stock probing step's CPU operator time in matrix products (torch.profiler): its dropout masks' "
                     "Bernoulli draws, activations and norms are not removed by constant heads.")
    table = markdown_table(["mode", "set_trainable", "trainable params", "median ms/step", "IQR ms",
                            "speed vs stock probing, paired (95% CI)", "FLOP bound", "% of bound",
                            "time-weighted bound", "% of it", "peak memory increase MB"],
                   [[r["variant"], r["mode"], f"{r['trainable_parameters']:,}", f"{1e3 * r['median_s']:.1f}",
                     f"{1e3 * (r['p75_s'] - r['p25_s']):.1f}",
                     _paired(r) if "paired_speed_ratio" in r else "1 (reference)", *bound(r),
                     f"{r['peak_increase_mb']:.1f}"] for r in t["rows"]])
    return ([f"## One training step (forward + backward + AdamW, batch {t['batch_size']}, T={t['seq_len']}, "
             f"freeze-extract sequence probe, train mode; {s['train_repeats']} repeats)", ""] + table
            + ["", "paired = median over rounds of (the stock probing steps just before and after) / this step, each "
                   "mode run between two stock probing steps; the probing steps' FLOP bound is the forward's (the "
                   "encoder is frozen), constant heads taken layer by layer." + weighted_note + " Memory: peak "
                   "increase over two steps (AdamW state included) in a fresh child process."])


def _goals_section(goal_rows):
    return ["## Goals", ""] + markdown_table(
        ["goal", "measured", "met", "timing noise (±½ IQR)"],
        [[g["goal"], g["value"], "yes" if g["met"] else "NO", "–" if g.get("noise") is None else f"±{100 * g['noise']:.1f}%"]
         for g in goal_rows])


def markdown(results):
    """The report: the machine, then one section per benchmark that ran, then the goals."""
    m, s = results["machine"], results["settings"]
    lines = [f"# PAPA benchmark — {s['model']}", "",
             f"{m['cpu']} ({m['logical_cpus']} logical CPUs, torch threads {m['torch_threads']}), device "
             f"{m['device']}{' ' + m['gpu'] if 'gpu' in m else ''}; torch {m['torch']}, transformers "
             f"{m['transformers']}, Python {m['python']}; {m['date']}; 1-min load average "
             f"{m['load_average_1m']:.2f} at start, {m.get('load_average_1m_end', float('nan')):.2f} at end; "
             f"huge pages: {m.get('huge_pages', 'not recorded')}. "
             f"Command: `{s['command']}`. Medians of interleaved repetitions after warm-up."]
    sections = [("inference", _inference_section), ("averaging", _averaging_section), ("training", _training_section)]
    for key, section in sections:
        if results.get(key):
            lines += [""] + section(results[key], s)
    if results.get("goals"):
        lines += [""] + _goals_section(results["goals"])
    return "\n".join(lines) + "\n"
