"""`papa-benchmark`: PAPA's speed and memory against the stock model (papa.benchmark); benchmark_papa.py."""

from . import command


def run(argv):
    from ..runs.arguments import parse_dataclasses
    from ..benchmark.arguments import BenchmarkArguments
    from ..benchmark.run import run_benchmark

    args = parse_dataclasses(BenchmarkArguments, argv, description="Benchmark PAPA's speed and memory against "
                                                                   "the stock model and the original code's loops.")[0]
    run_benchmark(args, argv)


def main(argv=None):
    return command(run, argv, fit_threads=False)


if __name__ == "__main__":
    main()
