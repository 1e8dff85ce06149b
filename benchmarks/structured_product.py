"""Structured (toeplitz) constants' product against full constants': time per layer and bytes held.

One decoder layer's constant heads at SmolLM2-135M's shapes (9 query heads on 3 K/V heads, head_dim 64), batch 1,
no padding: norm(C·P)·V by the FFT convolution of papa.families.structured against the full constants' product as
a patched model runs it (papa.families.constant_math.constant_attention_output over the (H, T, T) matrices, held as
block strips from T = 512 on, as patch_model holds them). Interleaved rounds, medians.

    python benchmarks/structured_product.py --seq_lens 128 512 2048 --rounds 15 --out structured_product_cpu.md
"""

import argparse
import datetime
import os
import platform
import statistics
import time

import torch

from papa.families.block_triangle import BLOCK, BlockTriangle, pack_blocks
from papa.families.constant_math import constant_attention_output
from papa.families.structured import dense, structured_output
from papa.io import save_text

LAYERS, HEADS, KV, HEAD_DIM = 30, 9, 3, 64


def timed(fn, repeats=3):
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def case(seq_len, generator):
    sink, profile = torch.rand(HEADS, 1, generator=generator), torch.rand(HEADS, seq_len, generator=generator)
    values = torch.randn(1, seq_len, KV, HEAD_DIM, generator=generator)
    full = dense(sink, profile, seq_len)  # (H, T, T)
    held = BlockTriangle(pack_blocks(full, BLOCK), seq_len, BLOCK) if seq_len >= 2 * BLOCK else full
    expanded = values.repeat_interleave(HEADS // KV, dim=2)
    with torch.inference_mode():
        fft = lambda: structured_output(sink, profile, values, None)  # noqa: E731
        matrix = lambda: constant_attention_output(held, expanded, None, nonnegative=True)  # noqa: E731
        per_call = lambda: constant_attention_output(dense(sink, profile, seq_len), expanded, None,  # noqa: E731
                                                     nonnegative=True)
        exact = structured_output(sink.double(), profile.double(), values.double(), None)  # float64 FFT: ~1e-15
        errors = [(out().double() - exact).abs().max().item() for out in (fft, matrix)]
    return fft, matrix, per_call, errors


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq_lens", type=int, nargs="+", default=[128, 512, 2048], help="lengths T")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (each times both products)")
    parser.add_argument("--out", default="structured_product_cpu.md", help="the markdown report")
    args = parser.parse_args()
    load_start = os.getloadavg()[0]
    started = datetime.datetime.now(datetime.UTC)
    g = torch.Generator().manual_seed(0)
    rows = []
    for T in args.seq_lens:
        fft, matrix, per_call, errors = case(T, g)
        with torch.inference_mode():
            fft(), matrix(), per_call()  # warm-up
            ratios, fft_ms, matrix_ms, per_call_ms = [], [], [], []
            for _ in range(args.rounds):
                a, b, c = timed(fft), timed(matrix), timed(per_call)
                fft_ms.append(a * 1e3)
                matrix_ms.append(b * 1e3)
                per_call_ms.append(c * 1e3)
                ratios.append(b / a)
        full_bytes = LAYERS * HEADS * T * (T + 1) // 2 * 4  # lower triangles, float32
        toeplitz_bytes = LAYERS * HEADS * (1 + T) * 4
        rows.append((T, statistics.median(fft_ms), statistics.median(matrix_ms), statistics.median(per_call_ms),
                     statistics.median(ratios),
                     min(ratios), max(ratios), full_bytes, toeplitz_bytes, *errors))
    lines = ["# Structured constants' product against full constants' (one layer, SmolLM2 shapes)", "",
             f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs, torch {torch.__version__}, "
             f"{torch.get_num_threads()} threads; {started:%Y-%m-%d %H:%M} UTC; 1-min load average {load_start:.2f} at "
             f"start, {os.getloadavg()[0]:.2f} at end. Command: `python benchmarks/structured_product.py --seq_lens "
             f"{' '.join(map(str, args.seq_lens))} --rounds {args.rounds}`. Batch 1, 9 constant query heads on 3 K/V "
             "heads, head_dim 64, float32, no padding; medians of interleaved rounds.", "",
             "| T | FFT product ms | full constants' product ms | materialised per call ms | full / FFT (median, "
             "rounds' range) | full "
             "constants, 270 heads (lower triangles) | toeplitz, 270 heads | max abs error vs float64: FFT / full |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for T, a, b, c, r, lo, hi, full_bytes, toeplitz_bytes, fft_err, matrix_err in rows:
        lines.append(f"| {T} | {a:.2f} | {b:.2f} | {c:.2f} | {r:.2f}x ({lo:.2f}–{hi:.2f}) | {full_bytes / 1e6:,.1f} MB | "
                     f"{toeplitz_bytes / 1e6:.2f} MB | {fft_err:.1e} / {matrix_err:.1e} |")
    save_text("\n".join(lines) + "\n", args.out)  # atomic
    print("\n".join(lines))


if __name__ == "__main__":
    main()
