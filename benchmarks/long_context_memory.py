"""Long contexts within memory: an evaluation at T without its logits, and generation with some K/V groups constant.

    python benchmarks/long_context_memory.py --model smollm2 --context 8192 --new_tokens 32 \
        --sorted_heads SORT_DIR/sorted_heads.json --fractions 0.25 0.5 0.75 --replacement sink_window --rounds 3 \
        --data_dir ../shared/data --out benchmarks/results/long_context_memory_smollm2.md

Evaluation (`--data_dir`): one block of `context` tokens of QNLI's sentences (lm_qnli), a fresh process each,
peak RSS (ru_maxrss) against the model's weights: the stock model's own evaluation (its forward with labels:
(T, V) logits and their loss, what HF's Trainer evaluates and PAPA's evaluation did before papa.families.lm_head),
`papa-glue --do_eval` on it (the LM head in chunks on the scored positions), and `papa-glue --do_eval` on the
pass-key task at that length (the answer's positions alone).

A prompt of `context` tokens (pass-key filler, papa.data.retrieval's example 0 at that length) is prefilled, then
`new_tokens` are decoded greedily, batch 1, float32, by the stock model and by patched models whose first f of the
K/V groups of the ranking (`--sorted_heads`, ranked with --rank_kv_groups; default: a seeded random order of groups)
hold `--replacement` constants. What a constant head keeps in the cache (papa/families/generation.py): no key;
`sink_window` the values of its sink and window (s + w − 1 positions); `toeplitz` the values of its sink and the
last D − 1 positions (D: the length it was averaged at, or `--window` where its profile is cut there, as the
scripts' `--window` does); so a whole group made constant drops its K cache, and its V cache too beyond those
positions. Mean-output heads would keep nothing, but generation with a cache does not run
them (refused: their outputs are per position up to the averaging length).

Peak RSS depends on the allocator as much as on the tensors: glibc's dynamic mmap threshold keeps freed tensors
of up to 32 MB in its heap, and how much of that heap a prefill leaves unused depends on the order and sizes of its
temporaries. The measured fresh processes get glibc's MALLOC_MMAP_THRESHOLD_ = `--malloc_mmap_threshold` in their
environment (default 128 KiB, the threshold papa.benchmark's memory children set with mallopt: freed tensors leave
the RSS at once; an environment variable because some children are papa-glue commands); 0 keeps glibc's dynamic
default, and the report names the setting.

Generation, measured per model:
- KV-cache bytes after the last step (papa.families.generation.cache_bytes: K and V of the transformers cache layers
  plus the constant heads' side state);
- peak RSS of a fresh process that loads the model, prefills and decodes once (ru_maxrss);
- prefill seconds and decoding seconds per token, in `rounds` interleaved rounds in one process (each round runs
  every model, in an order that rotates), reported as medians and as per-round ratios to the stock model's time in
  the same round (median, min–max): the machine's noise is in the spread of those ratios.
"""

import argparse
import copy
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch


def prompt_ids(tokenizer, length):
    """`length` tokens: the pass-key task's first validation example at that length, without its answer."""
    from papa.data.retrieval import make_examples

    example = make_examples("passkey", tokenizer, length + 8, 1, "validation")[0]
    answer = sum(1 for y in example.labels if y != -100)
    return torch.tensor([example.input_ids[:len(example.input_ids) - answer][:length]])


def replaced_heads(config, sorted_heads, fraction, seed=0):
    """{layer: heads}: the first `fraction` of the K/V groups in `sorted_heads` (a group counts once all its query
    heads have come), or of a seeded random order of groups."""
    L, H, G = config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads
    size = H // G
    if sorted_heads is None:
        from papa.sweep.controls import random_order

        rows = random_order(L, H, seed, group=size)
    else:
        rows = json.load(open(sorted_heads))
    wanted, seen, static = round(fraction * L * G), {}, {}
    for layer, head in rows:
        group = (layer, head // size)
        seen[group] = seen.get(group, 0) + 1
        if seen[group] == size and len(static) < wanted:
            static[group] = True
    out = {}
    for layer, group in static:
        out.setdefault(layer, []).extend(range(group * size, (group + 1) * size))
    return out


def build(name, args, fraction):
    from transformers import AutoModelForCausalLM

    from papa.method.attention import patch_model
    from papa.method.structured_averaging import STRUCTURED_NAME, read_structured, sink_window
    from papa.models.bundled import local_model_path
    from papa.runs.structured_constants import DEFAULT_WINDOW, within_reach

    model = AutoModelForCausalLM.from_pretrained(local_model_path(name), dtype=torch.float32).eval()
    if fraction == 0:
        return model
    config = model.config
    static = replaced_heads(config, args.sorted_heads, fraction)
    if args.replacement == "sink_window":
        structured = sink_window(config.num_hidden_layers, config.num_attention_heads, args.sinks,
                                 args.window or DEFAULT_WINDOW)
    else:
        record = read_structured(os.path.join(args.constants, STRUCTURED_NAME))
        structured = (record["sink"], within_reach(record["profile"], args.window))
    return patch_model(model, static_heads=static, structured=structured).eval()


def prefill(model, ids):
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    start = time.perf_counter()
    with torch.no_grad():
        # the last position's logits only, as generate asks for them: a prompt's (T, V) logits are no cache
        logits = model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1).logits[:, -1]
    return cache, logits.argmax(-1, keepdim=True), time.perf_counter() - start


def decode(model, cache, token, steps):
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(steps):
            token = model(input_ids=token, cache=cache, use_cache=True).logits[:, -1].argmax(-1, keepdim=True)
    return (time.perf_counter() - start) / steps


def cache_total(cache):
    from papa.families.generation import cache_bytes

    return sum(sum(layer.values()) for layer in cache_bytes(cache))


def weights_bytes(name):
    """The float32 model's parameter bytes (each tied tensor once)."""
    from transformers import AutoModelForCausalLM

    from papa.models.bundled import local_model_path

    model = AutoModelForCausalLM.from_pretrained(local_model_path(name), dtype=torch.float32)
    return sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())


def stock_evaluation(args):
    """The child: the stock model's own evaluation of one lm_qnli block of `context` tokens (forward with labels)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from papa.data.lm import glue_sentences
    from papa.data.tasks import get_task
    from papa.models.bundled import local_model_path

    path = local_model_path(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    text = "".join(glue_sentences(get_task("lm_qnli"), args.data_dir)["validation"])
    ids = torch.tensor([tokenizer(text)["input_ids"][:args.context]])
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        loss = float(model(input_ids=ids, labels=ids).loss)
    print(json.dumps({"loss": loss, "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))


def child_environment(args):
    """A measured child's environment: its torch threads, and glibc's mmap threshold unless --malloc_mmap_threshold 0."""
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    if args.malloc_mmap_threshold > 0:
        env["MALLOC_MMAP_THRESHOLD_"] = str(args.malloc_mmap_threshold)
    return env


def peak_of(argv, args):
    """(peak RSS in bytes, the command's output) of `argv` run under /usr/bin/time."""
    import tempfile

    with tempfile.NamedTemporaryFile("r", suffix=".time") as record:
        done = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", record.name, *argv], capture_output=True, text=True,
                              env=child_environment(args))
        if done.returncode != 0:
            raise SystemExit(f"failed: {' '.join(map(str, argv))}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        return int(record.read().split()[-1]) * 1024, done.stdout


def evaluation_rows(args, work):
    """[(what, peak RSS bytes)] of the three evaluations of the module docstring."""
    rows = []
    if not args.no_stock_evaluation:  # Gemma-3 at 8 192: its (T, V) logits and their log-softmax alone are 17 GB
        stock, _ = peak_of([sys.executable, __file__, *sys.argv[1:], "--child_stock_evaluation"], args)
        rows.append(("the stock model's own evaluation (forward with labels)", stock))
    common = ["papa-glue", "--model_name_or_path", args.model, "--do_eval", "--max_seq_length", str(args.context),
              "--max_eval_samples", "1", "--per_device_eval_batch_size", "1", "--report_to", "none"]
    lm, _ = peak_of([*common, "--task_name", "lm_qnli", "--data_dir", args.data_dir,
                     "--output_dir", os.path.join(work, "lm_qnli")], args)
    passkey, _ = peak_of([*common, "--task_name", "passkey", "--output_dir", os.path.join(work, "passkey")], args)
    return rows + [("papa-glue --do_eval, lm_qnli (every position scored, the LM head in chunks)", lm),
                   ("papa-glue --do_eval, passkey (the answer's positions)", passkey)]


def one_process(args, fraction):
    """The child: one model, one prefill and decode; prints its cache bytes and peak RSS as JSON."""
    from transformers import AutoTokenizer

    from papa.models.bundled import local_model_path

    model = build(args.model, args, fraction)
    ids = prompt_ids(AutoTokenizer.from_pretrained(local_model_path(args.model)), args.context)
    cache, token, _ = prefill(model, ids)
    decode(model, cache, token, args.new_tokens)
    print(json.dumps({"cache_bytes": cache_total(cache),
                      "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))


def child_memory(args, fraction):
    argv = [sys.executable, __file__, *sys.argv[1:], "--child_fraction", str(fraction)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env=child_environment(args))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2", help="smollm2 or gemma3 (the bundled decoders), or a folder")
    parser.add_argument("--context", type=int, default=8192, help="prompt tokens")
    parser.add_argument("--new_tokens", type=int, default=32, help="tokens decoded after the prompt")
    parser.add_argument("--sorted_heads", default=None, help="a ranking of K/V groups (sorted_heads.json of a "
                        "--rank_kv_groups run); default: a seeded random order of groups")
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.25, 0.5, 0.75],
                        help="fractions of the K/V groups made constant")
    parser.add_argument("--replacement", choices=("sink_window", "toeplitz"), default="sink_window")
    parser.add_argument("--constants", default=None, help="--replacement toeplitz: structured_constants.pt's folder")
    parser.add_argument("--sinks", type=int, default=4, help="sink_window's s")
    parser.add_argument("--window", type=int, default=None, help="the constants' reach: sink_window's w (default "
                        "64), toeplitz's profile cut to its first D distances (default: the whole profile)")
    parser.add_argument("--malloc_mmap_threshold", type=int, default=131072, help="the measured processes run with glibc's "
                        "MALLOC_MMAP_THRESHOLD_ at this many bytes, so freed tensors leave the RSS at once; 0 keeps "
                        "glibc's dynamic default (whose heap keeps freed tensors up to 32 MB)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds (0: memory only)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--out", default=None, help="write the markdown report here")
    parser.add_argument("--data_dir", default=None, help="the data root holding glue/QNLI (../shared/data): adds the "
                        "evaluation rows")
    parser.add_argument("--no_stock_evaluation", action="store_true", help="leave out the stock model's own "
                        "evaluation (where its logits would not fit this machine)")
    parser.add_argument("--child_fraction", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child_stock_evaluation", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.child_fraction is not None:
        return one_process(args, args.child_fraction)
    if args.child_stock_evaluation:
        return stock_evaluation(args)

    from transformers import AutoTokenizer

    from papa.io import save_text
    from papa.models.bundled import local_model_path
    from papa.runs.structured_constants import DEFAULT_WINDOW

    import tempfile

    weights = weights_bytes(args.model)
    with tempfile.TemporaryDirectory() as work:
        evaluations = evaluation_rows(args, work) if args.data_dir else []
    fractions = [0.0, *args.fractions]
    memory = {f: child_memory(args, f) for f in fractions}  # fresh processes first: their peaks are their own
    models = {f: build(args.model, args, f) for f in fractions} if args.rounds else {0.0: build(args.model, args, 0)}
    ids = prompt_ids(AutoTokenizer.from_pretrained(local_model_path(args.model)), args.context)
    prefill_s = {f: [] for f in fractions}
    decode_s = {f: [] for f in fractions}
    for r in range(args.rounds):
        order = fractions[r % len(fractions):] + fractions[:r % len(fractions)]
        for f in order:
            cache, token, seconds = prefill(models[f], ids)
            prefill_s[f].append(seconds)
            decode_s[f].append(decode(models[f], cache, token, args.new_tokens))
            del cache

    def ratios(times, f):  # stock's time / this model's, per round: > 1 is faster
        return [s / t for s, t in zip(times[0.0], times[f])]

    def spread(values):
        return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})" if values else "–"

    def median_of(values, scale=1.0):
        return f"{scale * statistics.median(values):.2f}" if values else "–"

    config = models[0.0].config
    units = config.num_hidden_layers * config.num_key_value_heads
    load = os.getloadavg()
    lines = [f"# Generation with constant K/V groups: {args.model}, a {args.context}-token prompt", "",
             "`python benchmarks/long_context_memory.py " + " ".join(sys.argv[1:]) + "`", "",
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; float32, batch 1, {args.new_tokens} tokens "
             f"decoded greedily; {os.cpu_count()} cores, torch threads {args.threads}; load average {load[0]:.1f} / "
             f"{load[1]:.1f} / {load[2]:.1f} at the end. Groups made constant: the first of "
             f"{args.sorted_heads or 'a seeded random order of groups'}, with {args.replacement} constants"
             + (f" (s = {args.sinks}, w = {args.window or DEFAULT_WINDOW})" if args.replacement == "sink_window" else
                f" (reach D = {args.window})" if args.window else "") + ". Peak RSS: fresh processes, "
             + (f"glibc's mmap threshold fixed at {args.malloc_mmap_threshold} bytes." if args.malloc_mmap_threshold
                else "glibc's dynamic mmap threshold."), "",
             "| K/V groups constant | KV cache (MB) | × stock | peak RSS (GB) | prefill (s), median | prefill speed-up "
             "vs stock, median (range) | decode (ms/token), median | decode speed-up, median (range) |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for f in fractions:
        cache = memory[f]["cache_bytes"]
        lines.append(f"| {round(f * units)} of {units} | {cache / 1e6:.1f} | {cache / memory[0.0]['cache_bytes']:.3f} | "
                     f"{memory[f]['peak_rss'] / 1e9:.2f} | {median_of(prefill_s[f])} | "
                     f"{'–' if f == 0 else spread(ratios(prefill_s, f))} | {median_of(decode_s[f], 1000)} | "
                     f"{'–' if f == 0 else spread(ratios(decode_s, f))} |")
    lines += ["", f"Speed-ups: stock's time over the patched model's in the same round, {args.rounds} rounds "
                  "(interleaved, the order rotating); peak RSS and cache bytes from a fresh process per row.", ""]
    if evaluations:
        lines += [f"## One evaluation block of {args.context} tokens", "",
                  f"The float32 weights: {weights / 1e9:.2f} GB. Peak RSS of a fresh process each:", "",
                  "| evaluation | peak RSS (GB) | above the weights (GB) |", "| --- | ---: | ---: |"]
        lines += [f"| {what} | {peak / 1e9:.2f} | {(peak - weights) / 1e9:.2f} |" for what, peak in evaluations]
        lines.append("")
    report = "\n".join(lines)
    if args.out:
        save_text(report, args.out)
    print(report)


if __name__ == "__main__":
    main()
