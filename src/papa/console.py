"""What the scripts print, alone and under the sweep.

Run by a user, a script prints `[papa]` stage lines, progress bars and the Trainer's metric logs,
as HF's example scripts do. Bars and colour are for a terminal: with stderr redirected (a file, a pipe) no bar is
drawn (the Trainer's metric logs still print) and transformers' log lines lose their colour codes (its load report
writes them whatever the stream, against its own isatty convention). Run by the sweep (which sets PAPA_PROGRESS=1 for its stages), it draws
no bars and silences the libraries' load reports and warnings; its progress goes out as
`[papa-progress] done/total` lines, which the sweep turns into its own one-line bar and keeps out
of the stage's log.txt.
"""

import logging
import os
import re
import sys
import warnings

PROGRESS_ENV = "PAPA_PROGRESS"
PROGRESS_MARKER = "[papa-progress] "


def main_process():
    return int(os.environ.get("RANK", "0")) == 0


def under_sweep():
    return os.environ.get(PROGRESS_ENV) == "1"


def on_terminal():
    """Whether stderr (where bars and logs go) is a terminal."""
    return sys.stderr is not None and sys.stderr.isatty()


def draws_bars():
    return not under_sweep() and on_terminal()


ANSI_CODES = re.compile(r"\x1b\[[0-9;]*m")


class PlainText(logging.Filter):
    """A log handler's filter: colour codes out of a record bound for a stream that is not a terminal."""

    def __init__(self, handler):
        super().__init__()
        self.handler = handler

    def filter(self, record):
        stream = getattr(self.handler, "stream", None)
        if not (stream is not None and hasattr(stream, "isatty") and stream.isatty()):
            record.msg = ANSI_CODES.sub("", str(record.msg))
        return True


def plain_logs():
    """transformers' handlers drop colour codes where they do not write to a terminal (idempotent)."""
    import transformers

    for handler in transformers.utils.logging.get_logger("transformers").handlers:
        if not any(isinstance(f, PlainText) for f in handler.filters):
            handler.addFilter(PlainText(handler))


def plain_output():
    """For a script of your own, as papa's commands do it: where stderr is not a terminal (a file, a pipe), no
    progress bars from transformers and datasets and no colour codes in transformers' log lines (its load report
    writes them whatever the stream); on a terminal nothing changes. `import papa` alone changes nothing."""
    if draws_bars():
        return  # a user's terminal: HF's bars and colours as they are
    import datasets
    import transformers

    plain_logs()
    transformers.utils.logging.disable_progress_bar()  # "Loading weights"
    datasets.disable_progress_bars()  # "Casting the dataset", "Tokenising"


def setup_console():
    """Call first in a script: quiet what says nothing useful (everything, under the sweep); no bars and no colour
    codes where stderr is not a terminal."""
    # a CPU-only machine has nothing to pin to; torch warns once per DataLoader
    warnings.filterwarnings("ignore", message="'pin_memory' argument is set as true", category=UserWarning)
    plain_output()
    if under_sweep():
        import datasets
        import transformers

        transformers.utils.logging.set_verbosity_error()  # load reports ("MISSING ... newly initialized")
        datasets.utils.logging.set_verbosity_error()


def stage(message):
    """One visible progress line per step of a script (main process only)."""
    if main_process():
        print(f"[papa] {message}", flush=True)


def report_progress(done, total):
    if under_sweep() and main_process():
        print(f"{PROGRESS_MARKER}{done}/{total}", flush=True)


def parse_progress(line):
    """(done, total) from a progress line, None for any other line."""
    if not line.startswith(PROGRESS_MARKER):
        return None
    done, _, total = line[len(PROGRESS_MARKER):].strip().partition("/")
    try:
        return int(done), int(total)
    except ValueError:
        return None


class _ReportedProgress:
    """The part of tqdm's interface a loop uses, reported with `report_progress` instead of drawn."""

    def __init__(self, total):
        self.n, self.total = 0, total

    def update(self, n=1):
        self.n += n
        report_progress(self.n, self.total)

    def close(self):
        pass


def progress_bar(total, desc, disable=False):
    """A tqdm bar (none off a terminal), or under the sweep an object that reports the same progress as marker
    lines."""
    if under_sweep():
        return _ReportedProgress(total)
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, disable=disable or not on_terminal())


def quiet_trainer(trainer):
    """Off a terminal the Trainer draws no bar (as with --disable_tqdm): its metric logs still print (to log.txt);
    under the sweep its steps go out as marker lines."""
    if draws_bars():
        return trainer
    from transformers.trainer_callback import PrinterCallback, ProgressCallback, TrainerCallback

    class ReportSteps(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            report_progress(state.global_step, state.max_steps)

    if trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(PrinterCallback)
    if under_sweep():
        trainer.add_callback(ReportSteps)
    return trainer
