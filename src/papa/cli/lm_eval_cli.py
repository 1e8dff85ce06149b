"""`papa-lm-eval`: lm-eval's own command line (lm-eval 0.4.13, the same flags and subcommands), with the model type
`papa` registered (papa.evaluation.harness) and the project's offline tasks (papa_sst2, ..., papa.evaluation's
task folder) on --include_path unless one is given. lm-eval finds models only in its registry, which nothing
outside its own package fills from the `lm_eval` command, hence this command (or, in Python, importing
papa.evaluation.harness before calling lm-eval).

    papa-lm-eval --model papa --model_args pretrained=smollm2,static_heads_dir=DIR,sorting_heads_dir=DIR,static_heads_num=68 \\
        --tasks papa_sst2,papa_lm_qnli --metadata '{"data_dir": "../shared/data"}' --device cpu --batch_size 8
"""

import sys

from . import command

INCLUDE = "--include_path"


def with_tasks_dir(argv):
    """`argv` with the project's task folder as --include_path when none is given (lm-eval takes one folder)."""
    from ..evaluation import TASKS_DIR

    argv = list(argv)
    given = any(a == INCLUDE or a.startswith(INCLUDE + "=") for a in argv)
    if not argv or given or argv[0] in ("-h", "--help"):
        return argv
    return argv + [INCLUDE, TASKS_DIR]


def run(argv):
    from ..evaluation import require_lm_eval

    require_lm_eval()
    from ..evaluation import harness  # noqa: F401 (registers the model type "papa")
    from lm_eval.__main__ import cli_evaluate

    sys.argv = ["papa-lm-eval", *with_tasks_dir(argv)]
    cli_evaluate()


def main(argv=None):
    return command(run, argv)


if __name__ == "__main__":
    sys.exit(main())
