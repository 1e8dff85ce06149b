#!/usr/bin/env python
"""Benchmark PAPA's speed and memory against the stock model and the original code's loops.

Measured side by side in one process, variants interleaved within each round (the order rotates
every round; inference runs the stock model before and after each variant, the averaging pass
times every variant on the same batch in turn), medians reported after warm-up:

1. inference (no attentions requested, torch.inference_mode): stock sdpa encoder vs PAPA-patched
   copies with 0, 1/2, 7/8 and all heads constant, at each --seq_lens; speed ratio to stock and the
   FLOP bound of pruning the Q/K projections and QKᵀ of the constant heads;
2. the averaging pass (`papa.method.averaging.accumulate_attention`, eager model) vs. a plain eager forward
   with output_attentions=True over the same batches vs. the original PAPA code's loop; peak memory
   of the pass at N and 4N batches (each in a fresh child process);
3. one training step (forward + backward + AdamW, train mode) of a freeze-extract sequence probe in
   probing mode (stock backbone, and with half the heads constant), full fine-tuning and sorting
   mode: median time and peak memory (child processes).

Peak memory: each measurement runs in a fresh process forked from a forkserver that has only
imported the libraries; CPU: increase of ru_maxrss over the pass, CUDA: max_memory_allocated.
The code is papa.benchmark (installed: `papa-benchmark`, the same flags).

    HF_HUB_OFFLINE=1 python papa_scripts/benchmark_papa.py --threads 1 --json benchmarks/results/minilm_cpu_eager.json
    python papa_scripts/benchmark_papa.py --tiny --repeats 2 --json /tmp/tiny.json   # smoke test
    python papa_scripts/benchmark_papa.py --pool a.json b.json --json pooled.json    # pool earlier runs' rounds
"""

from papa.cli.benchmark import main

if __name__ == "__main__":
    main()
