"""What the scripts print, alone and under the sweep.

Run by a user, a script prints `[papa]` stage lines, progress bars and the Trainer's metric logs,
as HF's example scripts do. Run by the sweep (which sets PAPA_PROGRESS=1 for its stages), it draws
no bars and silences the libraries' load reports and warnings; its progress goes out as
`[papa-progress] done/total` lines, which the sweep turns into its own one-line bar and keeps out
of the stage's log.txt.
"""

import os
import warnings

PROGRESS_ENV = "PAPA_PROGRESS"
PROGRESS_MARKER = "[papa-progress] "


def main_process():
    return int(os.environ.get("RANK", "0")) == 0


def under_sweep():
    return os.environ.get(PROGRESS_ENV) == "1"


def setup_console():
    """Call first in a script: quiet what says nothing useful (everything, under the sweep)."""
    # a CPU-only machine has nothing to pin to; torch warns once per DataLoader
    warnings.filterwarnings("ignore", message="'pin_memory' argument is set as true", category=UserWarning)
    if under_sweep():
        import datasets
        import transformers

        transformers.utils.logging.set_verbosity_error()  # load reports ("MISSING ... newly initialized")
        transformers.utils.logging.disable_progress_bar()
        datasets.utils.logging.set_verbosity_error()
        datasets.disable_progress_bars()  # "Casting the dataset", "Tokenising"


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
    """A tqdm bar, or under the sweep an object that reports the same progress as marker lines."""
    if under_sweep():
        return _ReportedProgress(total)
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, disable=disable)


def quiet_trainer(trainer):
    """Under the sweep: the Trainer's bar becomes marker lines; its metric logs still print (to log.txt)."""
    if not under_sweep():
        return trainer
    from transformers.trainer_callback import PrinterCallback, ProgressCallback, TrainerCallback

    class ReportSteps(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            report_progress(state.global_step, state.max_steps)

    if trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(PrinterCallback)
    trainer.add_callback(ReportSteps)
    return trainer
