"""One exception type for bad input, and the wrapper that turns it into a clean CLI exit.

Scripts raise `PapaError` with a message that names the problem and, where obvious, the fix.
`run_cli` (every command's entry) prints it on one line and exits 2 without a traceback; set `PAPA_DEBUG=1` (or pass
`--traceback`) to see the traceback instead. (`--debug` is not it: in the averaging scripts it means "the first 100
examples", as in the original, and in the training scripts it is HF's TrainingArguments flag.)
"""

import os
import sys


class PapaError(Exception):
    """Bad input or a failed precondition, explained for a user (not a bug in papa)."""


def check_positive(value, flag):
    """`value` unchanged if it is None or a positive number; else a PapaError naming `flag`."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
        raise PapaError(f"{flag} must be positive; got {value}")
    return value


def first_line(message):
    """The first non-empty line of a message, an exception's or any text ("" for none): libraries' messages run to
    advice and detail that a one-line error does not need."""
    return next((line.strip() for line in str(message).splitlines() if line.strip()), "")


SEED_LIMIT = 2**32  # numpy's seeds, which HF's set_seed sets too: 0 ≤ seed < 2**32


def check_seed(value, flag):
    """`value` unchanged if it is a seed numpy accepts; else a PapaError naming `flag`."""
    if not 0 <= value < SEED_LIMIT:
        raise PapaError(f"{flag} must be between 0 and {SEED_LIMIT - 1}; got {value}")
    return value


def check_writable_folder(path, flag):
    """`path` unchanged if it is, or can be made, a folder to write in: else a PapaError naming `flag`, before any
    work is done (the path is a file, lies under a file, or its nearest existing folder is not writable)."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise PapaError(f"{flag} {path}: {existing} is a file, not a folder; pass a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PapaError(f"{flag} {path}: {existing} is not writable; pass a folder you can write in")
    return path


TRACEBACK_FLAG = "--traceback"


def debug_enabled(argv=None) -> bool:
    argv = sys.argv if argv is None else argv
    return os.environ.get("PAPA_DEBUG", "") not in ("", "0", "false", "False") or TRACEBACK_FLAG in argv


def run_cli(main, argv=None):
    """Run `main(argv)` (argv: the command line after the program name, default sys.argv[1:]); turn
    `PapaError` (and Ctrl-C) into one line on stderr and a non-zero exit."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if TRACEBACK_FLAG in argv:  # for this process and the sweep's stages
        argv.remove(TRACEBACK_FLAG)
        os.environ["PAPA_DEBUG"] = "1"
    try:
        return main(argv)
    except PapaError as err:
        if debug_enabled():
            raise
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
