"""`papa-compare RUN_A RUN_B`: the paired difference between two finished sweeps of one task (papa.reporting.compare)."""

import argparse

from . import command

def parse(argv):
    from ..runs.arguments import SWEEP_CONTROLS

    variants = ("PAPA", *SWEEP_CONTROLS)
    parser = argparse.ArgumentParser(
        prog="papa-compare",
        description="The difference between two finished sweeps of one task (two models, two budgets, or a variant "
                    "of each): A's change against its own k = 0 minus B's, at every fraction of constant heads both "
                    "ran, with a paired 95%% bootstrap interval.")
    parser.add_argument("run_a", metavar="RUN_A", help="A sweep's output folder (a grid's <grid>/<model>/<task>).")
    parser.add_argument("run_b", metavar="RUN_B", help="The other sweep's output folder, of the same task.")
    parser.add_argument("--variant_a", default="PAPA", choices=variants,
                        help="What of RUN_A to compare: PAPA's runs (default) or one of its controls.")
    parser.add_argument("--variant_b", default="PAPA", choices=variants,
                        help="What of RUN_B to compare: PAPA's runs (default) or one of its controls.")
    parser.add_argument("--metric", default=None,
                        help="The metric (e.g. accuracy, f1, perplexity). Default: the task's first main metric.")
    parser.add_argument("--bootstrap_samples", type=int, default=1000, help="Bootstrap resamples (default 1000).")
    parser.add_argument("--output", default=None, help="Also write the comparison as CSV to this file.")
    return parser.parse_args(argv)


def run(argv):
    from ..errors import check_positive
    from ..reporting.compare import run_compare

    args = parse(argv)
    check_positive(args.bootstrap_samples, "--bootstrap_samples")
    run_compare(args.run_a, args.run_b, args.variant_a, args.variant_b, args.metric, args.bootstrap_samples,
                args.output)


def main(argv=None):
    return command(run, argv)


if __name__ == "__main__":
    main()
