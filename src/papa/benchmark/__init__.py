"""PAPA's speed and memory against the stock model and the original code's loops.

    flops.py      the FLOP model: the best speed-up constant heads allow
    workloads.py  models, inputs and the variants of each benchmark (tables)
    harness.py    interleaved timing with medians; peak memory in fresh child processes
    report.py     machine description, goals, markdown
    run.py        the three benchmarks and `run_benchmark`

Entry point: `papa-benchmark` (papa.cli.benchmark, papa_scripts/benchmark_papa.py).
"""
