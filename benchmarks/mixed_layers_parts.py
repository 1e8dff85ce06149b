"""Where a model with mixed layers spends its time: each encoder layer's four parts, timed apart, in one process.

MiniLM, batch 32, T = 64, every row's last quarter padded, random constants: PAPA with every other head constant
(every layer mixes both kinds), PAPA with the first three layers constant, and the stock SDPA model, interleaved,
each forward's parts (self-attention, its output projection and norm, the feed-forward block's two halves) timed by
hooks. Per-forward sums, medians over rounds (the first three dropped). The hooks add a little time to every model alike.

    python benchmarks/mixed_layers_parts.py [rounds, default 25]
"""

import copy
import statistics
import sys
import time

import torch
from transformers import AutoModel

import papa.hugepages
from papa.attention import patch_model
from papa.modeling import default_model_path

B, L, H, T = 32, 6, 12, 64
PARTS = ("attention.self", "attention.output", "intermediate", "output")


def timed_parts(model, times, name):
    """Hooks adding each part's time per forward to times[(name, part)]."""
    for layer in model.encoder.layer:
        for part in PARTS:
            module, started = layer.get_submodule(part), {}
            module.register_forward_pre_hook(lambda m, args, started=started: started.__setitem__(0, time.perf_counter()))
            module.register_forward_hook(lambda m, args, out, started=started, part=part: times.setdefault(
                (name, part), []).append(time.perf_counter() - started[0]))


def models_to_compare(T=T):
    """{"every other head", "first three layers": PAPA with random constants, "stock": the stock SDPA model} in eval
    mode, and the input ids (B, T) at sequence length T; shared with benchmarks/mixed_layers_ops.py."""
    stock = AutoModel.from_pretrained(default_model_path(), attn_implementation="sdpa").eval()
    constants = torch.rand(L, H, T, T, generator=torch.Generator().manual_seed(0))
    heads = {"every other head": [[layer, h] for layer in range(L) for h in range(1, H, 2)],
             "first three layers": [[layer, h] for layer in range(L // 2) for h in range(H)]}
    models = {name: patch_model(copy.deepcopy(stock), constants, static_heads=chosen).eval()
              for name, chosen in heads.items()}
    models["stock"] = stock
    return models, torch.randint(1000, 20000, (B, T), generator=torch.Generator().manual_seed(1))


def main(rounds):
    papa.hugepages.enable()
    models, ids = models_to_compare()
    mask = torch.ones(B, T, dtype=torch.long)
    mask[:, 3 * T // 4:] = 0
    times, totals = {}, {name: [] for name in models}
    for name, model in models.items():
        timed_parts(model, times, name)
    with torch.inference_mode():
        for _ in range(rounds):
            for name, model in models.items():
                start = time.perf_counter()
                model(input_ids=ids, attention_mask=mask)
                totals[name].append(time.perf_counter() - start)
    for name in models:
        per_layer = {part: times[(name, part)] for part in PARTS}  # L entries per forward
        parts = [statistics.median(sum(v[i:i + L]) for i in range(3 * L, len(v), L)) * 1e3 for v in per_layer.values()]
        print(f"{name}: forward {statistics.median(totals[name][3:]) * 1e3:.1f} ms; "
              + ", ".join(f"{part} {ms:.1f}" for part, ms in zip(PARTS, parts)))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 25)
