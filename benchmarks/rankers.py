"""What each ranker costs on SmolLM2-135M (T = 128, lm_qnli's training blocks), in one process, interleaved.

    HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 python benchmarks/rankers.py --data_dir ../shared/data \
        --blocks 128 --loo_blocks 2 --rounds 3 --out benchmarks/results/smollm2_rankers_cpu.md

Timed per round, in a rotating order, on the same model and blocks:
  lambda        the λ ranking run's work: one epoch of AdamW steps on λ (batch 8, forward and backward of the
                mix-mode model) over --blocks blocks; the Trainer's own overhead is left out, which favours λ
  taylor        papa.method.rankers.taylor_scores over the same blocks (batch 8)
  loo_reuse     loo_scores on the first --loo_blocks blocks, the blocks below each layer replayed (PrefixCache)
  loo_full      the same without the prefix cache (every replacement runs the whole model)
Ratios are per round (the two loo variants on the same blocks; taylor against lambda on the same blocks), then
medians; the spread is the range over rounds. Writes the table to --out (markdown, raw rounds in it).

    HF_HUB_OFFLINE=1 python benchmarks/rankers.py --memory 2048 4096 8192 --out benchmarks/results/smollm2_rankers_cpu.md

--memory: the peak memory of one gates ranking step (papa.method.scorers.train_gates, the task loss on a pass-key
example of T tokens, batch 1, 90 K/V groups, Toeplitz-shaped structured constants reaching every distance) at each
T, each in a fresh process (ru_maxrss), with the blocks recomputed in the backward pass (the default from
papa.method.gates.RECOMPUTE_FROM tokens on) and without (every activation kept, as before), against the model's
weights, with the step's seconds. Each part writes its own section of --out and keeps the other's.
"""

import argparse
import json
import os
import resource
import subprocess
import platform
import statistics
import sys
import time

import torch


def ranking_blocks(args, tokenizer):
    from papa.data.lm import lm_blocks, load_lm_texts
    from papa.data.tasks import get_task

    texts = load_lm_texts(get_task("lm_qnli"), ["train"], data_dir=os.path.join(args.data_dir, "glue", "QNLI"))
    return torch.tensor(lm_blocks(texts, tokenizer, 128, {"train": args.blocks})["train"]["input_ids"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", default="../shared/data", help="Folder holding glue/QNLI/dev.tsv.")
    parser.add_argument("--blocks", type=int, default=128, help="Blocks of 128 tokens for lambda and taylor.")
    parser.add_argument("--loo_blocks", type=int, default=2, help="Blocks for the two loo variants.")
    parser.add_argument("--rounds", type=int, default=3, help="Interleaved rounds.")
    parser.add_argument("--out", required=True, help="Markdown file to write (its other part's section is kept).")
    parser.add_argument("--memory", type=int, nargs="+", metavar="T",
                        help="Instead of the timing: the peak memory of a gates step at these lengths.")
    parser.add_argument("--memory_child", type=int, nargs=2, metavar=("T", "RECOMPUTE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        return memory_child(*args.memory_child)
    if args.memory:
        return write_section(args.out, memory_section(args.memory))

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from papa.method.attention import patch_model
    from papa.method.rankers import Objective, loo_scores, make_units, taylor_scores
    from papa.models.bundled import local_model_path

    path = local_model_path("smollm2")
    tokenizer = AutoTokenizer.from_pretrained(path)
    blocks = ranking_blocks(args, tokenizer)
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa").eval()
    config = model.config
    L, H = config.num_hidden_layers, config.num_attention_heads
    # constants: a causal uniform average per head is enough for timing (the work does not depend on the values)
    constants = torch.tril(torch.ones(128, 128)).expand(L, H, 128, 128)
    patch_model(model, constants, mix_all_heads=True)
    for p in model.parameters():
        p.requires_grad_(False)
    units = make_units(L, H)

    def batches(ids, size):
        return [{"input_ids": ids[i:i + size], "labels": ids[i:i + size]} for i in range(0, len(ids), size)]

    def run_lambda():
        lambdas = [m.lambdas for m in (mod for mod in model.modules() if getattr(mod, "lambdas", None) is not None)]
        for p in lambdas:
            p.requires_grad_(True)
        optimizer = torch.optim.AdamW(lambdas, lr=1e-3)
        for batch in batches(blocks, 8):
            loss = model(**batch).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        for p in lambdas:
            p.requires_grad_(False)

    def run_taylor():
        taylor_scores(Objective(model, batches(blocks, 8), "lm"), units)

    def run_loo(reuse):
        loo_scores(Objective(model, batches(blocks[:args.loo_blocks], 8), "lm"), units, reuse_prefix=reuse)

    variants = {"lambda": run_lambda, "taylor": run_taylor, "loo_reuse": lambda: run_loo(True),
                "loo_full": lambda: run_loo(False)}
    times = {name: [] for name in variants}
    names = list(variants)
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            start = time.perf_counter()
            variants[name]()
            times[name].append(time.perf_counter() - start)
            print(f"round {r + 1}: {name} {times[name][-1]:.1f} s", flush=True)

    def ratio(a, b):
        per_round = [x / y for x, y in zip(times[a], times[b])]
        return statistics.median(per_round), min(per_round), max(per_round)

    load = os.getloadavg()
    lines = [TIME_SECTION, "",
             f"`python benchmarks/rankers.py --blocks {args.blocks} --loo_blocks {args.loo_blocks} --rounds "
             f"{args.rounds}`; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} logical CPUs, torch {torch.__version__}, {torch.get_num_threads()} threads, "
             f"Python {sys.version.split()[0]}; load average at the end {load[0]:.2f}.", "",
             "| variant | data | median s | rounds (s) |", "| --- | --- | ---: | --- |"]
    data = {"lambda": f"{args.blocks} blocks", "taylor": f"{args.blocks} blocks",
            "loo_reuse": f"{args.loo_blocks} blocks", "loo_full": f"{args.loo_blocks} blocks"}
    for name in names:
        lines.append(f"| {name} | {data[name]} | {statistics.median(times[name]):.1f} | "
                     + ", ".join(f"{t:.1f}" for t in times[name]) + " |")
    t_med, t_lo, t_hi = ratio("taylor", "lambda")
    l_med, l_lo, l_hi = ratio("loo_full", "loo_reuse")
    lines += ["", f"- taylor / lambda, same blocks: **{t_med:.2f}x** (rounds {t_lo:.2f}–{t_hi:.2f}; goal ≤ 1x).",
              f"- loo without the prefix cache / with it, same blocks: **{l_med:.2f}x faster with it** (rounds "
              f"{l_lo:.2f}–{l_hi:.2f}; goal ≥ 1.7x).",
              f"- loo with the cache per block: {statistics.median(times['loo_reuse']) / args.loo_blocks:.0f} s "
              f"(270 heads, one block of 128 tokens).", ""]
    write_section(args.out, lines)


TITLE = "# Rankers' cost on SmolLM2-135M (CPU)"
TIME_SECTION = "## Time at T = 128"
MEMORY_SECTION = "## Peak memory of a gates step at long T"


def write_section(path, lines):
    """Write `lines` (a section: its heading first) into the markdown file at `path`, in place of the section of the
    same heading, keeping the other's."""
    sections = {}
    if os.path.exists(path):
        text = open(path, encoding="utf-8").read()
        for part in text.split("\n## ")[1:]:
            sections["## " + part.split("\n", 1)[0]] = "## " + part.rstrip("\n")
    sections[lines[0]] = "\n".join(lines).rstrip("\n")
    body = [sections[h] for h in (TIME_SECTION, MEMORY_SECTION) if h in sections]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n\n".join([TITLE, *body]) + "\n")
    print("\n".join(lines))


def memory_child(seq_len, recompute):
    """One gates step at `seq_len` in this (fresh) process: prints {"weights", "peak", "seconds"} as JSON (bytes)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from papa.data.retrieval import as_columns, make_examples
    from papa.method.attention import patch_model
    from papa.method.scorers import Objective, make_units, train_gates
    from papa.models.bundled import local_model_path

    path = local_model_path("smollm2")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa").eval()
    config = model.config
    L, H = config.num_hidden_layers, config.num_attention_heads
    # Toeplitz's shape (a sink and a profile reaching every distance): the work does not depend on the values
    patch_model(model, structured=(torch.ones(L, H, 1), torch.ones(L, H, seq_len)), mix_all_heads=True)
    columns = as_columns(make_examples("passkey", tokenizer, seq_len, 1, "train"))
    batch = {k: torch.tensor(columns[k]) for k in ("input_ids", "attention_mask", "labels")}
    objective = Objective(model, [batch], "lm", scored_only=True, recompute=bool(recompute))
    units = make_units(L, H, config.num_key_value_heads)
    start = time.perf_counter()
    train_gates(objective, units, steps=1)
    seconds = time.perf_counter() - start
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    print(json.dumps({"weights": weights, "peak": peak, "seconds": seconds}))


def memory_section(lengths):
    """The memory part's section: each length with and without recomputation, a fresh process each."""
    rows = []
    for seq_len in lengths:
        for recompute in (0, 1):
            out = subprocess.run([sys.executable, __file__, "--out", os.devnull, "--memory_child", str(seq_len),
                                  str(recompute)], capture_output=True, text=True)
            if out.returncode:
                rows.append((seq_len, recompute, None))
                print(f"T = {seq_len}, recompute {recompute}: failed\n{out.stderr[-2000:]}", flush=True)
                continue
            rows.append((seq_len, recompute, json.loads(out.stdout.strip().splitlines()[-1])))
            print(f"T = {seq_len}, recompute {recompute}: {rows[-1][2]}", flush=True)
    load = os.getloadavg()
    gb = 1e9
    lines = [MEMORY_SECTION, "",
             f"`python benchmarks/rankers.py --memory {' '.join(map(str, lengths))}`; "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} logical CPUs, torch {torch.__version__}, Python {sys.version.split()[0]}; load "
             f"average at the end {load[0]:.2f}. One gates step (forward and backward, task loss on the pass key's "
             "answer), batch 1, fp32, 90 K/V groups, Toeplitz-shaped structured constants; a fresh process each; "
             "peak RSS in GB (10⁹ bytes).", "",
             "| T | blocks recomputed | weights | peak RSS | peak − weights | step s |", "| ---: | --- | ---: | ---: | ---: | ---: |"]
    for seq_len, recompute, r in rows:
        if r is None:
            lines.append(f"| {seq_len} | {'yes' if recompute else 'no'} | – | failed | – | – |")
            continue
        lines.append(f"| {seq_len} | {'yes' if recompute else 'no'} | {r['weights'] / gb:.2f} | {r['peak'] / gb:.2f} | "
                     f"{(r['peak'] - r['weights']) / gb:.2f} | {r['seconds']:.1f} |")
    lines += ["", "Goal (issue 74): peak ≤ weights + 4 GB at T = 8 192 (with the blocks recomputed).", ""]
    return lines


if __name__ == "__main__":
    main()
