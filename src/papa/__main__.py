"""`python -m papa <command> [flags]`: the PAPA commands (papa.cli) without their console scripts."""

import importlib
import sys

COMMANDS = {"sweep": "sweep", "glue": "glue", "glue-avgs": "glue_avgs", "ner": "ner", "ner-avgs": "ner_avgs",
            "benchmark": "benchmark", "compare": "compare", "lm-eval": "lm_eval_cli", "duo-export": "duo_export"}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m papa {{{','.join(COMMANDS)}}} [flags]   (each command takes --help)", file=sys.stderr)
        return 2
    return importlib.import_module(f"papa.cli.{COMMANDS[argv[0]]}").main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
