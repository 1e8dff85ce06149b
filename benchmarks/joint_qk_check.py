"""What running a mixed layer's pruned Q and K projections as one GEMM saves, in one process (eager, CPU).

MiniLM, batch 32 (or a family's base shape with random weights, `papa.benchmark.workloads.FAMILY_CONFIGS`, at the
batch given), every row's last quarter padded, random constants, every other head constant (every layer mixes both
kinds). The same patched model runs with its Q/K projections joint (`joint_linear`, the code as it is) and
called apart (as before it), interleaved with the stock model and the first half of the layers constant (the same
FLOPs removed, no layer mixed). Printed per variant: median ms, paired speed vs stock (median over rounds of
stock / variant, the first three rounds dropped), and the paired ratio separate / joint with its IQR.

    python benchmarks/joint_qk_check.py [T, default 64] [rounds, default 40] [model type, default MiniLM] [batch]
"""

import copy
import statistics
import sys
import time

import torch
from transformers import AutoModel

import papa.hugepages
from papa.attention import patch_model
from papa.benchmark.workloads import (FAMILY_CONFIGS, every_other, layer_major, random_constants,
                                     stock_implementation)
from papa.families import PapaAttention
from papa.modeling import default_model_path


def stock_model(model_type):
    """The stock model in eval mode: the bundled MiniLM (sdpa), or a family's base shape with random weights."""
    if model_type is None:
        return AutoModel.from_pretrained(default_model_path(), attn_implementation="sdpa").eval()
    torch.manual_seed(0)
    config = FAMILY_CONFIGS[model_type][1]()
    return AutoModel.from_config(config, attn_implementation=stock_implementation(config)).eval()


def separate_projections(self, x, *linears):
    return tuple(linear(x) for linear in linears)


def main(T=64, rounds=40, model_type=None, B=32):
    papa.hugepages.enable()
    stock = stock_model(model_type)
    L, H = stock.config.num_hidden_layers, stock.config.num_attention_heads
    constants = random_constants(stock.config, T)
    mixed = patch_model(copy.deepcopy(stock), constants, static_heads=every_other(L, H)[: L * H // 2]).eval()
    whole = patch_model(copy.deepcopy(stock), constants, static_heads=layer_major(L, H)[: L // 2 * H]).eval()
    ids = torch.randint(1000, 20000, (B, T), generator=torch.Generator().manual_seed(1))  # in every vocabulary here
    mask = torch.ones(B, T, dtype=torch.long)
    mask[:, 3 * T // 4:] = 0
    joint = PapaAttention.papa_projections
    variants = {"stock": (stock, joint), "every other head, Q/K joint": (mixed, joint),
                "every other head, Q/K apart": (mixed, separate_projections),
                "first half of the layers": (whole, joint)}

    def timed(model, projections):
        PapaAttention.papa_projections = projections
        start = time.perf_counter()
        out = model(input_ids=ids, attention_mask=mask).last_hidden_state
        return time.perf_counter() - start, out

    times = {name: [] for name in variants}
    with torch.inference_mode():
        difference = (timed(mixed, joint)[1] - timed(mixed, separate_projections)[1]).abs().max().item()
        for _ in range(rounds):
            for name, (model, projections) in variants.items():
                times[name].append(timed(model, projections)[0])
    PapaAttention.papa_projections = joint
    times = {name: per_round[3:] for name, per_round in times.items()}
    print(f"{model_type or 'MiniLM'}, batch {B}, T = {T}, {rounds} rounds; largest output difference joint vs apart: "
          f"{difference:.1e}")
    print("| variant | median ms | paired speed vs stock |")
    print("|---|---|---|")
    for name, per_round in times.items():
        paired = statistics.median(s / t for s, t in zip(times["stock"], per_round))
        print(f"| {name} | {statistics.median(per_round) * 1e3:.1f} | {paired:.4f}x |")
    ratios = [a / j for a, j in zip(times["every other head, Q/K apart"], times["every other head, Q/K joint"])]
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    print(f"apart / joint, paired: {statistics.median(ratios):.4f}x (IQR {q1:.4f}–{q3:.4f})")


if __name__ == "__main__":
    main(*(int(a) if a.isdigit() else a for a in sys.argv[1:5]))
