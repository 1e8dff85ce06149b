"""Decoding with a key/value cache: SmolLM2 stock against SmolLM2 with `sink_window` constants on every head of
whole K/V groups (papa/families/generation.py). Cache bytes and decoding tokens per second.

    python findings/long_context_generation/generation.py --context 2048 --new_tokens 32 --groups 1,2 --rounds 5 \
        --threads 1 --out findings/long_context_generation/generation.md

A prompt of context − new_tokens tokens (SST-2 training sentences, concatenated) is prefilled once per model; each
round then decodes new_tokens greedy tokens, one forward per token, from a copy of that prefilled cache, so the
last step attends over `context` positions. Rounds alternate which model goes first. Reported: the cache's bytes
after the last step (papa.families.generation.cache_bytes: K and V in the transformers cache layers, plus the
constant heads' side state), each round's decoding tokens/s (decoding only, prefill excluded) and the per-round
ratio patched / stock, with medians. The constants' quality is not measured here: sink_window is a baseline.
"""

import argparse
import copy
import os
import statistics
import time

import torch


def prompt_ids(tokenizer, length, data):
    """`length` token ids of SST-2 training sentences joined by spaces."""
    with open(os.path.join(data, "glue", "SST-2", "train.tsv")) as f:
        sentences = [line.split("\t")[0] for line in f.read().splitlines()[1:]]
    ids, at = [], 0
    while len(ids) < length:
        ids += tokenizer(" ".join(sentences[at:at + 200]), add_special_tokens=False)["input_ids"]
        at += 200
    return torch.tensor([ids[:length]])


def prefill(model, ids):
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        logits = model(input_ids=ids, cache=cache, use_cache=True).logits[:, -1]
    return cache, logits.argmax(-1, keepdim=True)


def decode(model, cache, token, steps):
    """Seconds for `steps` greedy single-token forwards over `cache` (changed in place)."""
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(steps):
            logits = model(input_ids=token, cache=cache, use_cache=True).logits[:, -1]
            token = logits.argmax(-1, keepdim=True)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--context", type=int, default=2048, help="positions attended at the last decoding step")
    parser.add_argument("--new_tokens", type=int, default=32, help="tokens decoded per round")
    parser.add_argument("--groups", default="1,2", help="K/V groups (comma-separated) whose every head gets sink_window "
                        "constants, in every layer")
    parser.add_argument("--sinks", type=int, default=4, help="sink_window's s: first positions kept")
    parser.add_argument("--window", type=int, default=64, help="sink_window's w: recent distances kept")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved decoding rounds per model")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (on the shared 2-core machine one "
                        "thread decoded 3x faster than two)")
    parser.add_argument("--data", default="../shared/data", help="folder holding glue/SST-2/train.tsv")
    parser.add_argument("--out", default=None, help="write the report (markdown) here; else print it")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from papa.families.generation import cache_bytes
    from papa.io import save_text
    from papa.method.attention import patch_model
    from papa.method.structured_averaging import sink_window
    from papa.models.bundled import local_model_path

    path = local_model_path("smollm2")
    stock = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    config = stock.config
    L, H, G = config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads
    groups = [int(g) for g in args.groups.split(",")]
    heads = [h for h in range(H) if h // (H // G) in groups]
    patched = patch_model(copy.deepcopy(stock), static_heads={layer: heads for layer in range(L)},
                          structured=sink_window(L, H, args.sinks, args.window)).eval()
    ids = prompt_ids(AutoTokenizer.from_pretrained(path), args.context - args.new_tokens, args.data)

    models = {"stock": stock, "patched": patched}
    prefilled = {name: prefill(model, ids) for name, model in models.items()}
    seconds = {name: [] for name in models}
    final = {}
    for r in range(args.rounds):
        for name in (["stock", "patched"] if r % 2 == 0 else ["patched", "stock"]):
            cache, token = copy.deepcopy(prefilled[name][0]), prefilled[name][1]
            seconds[name].append(decode(models[name], cache, token, args.new_tokens))
            final[name] = cache
    rate = {name: [args.new_tokens / s for s in secs] for name, secs in seconds.items()}
    ratios = [p / s for p, s in zip(rate["patched"], rate["stock"])]
    total = {name: sum(sum(layer.values()) for layer in cache_bytes(cache)) for name, cache in final.items()}
    per_layer = {name: cache_bytes(cache)[0] for name, cache in final.items()}

    load = os.getloadavg()
    lines = [
        f"# Decoding with a key/value cache: SmolLM2-135M, stock vs sink_window on K/V groups {groups}",
        "",
        f"`python findings/long_context_generation/generation.py --context {args.context} "
        f"--new_tokens {args.new_tokens} "
        f"--groups {args.groups} --sinks {args.sinks} --window {args.window} --rounds {args.rounds} "
        f"--threads {args.threads}`",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; float32, batch 1, CPU "
        f"({os.cpu_count()} cores, torch threads {torch.get_num_threads()}), shared with other work: load average "
        f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at the end. Times are noisy; the ratios of interleaved "
        "rounds are the measure.",
        "",
        f"Patched: heads {heads} of every layer ({len(heads) * L} of {H * L} heads, {len(groups)} of {G} K/V groups) "
        f"hold sink_window constants (s = {args.sinks}, w = {args.window}); the prompt is {ids.shape[1]} tokens, "
        f"then {args.new_tokens} decoded, the last step attending over {args.context} positions.",
        "",
        "| | stock | patched | patched / stock |",
        "|---|---|---|---|",
        f"| cache bytes, all layers, after the last step | {total['stock']:,} | {total['patched']:,} | "
        f"{total['patched'] / total['stock']:.3f} |",
        f"| layer 0: K bytes | {per_layer['stock']['keys']:,} | {per_layer['patched']['keys']:,} | |",
        f"| layer 0: V bytes (cache layer + constant heads' side state) | {per_layer['stock']['values']:,} | "
        f"{per_layer['patched']['values']:,} + {per_layer['patched']['constant_values']:,} | |",
        f"| layer 0: padding validity kept | 0 | {per_layer['patched']['validity']:,} | |",
        f"| decoding tokens/s, median of {args.rounds} rounds | {statistics.median(rate['stock']):.1f} | "
        f"{statistics.median(rate['patched']):.1f} | {statistics.median(ratios):.3f} (per-round ratio, median) |",
        "",
        "Per round (tokens/s, stock / patched): "
        + ", ".join(f"{s:.1f} / {p:.1f}" for s, p in zip(rate["stock"], rate["patched"])) + ".",
        "",
        f"Per-round ratios patched / stock: {', '.join(f'{r:.3f}' for r in ratios)}; range {min(ratios):.3f}–"
        f"{max(ratios):.3f}, {sum(r > 1 for r in ratios)} of {len(ratios)} rounds faster than stock.",
        "",
    ]
    report = "\n".join(lines)
    if args.out:
        save_text(report, args.out)
    print(report)


if __name__ == "__main__":
    main()
