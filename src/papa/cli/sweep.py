"""`papa-sweep`: the whole PAPA method in one command (papa.sweep), the original run_papa_sweep.py."""

from . import command


def run(argv):
    from ..arguments import parse_sweep_args
    from ..sweep import run_sweep
    from ..custom import resolve_task
    from ..sweep.defaults import epilog

    args, passthrough = parse_sweep_args(
        argv, description="The whole PAPA method in one command: averages → head ranking → probing with k "
                          "constant heads, for each k.", epilog=epilog())
    # no --task_name but files: a custom sequence task, read off --train_file (papa.custom)
    run_sweep(args, resolve_task(None, args.task_name, args.train_file, cache_dir=args.cache_dir), passthrough)


def main(argv=None):
    return command(run, argv)


if __name__ == "__main__":
    main()
