"""PAPA's speed and memory against the stock model and the original code's loops.

    flops.py      the FLOP model: the best speed-up constant heads allow
    workloads.py  models, inputs and the variants of each benchmark (tables)
    harness.py    interleaved timing, medians and their intervals
    memory.py     peak memory of one pass, in a fresh child process (papa.fork_server)
    report.py     machine description, goals, markdown
    pool.py       earlier runs' inference and training rounds, pooled (--pool)
    arguments.py  papa-benchmark's flags (BenchmarkArguments)
    run.py        the three benchmarks and `run_benchmark`

Imports go one way: run.py → pool.py, report.py, memory.py, harness.py → workloads.py, flops.py; arguments.py →
workloads.py.

Entry point: `papa-benchmark` (papa.cli.benchmark, papa_scripts/benchmark_papa.py).
"""
