"""PAPA's side: SmolLM2 with constant K/V groups (the first k heads of a ranking of whole groups) on the prompts of
prompts.py, and the stock model, each prefilling the context with its cache and decoding greedily after the question.

    python findings/kvpress_side_by_side/papa_side.py --prompts OUT/prompts.jsonl \
        --sorted_heads findings/long_context_retrieval/smollm2_t2048/sort_gates/sorted_heads.json \
        --toeplitz findings/long_context_reach/t2048/toeplitz --ks 66 135 204 --window 64 --out OUT/papa.jsonl

Methods: stock; toeplitz (the Toeplitz constants cut to a reach of --window, the configuration of
findings/long_context_reach); sink_window (4 sinks and a window of --window). One row per prompt and method, the
methods interleaved within each prompt: keys found, the cache's bytes after the question (papa.families.generation
.cache_bytes: the dynamic groups' K and V, the constant groups' kept values), prefill seconds, decode seconds per
token, and how far the resident memory grew during the prompt (measure.PeakRss).
"""

import argparse
import copy
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure import PeakRss, greedy, prefill, warm_up  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", required=True, help="prompts.py's JSON lines.")
    parser.add_argument("--sorted_heads", required=True, help="A ranking of K/V groups (sorted_heads.json).")
    parser.add_argument("--toeplitz", required=True, help="The folder of the Toeplitz structured_constants.pt.")
    parser.add_argument("--ks", type=int, nargs="+", default=[66, 135, 204], help="Constant heads (whole groups).")
    parser.add_argument("--window", type=int, default=64, help="The constants' reach D (both kinds).")
    parser.add_argument("--kinds", nargs="+", choices=("toeplitz", "sink_window"), default=["toeplitz", "sink_window"],
                        help="The constants to run (default both; timing.sh runs toeplitz alone).")
    parser.add_argument("--new_tokens", type=int, default=16, help="Greedy tokens decoded after the question.")
    parser.add_argument("--threads", type=int, default=2, help="torch threads.")
    parser.add_argument("--out", required=True, help="The JSON-lines file of rows to write.")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from transformers import AutoModelForCausalLM, DynamicCache

    from papa.families.generation import cache_bytes
    from papa.io import save_text
    from papa.method.attention import load_structured, patch_model
    from papa.method.ranking import first_k_heads, load_sorted_heads
    from papa.method.structured_averaging import sink_window
    from papa.models.bundled import local_model_path

    stock = AutoModelForCausalLM.from_pretrained(local_model_path("smollm2"), dtype=torch.float32).eval()
    L, H = stock.config.num_hidden_layers, stock.config.num_attention_heads
    sink, profile = load_structured(args.toeplitz, L, H)
    ranking = load_sorted_heads(args.sorted_heads, L, H)
    constants = {"toeplitz": (sink, profile[..., :args.window].contiguous()),
                 "sink_window": sink_window(L, H, sinks=4, window=args.window)}
    constants = {kind: constants[kind] for kind in args.kinds}
    models = {("stock", 0.0): stock}
    for kind, structured in constants.items():
        for k in args.ks:
            models[(f"PAPA {kind} D={args.window}", k / (L * H))] = patch_model(
                copy.deepcopy(stock), static_heads=first_k_heads(ranking, k, L, H), structured=structured).eval()
    prompts = [json.loads(line) for line in open(args.prompts)]
    for model in models.values():
        warm_up(model, DynamicCache(config=model.config), prompts[0])
    rows = []
    for n, prompt in enumerate(prompts):
        order = list(models) if n % 2 == 0 else list(models)[::-1]  # who goes first alternates
        for method, fraction in order:
            model = models[(method, fraction)]
            with PeakRss() as peak:
                cache = DynamicCache(config=model.config)
                prefill_s = prefill(model, cache, prompt["context"])
                tokens, decode_s = greedy(model, cache, prompt["question"], args.new_tokens,
                                          len(prompt["context"]))
            rows.append({"method": method, "fraction": fraction, "length": prompt["length"], "index": prompt["index"],
                         "found": tokens[:len(prompt["answer"])] == prompt["answer"],
                         "cache_bytes": sum(sum(layer.values()) for layer in cache_bytes(cache)),
                         "prefill_s": prefill_s, "decode_s_per_token": decode_s,
                         "peak_rss_growth": peak.growth})
            print(json.dumps({k: v for k, v in rows[-1].items()}), flush=True)
    save_text("".join(json.dumps(row) + "\n" for row in rows), args.out)


if __name__ == "__main__":
    main()
