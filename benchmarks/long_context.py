"""Long contexts on SmolLM2-135M, batch 1: peak RSS and wall time of each step, one fresh process per measurement.

    HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 python benchmarks/long_context.py --seq_len 2048 \
        --work /tmp/papa_long --out benchmarks/results/smollm2_long_context_cpu

Steps, each a command run under /usr/bin/time (its maximum resident set size, the peak RSS of that process):
  forward_sdpa, forward_eager_attentions  one forward of one block of random token ids, the stock model loaded
                                          with sdpa, or eager returning every layer's attentions
  averaging   papa-glue-avgs on --avg_blocks blocks of QNLI's sentences (lm_qnli)
  ranking     papa-glue --sort_calculating (the λ run) on --rank_blocks blocks, one evaluated
  eval_stock, eval_half  papa-glue --do_eval on --eval_blocks blocks: the stock (sdpa) model, and half the heads
                         (the first 135 ranked) constant
  sweep_lm    the whole sweep (run_papa_sweep.py: averaging, ranking, k = 0, 135, 270) on lm_qnli, --sweep_samples
              training blocks, one evaluated; its peak RSS is its largest stage's: the stages are forks of the
              sweep's fork server, which outlives the sweep, so the sweep runs under `reaping` (below), which
              adopts and waits for it
  sweep_probe the same on SST-2 with the model's own classifier as the probe (--probe model_head), sentences
              padded to T
  averaging_toeplitz  the same averaging with --constants toeplitz (structured_constants.pt: a sink and a
              profile over distances per head, no T x T tensor)
  timing      stock, half constant (constants held as strips of their lower triangles), half constant held as
              full matrices (the plain product), and half Toeplitz-constant (the FFT product): forwards
              interleaved (stock, a, stock, b, ...) for --rounds rounds, in one process; medians, IQRs, and the
              paired ratios. Half = the first 135 heads of --sorted_heads (default: the ranking step's)
Writes <out>.md: the table, every timed forward, the commands, the machine.
"""

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = "smollm2"


def timed(command, env=None):
    """(peak RSS in GB (10⁹ bytes, as the file sizes), wall seconds, the command's stdout+stderr tail) of `command` under /usr/bin/time."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as record:
        done = subprocess.run(["/usr/bin/time", "-f", "%M %e", "-o", record.name, *command], cwd=ROOT, env=env,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"failed ({done.returncode}): {shlex.join(command)}\n{done.stdout[-3000:]}"
                             f"{done.stderr[-3000:]}")
        kib, seconds = record.read().split()[-2:]
    return int(kib) * 1024 / 1e9, float(seconds), (done.stdout + done.stderr)[-600:]


def folder_gb(path, prefix=""):
    return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path) if n.startswith(prefix)) / 1e9


def steps(args):
    T, work = str(args.seq_len), args.work
    data = ["--model_name_or_path", MODEL, "--task_name", "lm_qnli", "--data_dir", args.data_dir]
    avgs, sort, toeplitz = os.path.join(work, "avgs"), os.path.join(work, "sort"), os.path.join(work, "toeplitz")
    run = ["--max_seq_length", T, "--per_device_train_batch_size", "1", "--per_device_eval_batch_size", "1",
           "--save_strategy", "no", "--save_total_limit", "0", "--overwrite_output_dir", "--report_to", "none"]
    me = [sys.executable, os.path.abspath(__file__), "--seq_len", T]
    sweep = [*me, "--reaping", sys.executable, os.path.join(ROOT, "papa_scripts", "run_papa_sweep.py"), "--model_name_or_path", MODEL,
             "--data_dir", args.data_dir, "--max_seq_length", T, "--static_heads_nums", "0", "135", "270",
             "--max_train_samples", str(args.sweep_samples), "--per_device_train_batch_size", "1",
             "--num_train_epochs", "1", "--sort_num_train_epochs", "1", "--evaluation_strategy", "no",
             "--extra_args=--per_device_eval_batch_size 1"]
    return {
        "forward_sdpa": [*me, "--child", "forward", "--impl", "sdpa"],
        "forward_eager_attentions": [*me, "--child", "forward", "--impl", "eager"],
        "averaging": ["papa-glue-avgs", *data, "--max_length", T, "--per_device_train_batch_size", "1",
                      "--max_train_samples", str(args.avg_blocks), "--output_dir", avgs],
        "averaging_toeplitz": ["papa-glue-avgs", *data, "--max_length", T, "--per_device_train_batch_size", "1",
                               "--max_train_samples", str(args.avg_blocks), "--constants", "toeplitz",
                               "--output_dir", toeplitz],
        "ranking": ["papa-glue", *data, *run, "--do_train", "--do_eval", "--sort_calculating", "True",
                    "--static_heads_dir", avgs, "--max_train_samples", str(args.rank_blocks), "--max_eval_samples",
                    "1", "--learning_rate", "1e-3", "--num_train_epochs", "1", "--output_dir", sort],
        "eval_stock": ["papa-glue", *data, *run, "--do_eval", "--max_eval_samples", str(args.eval_blocks),
                       "--output_dir", os.path.join(work, "k_0")],
        "eval_half": ["papa-glue", *data, *run, "--do_eval", "--max_eval_samples", str(args.eval_blocks),
                      "--static_heads_dir", avgs, "--sorting_heads_dir", sort, "--static_heads_num", "135",
                      "--output_dir", os.path.join(work, "k_135")],
        "sweep_lm": [*sweep, "--task_name", "lm_qnli", "--max_eval_samples", "1",
                     "--output_dir", os.path.join(work, "sweep_lm")],
        "sweep_probe": [*sweep, "--task_name", "sst2", "--probe", "model_head", "--max_eval_samples",
                        str(args.sweep_samples), "--output_dir", os.path.join(work, "sweep_probe")],
        "timing": [*me, "--child", "timing", "--avgs", avgs, "--toeplitz", toeplitz, "--sort",
                   args.sorted_heads or sort, "--rounds", str(args.rounds), "--timing_out",
                   os.path.join(work, "timing.json")],
    }


# ----------------------------------------------------------------------------- children


def reaping(command):
    """Run `command` as a child subreaper (Linux prctl): descendants it orphans (a fork server) are adopted and
    waited for here, so their peak RSS reaches /usr/bin/time's (the largest of every waited-for descendant)."""
    import ctypes

    PR_SET_CHILD_SUBREAPER = 36
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit("prctl(PR_SET_CHILD_SUBREAPER) failed: this measurement needs Linux")
    status = subprocess.run(command).returncode
    while True:  # the adopted: wait until none is left
        try:
            os.wait()
        except ChildProcessError:
            return status


def load(impl):
    import torch
    from transformers import AutoModelForCausalLM

    from papa.models.bundled import local_model_path

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(local_model_path(MODEL), attn_implementation=impl).eval()


def child_forward(args):
    import torch

    model = load(args.impl)
    ids = torch.randint(0, model.config.vocab_size, (1, args.seq_len))
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=False, output_attentions=args.impl == "eager")
    print(f"logits {tuple(out.logits.shape)}")


def child_timing(args):
    import copy

    import numpy as np
    import torch

    import papa
    from papa.families import block_triangle
    from papa.method.ranking import load_sorted_heads

    stock = load("sdpa")
    heads = load_sorted_heads(args.sort, stock.config.num_hidden_layers, stock.config.num_attention_heads)[:135]
    half = papa.patch_model(copy.deepcopy(stock), args.avgs, static_heads=heads)
    block_triangle.BLOCK = args.seq_len  # one strip: the full matrices and the plain product
    flat = papa.patch_model(copy.deepcopy(stock), args.avgs, static_heads=heads)
    variants = {"half constant": half, "half constant, full matrices": flat}
    if os.path.isdir(args.toeplitz):  # the FFT product from T = 1 024 on (papa/families/structured.py)
        variants["half Toeplitz-constant"] = papa.patch_model(copy.deepcopy(stock), structured=args.toeplitz,
                                                              static_heads=heads)
    ids = torch.randint(0, stock.config.vocab_size, (1, args.seq_len))

    def seconds(model):
        start = time.perf_counter()
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
        return time.perf_counter() - start

    for model in (stock, *variants.values()):
        seconds(model)  # warm-up
    times = {"stock": [], **{name: [] for name in variants}}
    ratios = {name: [] for name in variants}
    for _ in range(args.rounds):  # stock, a, stock, b, stock: each variant against the mean of its two neighbours
        before = seconds(stock)
        times["stock"].append(before)
        for name, model in variants.items():
            t, after = seconds(model), seconds(stock)
            times[name].append(t)
            times["stock"].append(after)
            ratios[name].append((before + after) / 2 / t)
            before = after
    summary = {name: {"median_s": float(np.median(v)), "iqr_s": float(np.subtract(*np.percentile(v, [75, 25])))}
               for name, v in times.items()}
    for name, r in ratios.items():
        summary[name]["speedup_vs_stock_median"] = float(np.median(r))
        summary[name]["speedup_vs_stock_range"] = [float(min(r)), float(max(r))]
    with open(args.timing_out, "w") as f:
        json.dump({"times": times, "ratios": ratios, "summary": summary}, f)


# ----------------------------------------------------------------------------- the report


def machine():
    model = next((line.split(":", 1)[1].strip() for line in subprocess.run(["lscpu"], capture_output=True,
                  text=True).stdout.splitlines() if line.startswith("Model name")), platform.processor())
    import torch
    import transformers

    return {"cpu": model, "logical_cpus": os.cpu_count(), "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version(),
            "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "load_average": os.getloadavg()}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "--reaping" in argv:  # --seq_len T --reaping <command...>
        raise SystemExit(reaping(argv[argv.index("--reaping") + 1:]))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seq_len", type=int, default=2048)
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "papa_long_context"))
    parser.add_argument("--out", default=None, help="write <out>.md; none: print only")
    parser.add_argument("--data_dir", default=os.path.join(ROOT, "..", "shared", "data"))
    parser.add_argument("--avg_blocks", type=int, default=3)
    parser.add_argument("--rank_blocks", type=int, default=2)
    parser.add_argument("--eval_blocks", type=int, default=2)
    parser.add_argument("--sweep_samples", type=int, default=2, help="training blocks / examples of each sweep")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--sorted_heads", default=None,
                        help="timing: the ranking whose first 135 heads are constant (default: the ranking step's)")
    parser.add_argument("--only", nargs="*", default=None, help="run these steps only")
    parser.add_argument("--child", choices=["forward", "timing"], help=argparse.SUPPRESS)
    parser.add_argument("--impl", default="sdpa", help=argparse.SUPPRESS)
    parser.add_argument("--avgs", help=argparse.SUPPRESS)
    parser.add_argument("--sort", help=argparse.SUPPRESS)
    parser.add_argument("--toeplitz", default="", help=argparse.SUPPRESS)
    parser.add_argument("--timing_out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return {"forward": child_forward, "timing": child_timing}[args.child](args)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    results = {"machine": machine(), "seq_len": args.seq_len, "steps": {}}
    for name, command in steps(args).items():
        if args.only and name not in args.only:
            continue
        gb, seconds, tail = timed(command, env)
        entry = {"command": shlex.join(command), "peak_rss_gb": round(gb, 3), "wall_s": seconds}
        if name == "averaging":
            entry["avgs_gb"] = round(folder_gb(os.path.join(args.work, "avgs"), "avgs"), 3)
            entry["folder_gb"] = round(folder_gb(os.path.join(args.work, "avgs")), 3)
        if name == "averaging_toeplitz":
            entry["folder_gb"] = round(folder_gb(os.path.join(args.work, "toeplitz")), 6)
        if name == "timing":
            with open(os.path.join(args.work, "timing.json")) as f:
                entry.update(json.load(f))
        results["steps"][name] = entry
        print(f"{name}: peak RSS {gb:.2f} GB, {seconds:.0f} s" + "".join(
            f", {k} {entry[k]} GB" for k in ("avgs_gb", "folder_gb") if k in entry), flush=True)
    if args.out:  # one file: the table, every round's time, the commands, the machine
        with open(args.out + ".md.tmp", "w") as f:
            f.write(report(results, shlex.join([os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]])))
        os.replace(args.out + ".md.tmp", args.out + ".md")
    return results


def report(results, command):
    m, steps_ = results["machine"], results["steps"]
    lines = [f"# SmolLM2-135M at T = {results['seq_len']}, batch 1, CPU: peak RSS and time", "",
             f"`{command}`; {m['cpu']}, {m['logical_cpus']} logical CPUs, torch {m['torch']}, transformers "
             f"{m['transformers']}, Python {m['python']}, fp32; {m['date_utc']} UTC, load average at the start "
             f"{', '.join(f'{x:.1f}' for x in m['load_average'])} (1, 5 and 15 minutes).", "",
             "| step | peak RSS (GB, 10⁹ bytes) | wall (s) | also |", "| --- | ---: | ---: | --- |"]
    for name, entry in steps_.items():
        also = ", ".join(f"{k} {entry[k]} GB" for k in ("avgs_gb", "folder_gb") if k in entry)
        lines.append(f"| {name} | {entry['peak_rss_gb']:.2f} | {entry['wall_s']:.0f} | {also} |")
    timing = steps_.get("timing", {}).get("summary")
    if timing:
        lines += ["", "Forward time (one block, no gradient), interleaved; speed-up = median over rounds of (mean of the "
                  "two stock forwards around it) / (its time):", "",
                  "| model | median (s) | IQR (s) | speed-up vs stock [min, max over rounds] |", "| --- | ---: | ---: | ---: |"]
        for name, row in timing.items():
            ratio = (f"{row['speedup_vs_stock_median']:.2f} [{row['speedup_vs_stock_range'][0]:.2f}, "
                     f"{row['speedup_vs_stock_range'][1]:.2f}]" if "speedup_vs_stock_median" in row else "")
            lines.append(f"| {name} | {row['median_s']:.2f} | {row['iqr_s']:.2f} | {ratio} |")
        lines += ["", "Every forward in order (s): " + "; ".join(
            f"{name} " + ", ".join(f"{t:.2f}" for t in times) for name, times in steps_["timing"]["times"].items())
            + "."]
    lines += ["", "Commands:", ""] + [f"- {name}: `{entry['command']}`" for name, entry in steps_.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
