"""shared_prefill.py against the context-manager path (kvpress's environment): for each press, the cache a real
prefill under the press leaves and the one its replayed hooks leave on a copy of the stock cache, compared tensor by
tensor (keys, values and the masked key indices of AdaKV and DuoAttention), then the tokens each decodes.

    OUT/kvpress_venv/bin/python findings/kvpress_side_by_side/check_shared_prefill.py --model SMOLLM2_FOLDER \
        --prompts OUT/t2048/prompts.jsonl --count 2 --duo_pattern OUT/duo_pattern
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure import greedy, prefill  # noqa: E402
from press_side import presses  # noqa: E402
from shared_prefill import RecordedPrefill  # noqa: E402


def state(model, cache):
    """Every layer's keys, values and masked key indices."""
    masks = [getattr(layer.self_attn, "masked_key_indices", None) for layer in model.model.layers]
    return [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers], masks


def same(a, b):
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="SmolLM2's transformers folder.")
    parser.add_argument("--prompts", required=True, help="prompts.py's JSON lines.")
    parser.add_argument("--count", type=int, default=2, help="Prompts to check.")
    parser.add_argument("--ratios", type=float, nargs="+", default=[0.5], help="Shares removed.")
    parser.add_argument("--duo_pattern", default=None, help="papa-duo-export's folder (PAPA's ranking).")
    args = parser.parse_args(argv)
    from transformers import AutoModelForCausalLM, DynamicCache

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="sdpa").eval()
    made, failures = presses(args.duo_pattern), 0
    for line in list(open(args.prompts))[:args.count]:
        prompt = json.loads(line)
        recorded = RecordedPrefill(model, prompt["context"], lambda: DynamicCache(config=model.config))
        for name in made:
            for ratio in args.ratios:
                real = DynamicCache(config=model.config)
                with made[name](ratio)(model):
                    prefill(model, real, prompt["context"])
                real_state = state(model, real)
                replayed, _ = recorded.cache_for(made[name](ratio))
                replayed_state = state(model, replayed)
                tokens = [greedy(model, c, prompt["question"], 8, len(prompt["context"]))[0]
                          for c in (replayed, real)]  # the replayed one's masks are the modules' now: decode it first
                ok = same(real_state, replayed_state) and tokens[0] == tokens[1]
                failures += not ok
                print(f"prompt {prompt['index']} {name} {ratio}: {'same' if ok else 'DIFFERENT'}", flush=True)
    print(f"{failures} differences")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
