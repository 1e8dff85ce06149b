"""`papa-sweep`: the whole PAPA method in one command (papa.sweep), the original run_papa_sweep.py."""

from . import command


def run(argv):
    from ..sweep.arguments import parse_sweep_args
    from ..sweep import run_grid
    from ..sweep.defaults import epilog

    args, passthrough = parse_sweep_args(
        argv, description="The whole PAPA method in one command: averages → head ranking → probing with k "
                          "constant heads, for each k (and each model x task: a grid).", epilog=epilog())
    run_grid(args, passthrough)


def main(argv=None):
    return command(run, argv, fit_threads=False)


if __name__ == "__main__":
    main()
