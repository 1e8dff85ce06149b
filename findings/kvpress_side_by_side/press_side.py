"""kvpress's side: SmolLM2 with each press on the prompts of prompts.py, run in kvpress's own environment (kvpress
0.5.5 pins transformers < 5.3: make_env.sh). Not through kvpress's pipeline, which wraps the context in the chat
template: the press is a context manager around the context's prefill, then the question and greedy decoding on the
compressed cache, the same token ids and the same decoding as PAPA's side (measure.py).

    OUT/kvpress_venv/bin/python findings/kvpress_side_by_side/press_side.py --model SMOLLM2_FOLDER \
        --prompts OUT/prompts.jsonl --ratios 0.25 0.5 0.75 --duo_pattern OUT/duo_pattern --out OUT/presses.jsonl

A press's ratio is the share of the context's cached tokens it removes. StreamingLLM, DuoAttention and the random
press choose the same tokens whatever the prompt; SnapKV, TOVA, Knorm, ExpectedAttention, PyramidKV and AdaKV score
them on the prompt (the context only: the question comes after the compression, as it does for PAPA). AdaKV and
DuoAttention mask keys per head rather than drop them (kvpress's attention patch), so their cache keeps its bytes:
each row records the measured bytes and the share the press says it removed.
"""

import argparse
import json
import os
import sys
from contextlib import nullcontext

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure import PeakRss, greedy, prefill, tensor_bytes, warm_up  # noqa: E402
from shared_prefill import RecordedPrefill  # noqa: E402


def duo_press(pattern_folder):
    """DuoAttentionPress reading its head pattern from a folder (papa-duo-export's), as DuoAttention's loader reads
    it: full_attention_heads.tsv clipped to [0, 1], sink and recent sizes from config.json."""
    from kvpress import DuoAttentionPress

    with open(os.path.join(pattern_folder, "config.json")) as f:
        config = json.load(f)
    scores = np.clip(np.loadtxt(os.path.join(pattern_folder, "full_attention_heads.tsv"), dtype=float,
                                delimiter="\t"), 0, 1)

    class PatternPress(DuoAttentionPress):
        def load_attention_pattern(self, model):
            return config["sink_size"], config["recent_size"], scores

    return lambda ratio: PatternPress(head_compression_ratio=ratio)


def presses(duo_pattern):
    import kvpress as kv

    made = {
        "StreamingLLM": lambda r: kv.StreamingLLMPress(compression_ratio=r, n_sink=4),
        "SnapKV": lambda r: kv.SnapKVPress(compression_ratio=r),
        "TOVA": lambda r: kv.TOVAPress(compression_ratio=r),
        "Knorm": lambda r: kv.KnormPress(compression_ratio=r),
        "ExpectedAttention": lambda r: kv.ExpectedAttentionPress(compression_ratio=r),
        "PyramidKV": lambda r: kv.PyramidKVPress(compression_ratio=r),
        "AdaKV (SnapKV)": lambda r: kv.AdaKVPress(press=kv.SnapKVPress(compression_ratio=r)),
        "random": lambda r: kv.RandomPress(compression_ratio=r, seed=0),
    }
    if duo_pattern:
        made["DuoAttention (PAPA's ranking)"] = duo_press(duo_pattern)
    return made


def removed_share(press):
    """The share of the context's cached tokens the press says it removed."""
    return float(getattr(press, "compression_ratio_", None) or press.compression_ratio)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="SmolLM2's transformers folder.")
    parser.add_argument("--prompts", required=True, help="prompts.py's JSON lines.")
    parser.add_argument("--ratios", type=float, nargs="+", default=[0.25, 0.5, 0.75], help="Shares removed.")
    parser.add_argument("--presses", nargs="+", default=None, help="Some presses only (default: every one).")
    parser.add_argument("--duo_pattern", default=None, help="papa-duo-export's folder (PAPA's ranking).")
    parser.add_argument("--new_tokens", type=int, default=16, help="Greedy tokens decoded after the question.")
    parser.add_argument("--shared_prefill", action="store_true",
                        help="Prefill each prompt once and replay every press's hooks on a copy of its cache "
                             "(shared_prefill.py: the same caches, in minutes instead of hours at 8 192 tokens).")
    parser.add_argument("--threads", type=int, default=2, help="torch threads.")
    parser.add_argument("--out", required=True, help="The JSON-lines file of rows to write.")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from transformers import AutoModelForCausalLM, DynamicCache

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="sdpa").eval()
    made = presses(args.duo_pattern)
    chosen = args.presses or list(made)
    methods = [("stock", 0.0)] + [(name, ratio) for name in chosen for ratio in args.ratios]  # stock: this env's
    prompts = [json.loads(line) for line in open(args.prompts)]
    warm_up(model, DynamicCache(config=model.config), prompts[0])
    rows = []
    for n, prompt in enumerate(prompts):
        if args.shared_prefill:
            with PeakRss() as prefill_peak:
                recorded = RecordedPrefill(model, prompt["context"], lambda: DynamicCache(config=model.config))
        for name, ratio in methods if n % 2 == 0 else methods[::-1]:  # who goes first alternates
            press = made[name](ratio) if name != "stock" else None
            with PeakRss() as peak:
                if args.shared_prefill:
                    cache, own_s = recorded.cache_for(press)
                    prefill_s = recorded.seconds + own_s
                else:
                    cache = DynamicCache(config=model.config)
                    with press(model) if press else nullcontext():
                        prefill_s = prefill(model, cache, prompt["context"])
                tokens, decode_s = greedy(model, cache, prompt["question"], args.new_tokens,
                                          len(prompt["context"]))
            growth = max(peak.growth, prefill_peak.growth) if args.shared_prefill else peak.growth
            method = f"kvpress {name}" if press else "stock (kvpress's environment)"
            rows.append({"method": method, "fraction": ratio, "length": prompt["length"], "index": prompt["index"],
                         "found": tokens[:len(prompt["answer"])] == prompt["answer"],
                         "cache_bytes": sum(tensor_bytes(layer.keys) + tensor_bytes(layer.values)
                                            for layer in cache.layers),
                         "removed_share": removed_share(press) if press else 0.0, "prefill_s": prefill_s,
                         "decode_s_per_token": decode_s, "peak_rss_growth": growth,
                         "tokens": tokens})
            print(json.dumps(rows[-1]), flush=True)
    with open(args.out + ".tmp", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    os.replace(args.out + ".tmp", args.out)


if __name__ == "__main__":
    main()
