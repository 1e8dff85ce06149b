"""`papa-sweep`: the whole PAPA method in one command (papa.sweep), the original run_papa_sweep.py."""

from . import command


def run(argv):
    from ..arguments import parse_sweep_args
    from ..sweep import run_sweep
    from ..sweep.defaults import epilog
    from ..tasks import get_task

    args, passthrough = parse_sweep_args(
        argv, description="The whole PAPA method in one command: averages → head ranking → probing with k "
                          "constant heads, for each k.", epilog=epilog())
    run_sweep(args, get_task(args.task_name), passthrough)


def main(argv=None):
    return command(run, argv)


if __name__ == "__main__":
    main()
