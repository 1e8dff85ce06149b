"""How every PAPA command reads its command line: HF's `HfArgumentParser` over dataclasses, bad flags and values as
one `PapaError`, transformers 4's renamed flags rewritten, a single `.json` argument read as a file of arguments.
The dataclasses themselves are in papa.runs.arguments (and papa.sweep.arguments)."""

import argparse
import json

from transformers import HfArgumentParser

from ..errors import PapaError, first_line
from ..io import load_json_object

# transformers 5 renamed this flag; the original commands use the old spelling
RENAMED_FLAGS = {"--evaluation_strategy": "--eval_strategy"}


def modernize_argv(argv):
    """Rewrite renamed flags (`--evaluation_strategy epoch`, `--evaluation_strategy=epoch`)."""
    out = []
    for arg in argv:
        name, eq, value = arg.partition("=")
        out.append(RENAMED_FLAGS.get(name, name) + eq + value if name in RENAMED_FLAGS else arg)
    return out


def json_to_argv(path):
    """The command line a JSON file of arguments stands for: {"do_train": true, "ks": [0, 72]} -> --do_train true --ks 0 72."""
    values = load_json_object(path, 'an arguments file holds one JSON object, {"flag": value, ...}')
    argv = []
    for name, value in values.items():
        if value is None:
            continue
        items = value if isinstance(value, list) else [value]
        argv += [f"--{name}"] + [json.dumps(v) if isinstance(v, dict) else str(v).lower() if isinstance(v, bool)
                                 else str(v) for v in items]
    return argv


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """HF's formatter, without "(default: None)" after a help that says what the default is, or has none."""

    def _get_help_string(self, action):
        if action.default is None or "default" in (action.help or "").lower():
            return action.help
        return super()._get_help_string(action)


def parse_dataclasses(types, argv, remaining=False, **parser_kwargs):
    """`HfArgumentParser(types).parse_args_into_dataclasses(argv)`, bad flags and values as a PapaError.

    A single argument ending in `.json` is read as a file of arguments. With `remaining`, flags no
    dataclass knows are returned (last) instead of being an error.
    """
    argv = list(argv)
    if len(argv) == 1 and argv[0].endswith(".json"):
        argv = json_to_argv(argv[0])
    parser = HfArgumentParser(types, exit_on_error=False, **{"formatter_class": HelpFormatter, **parser_kwargs})
    try:
        return tuple(parser.parse_args_into_dataclasses(args=modernize_argv(argv), return_remaining_strings=remaining,
                                                        look_for_args_file=False))
    except argparse.ArgumentError as err:  # a bad value, or a flag without its value
        raise PapaError(str(err)) from None
    except ValueError as err:  # unknown flags, and TrainingArguments' own consistency checks
        raise PapaError(first_line(err)) from None
