"""Off a terminal (output redirected to a file or a pipe) the commands draw no progress bars and write no colour
codes, and transformers' load report comes once; on a terminal HF's colours are left as they are."""

import io
import logging

from conftest import run_command, script

from papa.console import PlainText

ESCAPE = "\x1b["


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_colour_codes_leave_records_bound_for_a_file_only():
    for stream, kept in ((io.StringIO(), False), (Terminal(), True)):
        handler = logging.StreamHandler(stream)
        handler.addFilter(PlainText(handler))
        logger = logging.getLogger(f"papa-test-{kept}")
        logger.addHandler(handler)
        logger.warning("\x1b[1mLOAD REPORT\x1b[0m from: x")
        logger.removeHandler(handler)
        assert stream.getvalue() == ("\x1b[1mLOAD REPORT\x1b[0m from: x\n" if kept else "LOAD REPORT from: x\n")


def test_a_redirected_command_writes_plain_lines(tmp_path):
    """A ranking run, train and eval, with stdout and stderr to pipes: no escape codes, no bars (\\r), one load
    report (the classifier the bundled MiniLM lacks), the Trainer's metric logs."""
    proc = run_command(script("run_papa_glue.py") + [
        "--task_name", "repeat", "--max_seq_length", "32", "--max_train_samples", "16", "--max_eval_samples", "16",
        "--do_train", "--do_eval", "--num_train_epochs", "1", "--output_dir", tmp_path / "out"])
    for text in (proc.stdout, proc.stderr):
        assert ESCAPE not in text and "\r" not in text, text[-2000:]
    assert (proc.stdout + proc.stderr).count("LOAD REPORT") == 1, proc.stderr[-2000:]
    assert "'train_loss'" in proc.stdout and "eval_accuracy" in proc.stdout
