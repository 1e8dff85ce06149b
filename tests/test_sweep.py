"""The one-command sweep (papa.sweep, papa-sweep / papa_scripts/run_papa_sweep.py): layout, results, console,
resuming, staleness.

End-to-end tests run the sweep as a subprocess on the bundled MiniLM and the synthetic repeat task with a
tiny budget (32 train / 16 eval examples, T=32, 1 epoch, k = 0 and 72): `tiny_sweep` (conftest) runs it
once, the others work on copies of its output.
"""

import csv
import io
import json
import os
import re
import shutil
import sys

import numpy as np
import pytest
import torch
from conftest import TINY_SWEEP, run_command, script

from papa.reporting import plots
from papa.sweep.arguments import parse_sweep_args
from papa.errors import PapaError
from papa.sweep import run_sweep
from papa.sweep.child import StageLine, is_terminal, run_logged
from papa.sweep.defaults import default_static_heads_nums
from papa.reporting.results import build_results, chance_warning, results_csv, results_markdown
from papa.data.tasks import get_task

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
STAGES = ("avgs", "sort", "k_0", "k_72")


def run_sweep_cli(output_dir, *extra, check=True):
    return run_command(script("run_papa_sweep.py") + ["--output_dir", output_dir, *TINY_SWEEP, *extra], check=check)


def ran_stages(stdout):
    """Stage names ("avgs", "sort", "k_0", ...) that the sweep ran (not skipped), from its result lines."""
    ran = []
    for line in stdout.splitlines():
        m = re.match(r"\[sweep\] \d+/\d+ (averaging|ranking|probing with k=(\d+)).*: done in ", line)
        if m:
            ran.append({"averaging": "avgs", "ranking": "sort"}.get(m.group(1), f"k_{m.group(2)}"))
    return ran


def stamp_mtimes(output_dir):
    return {s: os.stat(output_dir / s / "stage.json").st_mtime_ns for s in STAGES}


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def assert_valid_png(path):
    with open(path, "rb") as f:
        assert f.read(8) == PNG_SIGNATURE, f"{path} is not a PNG"
    import matplotlib.image

    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


# ----------------------------------------------------------------------------- pure helpers


def test_default_static_heads_nums():
    assert default_static_heads_nums(72) == [0, 36, 63, 68, 72]
    assert default_static_heads_nums(144) == [0, 72, 126, 135, 144]
    assert default_static_heads_nums(1) == [0, 1]
    with pytest.raises(PapaError):
        default_static_heads_nums(0)


def test_main_metrics_come_from_the_registry():
    assert get_task("CoLA").main_metrics == ("matthews_correlation",)
    assert get_task("sst-2").main_metrics == ("accuracy",)
    assert get_task("mrpc").main_metrics[0] == "f1"
    assert get_task("stsb").main_metrics[0] == "pearson"
    assert get_task("mnli").main_metrics == ("accuracy", "mnli-mm_accuracy")
    assert get_task("ner").main_metrics == ("f1",)


def test_results_table_from_hand_made_eval_results(tmp_path):
    k_results = {
        0: {"eval_accuracy": 0.8, "eval_f1": 0.5, "eval_combined_score": 0.65, "eval_loss": 0.4,
            "eval_runtime": 1.0, "eval_samples_per_second": 9.0, "eval_steps_per_second": 1.0,
            "eval_samples": 10, "epoch": 3.0},
        72: {"eval_accuracy": 0.6, "eval_f1": 0.55, "eval_combined_score": 0.575, "eval_loss": 0.7, "epoch": 3.0},
        36: {"eval_accuracy": 0.8, "eval_f1": 0.25, "eval_combined_score": 0.525, "eval_loss": 0.5},
    }
    columns, rows = build_results(k_results, get_task("mrpc"), 72)
    # main metrics first, then the rest; no runtime/samples/loss/epoch; relative change of the main ones
    assert columns == ["k", "fraction_constant", "eval_f1", "eval_accuracy", "eval_combined_score",
                       "rel_change_eval_f1", "rel_change_eval_accuracy"]
    assert [r["k"] for r in rows] == [0, 36, 72]
    assert [r["fraction_constant"] for r in rows] == [0.0, 0.5, 1.0]
    assert rows[0]["rel_change_eval_f1"] == 0 and rows[0]["rel_change_eval_accuracy"] == 0
    assert rows[1]["rel_change_eval_f1"] == pytest.approx(-0.5)        # (0.25 - 0.5) / 0.5
    assert rows[2]["rel_change_eval_f1"] == pytest.approx(0.1)         # (0.55 - 0.5) / 0.5
    assert rows[2]["rel_change_eval_accuracy"] == pytest.approx(-0.25)  # (0.6 - 0.8) / 0.8

    text = results_csv(columns, rows)
    (tmp_path / "r.csv").write_text(text)
    parsed = read_csv(tmp_path / "r.csv")
    assert float(parsed[2]["rel_change_eval_accuracy"]) == pytest.approx(-0.25)
    md = results_markdown(columns, rows, "title", 72)
    assert "| 72 | 1.000 | 0.5500 | 0.6000 | 0.5750 | +10.0% | -25.0% |" in md
    assert "accuracy change vs k=0" in md and "percent" in md


def test_results_table_negative_and_zero_reference():
    # a negative reference (MCC) divides by its magnitude; a zero one leaves the change undefined
    columns, rows = build_results({0: {"eval_matthews_correlation": -0.2}, 8: {"eval_matthews_correlation": -0.1}},
                                  get_task("cola"), 16)
    assert rows[1]["rel_change_eval_matthews_correlation"] == pytest.approx(0.5)
    columns, rows = build_results({0: {"eval_matthews_correlation": 0.0}, 8: {"eval_matthews_correlation": 0.1}},
                                  get_task("cola"), 16)
    assert rows[1]["rel_change_eval_matthews_correlation"] is None
    assert "–" in results_markdown(columns, rows, "t", 16)
    # no k=0 run: no reference
    columns, rows = build_results({8: {"eval_accuracy": 0.7}}, get_task("sst2"), 16)
    assert rows[0]["rel_change_eval_accuracy"] is None


def test_chance_warning():
    repeat, cola, sst2 = get_task("repeat"), get_task("cola"), get_task("sst2")
    _, rows = build_results({0: {"eval_accuracy": 0.52}, 72: {"eval_accuracy": 0.5}}, repeat, 72)
    warning = chance_warning(repeat, rows)
    assert warning and "chance (0.5)" in warning
    assert "**Warning:**" in results_markdown(["k"], [], "t", 72, warning)
    _, rows = build_results({0: {"eval_accuracy": 0.8}, 72: {"eval_accuracy": 0.5}}, repeat, 72)
    assert chance_warning(repeat, rows) is None
    _, rows = build_results({0: {"eval_matthews_correlation": 0.01}}, cola, 72)
    assert chance_warning(cola, rows)  # MCC: chance is 0
    _, rows = build_results({0: {"eval_accuracy": 0.52}}, sst2, 72)
    assert chance_warning(sst2, rows) is None  # real dev sets are not balanced: chance unknown


def test_plots_write_valid_pngs(tmp_path):
    plots.plot_results([0, 36, 72], [0.9, None, 0.6], "accuracy", 72, "model on task", tmp_path / "r.png")
    plots.plot_lambdas(np.arange(12.0).reshape(3, 4), tmp_path / "l.png")
    avgs = torch.rand(3, 4, 8, 8)
    plots.plot_constant_matrices(avgs, [[2, 1], [0, 0], [1, 3]], tmp_path / "c.png")
    for name in ("r.png", "l.png", "c.png"):
        assert_valid_png(tmp_path / name)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_a_bound_on_its_value_up_to_rounding_plots(tmp_path):
    """A bootstrap bound equal to the point estimate but for the last bit made a negative error bar, which matplotlib
    refuses (a sweep on 2 held-out blocks stopped at its figure)."""
    value, low = -0.3902586958016675, -0.3902586958016673
    assert 100 * value - 100 * low < 0  # the bar as it was computed
    plots.plot_differences([0, 36], {"uniform": [(0.0, 0.0, 0.0), (value, low, -0.2)]}, tmp_path / "d.png",
                           "model on task", 72)
    assert_valid_png(tmp_path / "d.png")
    assert plots.error_bars(np.array([1.0]), np.array([1.0 + 1e-15]), np.array([2.0]))[0].tolist() == [0.0]


@pytest.mark.parametrize("argv, message", [
    (["--task_name", "nope"], "unknown task"),
    (["--static_heads_nums", "0", "99"], "outside 0..72"),
    (["--num_train_epochs", "0"], "must be positive"),
    (["--static_heads_num", "3"], "cannot be passed through"),
    (["--extra_args=--static_heads_num 3"], "cannot be passed through"),
    (["--not_a_trainer_flag", "1"], "would reject these flags.*not_a_trainer_flag"),
    (["--weight_decay", "abc"], "would reject these flags.*weight_decay"),
])
def test_bad_input_raises_before_any_stage(tmp_path, argv, message):
    with pytest.raises(PapaError, match=message):
        args, passthrough = parse_sweep_args(["--output_dir", str(tmp_path / "o"), *argv])
        run_sweep(args, get_task(args.task_name), passthrough)
    assert not (tmp_path / "o" / "avgs").exists()


def test_bad_input_on_the_command_line_is_one_clear_error(tmp_path):
    proc = run_command(script("run_papa_sweep.py") + ["--output_dir", tmp_path / "o", "--task_name", "nope"],
                       check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: unknown task 'nope'") and "Traceback" not in proc.stderr


def test_a_stage_process_is_logged_and_its_progress_kept_out_of_the_log(tmp_path):
    child = ("import sys; print('[papa-progress] 1/2'); print('[papa] working'); print('oops', file=sys.stderr); "
             "print('[papa-progress] 2/2'); sys.exit(3)")
    progress, echoed = [], []
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    returncode, tail = run_logged([sys.executable, "-c", child], env, tmp_path / "log.txt",
                                  lambda done, total: progress.append((done, total)), echoed.append)
    assert returncode == 3 and progress == [(1, 2), (2, 2)]
    log = (tmp_path / "log.txt").read_text().splitlines()
    assert log[0].startswith("$ ") and log[1:] == ["", "[papa] working", "oops"]
    assert tail == log[-2:] and echoed == ["[papa] working\n", "oops\n"]


@pytest.mark.slow
def test_a_papa_stage_runs_as_a_fork_of_the_preloaded_server(tmp_path, monkeypatch):
    """`python -m papa.cli.*` stages are forks of papa.fork_server: they must still get the stage's
    environment, working folder and argv, and their whole output on the log, as a subprocess would."""
    from papa import fork_server

    if fork_server.context() is None:
        pytest.skip("no forkserver start method on this platform (stages are subprocesses)")
    monkeypatch.chdir(tmp_path)
    progress = []
    env = dict(os.environ, PAPA_PROGRESS="1")
    command = [sys.executable, "-m", "papa.cli.glue_avgs", "--task_name", "repeat", "--max_length", "32",
               "--max_train_samples", "8", "--per_device_train_batch_size", "4", "--output_dir", "avgs"]
    returncode, tail = run_logged(command, env, tmp_path / "log.txt", lambda *p: progress.append(p))
    assert returncode == 0, tail
    assert (tmp_path / "avgs" / "avgs.pt").is_file()  # the relative --output_dir, in this test's folder
    assert progress and progress[-1] == (2, 2)  # PAPA_PROGRESS=1 reached the stage: markers, parsed
    log = (tmp_path / "log.txt").read_text()
    assert "[papa] wrote avgs.pt" in log and "[papa-progress]" not in log

    bad = [sys.executable, "-m", "papa.cli.glue_avgs", "--task_name", "repeat", "--max_length", "32"]  # no --output_dir
    returncode, tail = run_logged(bad, env, tmp_path / "bad.txt", lambda *p: None)
    assert returncode == 2 and tail[-1].startswith("error: ") and "--output_dir" in tail[-1]


def test_stage_line_on_a_terminal_and_elsewhere():
    assert not is_terminal(io.StringIO())  # a pipe, a file, a CI log: start and result lines
    for live in (True, False):
        stream = io.StringIO()
        line = StageLine("[sweep] 1/2 ranking heads", stream=stream, live=live)
        line.progress(3, 4)
        line.end("done in 5s")
        text = stream.getvalue()
        assert text.endswith("[sweep] 1/2 ranking heads: done in 5s\n")
        assert ("75%" in text) == live  # a bar on a terminal only
        assert text.startswith("[sweep] 1/2 ranking heads ...\n") != live  # elsewhere: a start line


# ----------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_sweep_layout_and_results(tiny_sweep):
    out, proc = tiny_sweep
    assert ran_stages(proc.stdout) == list(STAGES)
    for stage in STAGES:
        assert (out / stage / "stage.json").is_file()
        log = (out / stage / "log.txt").read_text()
        assert log.startswith("$ ") and " -m papa.cli." in log.splitlines()[0]  # the command, then its output
        assert "[papa] " in log and "[papa-progress]" not in log
    assert (out / "avgs" / "avgs.pt").is_file()
    assert (out / "sort" / "sorted_heads.json").is_file() and (out / "sort" / "lambdas.npy").is_file()
    stamp = json.loads((out / "sort" / "stage.json").read_text())
    assert stamp["fingerprint"]["argv"][0] == "run_papa_glue.py"  # the original script, however it was run
    assert "--static_heads_dir" in stamp["fingerprint"]["argv"] and "<output_dir>/avgs" in stamp["fingerprint"]["argv"]

    rows = read_csv(out / "results.csv")
    assert [int(r["k"]) for r in rows] == [0, 72]
    assert [float(r["fraction_constant"]) for r in rows] == [0.0, 1.0]
    assert float(rows[0]["rel_change_eval_accuracy"]) == 0.0
    for row, k in zip(rows, (0, 72)):
        with open(out / f"k_{k}" / "eval_results.json") as f:
            expected = json.load(f)["eval_accuracy"]
        assert float(row["eval_accuracy"]) == expected
        assert 0.0 <= expected <= 1.0
    change = (float(rows[1]["eval_accuracy"]) - float(rows[0]["eval_accuracy"])) / float(rows[0]["eval_accuracy"])
    assert float(rows[1]["rel_change_eval_accuracy"]) == pytest.approx(change)
    assert not any(c.endswith(("runtime", "loss", "epoch", "samples")) for c in rows[0])

    md = (out / "results.md").read_text()
    assert "all-MiniLM-L6-v2" in md and "repeat" in md
    first_table = md.split("## ")[0]  # the results table; the claims table follows under its heading
    assert len([line for line in first_table.splitlines() if line.startswith("|")]) == 4  # header, rule, 2 rows
    assert "## Claims" in md
    for name in ("results.png", "lambdas.png", "constant_matrices.png"):
        assert_valid_png(out / name)
    assert not list(out.rglob("*.tmp"))


@pytest.mark.slow
def test_console_shows_only_the_sweep(tiny_sweep):
    """One line per stage, the results table and where the files are: nothing from the stages themselves."""
    out, proc = tiny_sweep
    assert proc.stderr == ""
    lines = [line for line in proc.stdout.splitlines() if line]
    table = (out / "results.md").read_text().splitlines()
    own = [line for line in lines if line.startswith("[sweep] ")]
    assert [line for line in lines if line not in own] == [line for line in table if line]
    # not a terminal: a start line and a result line per stage, no bar, no command line
    assert len([line for line in own if re.match(r"\[sweep\] \d/4 .* \.\.\.$", line)]) == 4
    assert len([line for line in own if re.search(r": done in \d+s$", line)]) == 4
    assert own[-1].startswith("[sweep] finished in") and str(out) in own[-1] and "results.png" in own[-1]
    warnings = [line for line in own if line.startswith("[sweep] warning:")]  # a k=0 probe near chance
    assert len(own) == 1 + 8 + len(warnings) + 1


@pytest.mark.slow
def test_rerun_skips_everything(tiny_sweep, tmp_path):
    out, _ = tiny_sweep
    copy = tmp_path / "moved"  # a moved sweep folder stays valid: paths are not part of the fingerprint
    shutil.copytree(out, copy)
    before = stamp_mtimes(copy)
    proc = run_sweep_cli(copy)
    assert ran_stages(proc.stdout) == []
    assert proc.stdout.count("up to date, skipped") == len(STAGES)
    assert stamp_mtimes(copy) == before
    assert (copy / "results.csv").read_text() == (out / "results.csv").read_text()


@pytest.mark.slow
def test_unfinished_stages_are_redone_and_reproduce_their_outputs(tiny_sweep, tmp_path):
    out, _ = tiny_sweep
    copy = tmp_path / "s"
    shutil.copytree(out, copy)
    before = stamp_mtimes(copy)
    (copy / "sort" / "eval_results.json").unlink()  # an output gone (as if killed mid-way): not done
    shutil.rmtree(copy / "k_72")  # a deleted k: redone, alone
    proc = run_sweep_cli(copy)
    # the ranking run rewrites sorted_heads.json with the same content (same seed and avgs.pt); fingerprints
    # hash contents, so k=0 stays up to date
    assert ran_stages(proc.stdout) == ["sort", "k_72"]
    after = stamp_mtimes(copy)
    assert all(after[s] == before[s] for s in ("avgs", "k_0"))
    # same seed, same inputs: the redone runs reproduce their outputs
    for name in ("lambdas.npy", "sorted_heads.json"):
        assert (copy / "sort" / name).read_bytes() == (out / "sort" / name).read_bytes()
    assert json.loads((copy / "sort" / "eval_results.json").read_text())["eval_accuracy"] == \
        json.loads((out / "sort" / "eval_results.json").read_text())["eval_accuracy"]
    assert read_csv(copy / "results.csv") == read_csv(out / "results.csv")


@pytest.mark.slow
def test_a_failing_stage_stops_the_sweep_cleanly(tiny_sweep, tmp_path):
    out, _ = tiny_sweep
    copy = tmp_path / "s"
    shutil.copytree(out, copy)
    shutil.rmtree(copy / "sort")
    (copy / "avgs" / "avgs.pt").write_bytes(b"not a tensor")  # the ranking run cannot read it
    proc = run_sweep_cli(copy, check=False)
    assert proc.returncode == 2
    assert "avgs.pt is not a readable tensor file" in proc.stderr  # the stage's own message, from its log
    assert f"last lines of {copy / 'sort' / 'log.txt'}" in proc.stderr
    last = proc.stderr.rstrip().splitlines()[-1]
    assert last.startswith("error: ranking heads") and str(copy / "sort" / "log.txt") in last
    assert "Traceback" not in proc.stderr
    assert not (copy / "sort" / "stage.json").exists()  # no stamp: the next run redoes it
    assert (copy / "avgs" / "stage.json").is_file()
    # the results of the earlier run described stages now being redone: gone, not left to be read as current
    assert (out / "results.csv").is_file() and not list(copy.glob("results*")) and not (copy / "lambdas.png").exists()


@pytest.mark.slow
def test_changed_avgs_redoes_dependent_stages(tiny_sweep, tmp_path):
    out, _ = tiny_sweep
    copy = tmp_path / "s"
    shutil.copytree(out, copy)
    avgs = torch.load(copy / "avgs" / "avgs.pt")
    torch.save(torch.flip(avgs, dims=[1]), copy / "avgs" / "avgs.pt")  # different constant matrices
    proc = run_sweep_cli(copy, "--static_heads_nums", "0")  # (k=0 only, to keep the test short)
    # the averaging stage itself is up to date (its own inputs did not change); everything after it redoes
    assert ran_stages(proc.stdout) == ["sort", "k_0"]
    assert "inputs changed" in proc.stdout


@pytest.mark.slow
def test_changed_epochs_redo_the_probing_runs(tiny_sweep, tmp_path):
    out, _ = tiny_sweep
    copy = tmp_path / "s"
    shutil.copytree(out, copy)
    before = stamp_mtimes(copy)
    # (only k=0 requested, to keep the test short; the sort run keeps its 1 epoch)
    proc = run_sweep_cli(copy, "--num_train_epochs", "2", "--static_heads_nums", "0")
    assert ran_stages(proc.stdout) == ["k_0"]
    after = stamp_mtimes(copy)
    assert all(after[s] == before[s] for s in ("avgs", "sort", "k_72"))
    with open(copy / "k_0" / "eval_results.json") as f:
        assert json.load(f)["epoch"] == 2.0
    assert [int(r["k"]) for r in read_csv(copy / "results.csv")] == [0]
