"""The cache after a prompt of T tokens, per configuration of constant K/V groups: bytes against the stock model's.

    python findings/long_context_reach/cache_bytes.py --context 2048 --sorted_heads SORT/sorted_heads.json \
        --toeplitz AVGS --ks 135 204 --windows 64 256 1024 2048 --out OUT/cache_bytes.md

SmolLM2, float32, batch 1: the pass key's first validation prompt (papa.data.retrieval) of `context` tokens prefilled
once with the cache (papa/families/generation.py), its bytes read by papa.families.generation.cache_bytes: the
dynamic groups' K and V, and what a constant group keeps (the values of its sink and its reach − 1 positions). The
first k heads of the ranking are constant, with Toeplitz constants cut to each reach (--window) and sink_window
constants of that window (4 sinks).
"""

import argparse
import copy
import os

import torch


def prompt(tokenizer, length):
    from papa.data.retrieval import make_examples

    example = make_examples("passkey", tokenizer, length, 1, "validation")[0]
    answer = sum(1 for y in example.labels if y != -100)
    return torch.tensor([example.input_ids[:len(example.input_ids) - answer]])


def cached_bytes(model, ids):
    from transformers import DynamicCache

    from papa.families.generation import cache_bytes

    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
    return sum(sum(layer.values()) for layer in cache_bytes(cache))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--context", type=int, default=2048, help="Prompt length T.")
    parser.add_argument("--sorted_heads", required=True, help="A ranking of K/V groups (sorted_heads.json).")
    parser.add_argument("--toeplitz", required=True, help="The folder of the Toeplitz structured_constants.pt.")
    parser.add_argument("--ks", type=int, nargs="+", default=[135, 204], help="Constant heads (whole groups).")
    parser.add_argument("--windows", type=int, nargs="+", default=[64, 256, 1024, 2048], help="Reaches D.")
    parser.add_argument("--out", required=True, help="Markdown table to write.")
    args = parser.parse_args(argv)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from papa.io import save_text
    from papa.method.attention import load_structured, patch_model
    from papa.method.ranking import first_k_heads, load_sorted_heads
    from papa.method.structured_averaging import sink_window
    from papa.models.bundled import local_model_path

    path = local_model_path("smollm2")
    stock = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    config = stock.config
    L, H = config.num_hidden_layers, config.num_attention_heads
    ids = prompt(AutoTokenizer.from_pretrained(path), args.context)
    base = cached_bytes(stock, ids)
    sink, profile = load_structured(args.toeplitz, L, H)
    ranking = load_sorted_heads(args.sorted_heads, L, H)
    lines = [f"# Cache after a {args.context}-token prompt, SmolLM2 (float32, batch 1)", "",
             f"Stock: {base / 1e6:.1f} MB. `python findings/long_context_reach/cache_bytes.py --context {args.context} "
             f"--ks {' '.join(map(str, args.ks))} --windows {' '.join(map(str, args.windows))}`.", "",
             "| constants | reach D | k | cache MB | × stock |", "| --- | ---: | ---: | ---: | ---: |"]
    for kind in ("toeplitz", "sink_window"):
        for window in args.windows:
            structured = ((sink, profile[..., :window].contiguous()) if kind == "toeplitz"
                          else sink_window(L, H, sinks=4, window=window))
            for k in args.ks:
                model = patch_model(copy.deepcopy(stock), static_heads=first_k_heads(ranking, k, L, H),
                                    structured=structured).eval()
                size = cached_bytes(model, ids)
                lines.append(f"| {kind} | {window} | {k} | {size / 1e6:.1f} | {size / base:.3f} |")
                print(lines[-1], flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    save_text("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
