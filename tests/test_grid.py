"""Several models x tasks in one sweep (papa.sweep.grid), its summary (papa.reporting.summary) and the controls'
rows in a sweep's results.

The tables, means and figures are checked on hand-made eval_results; one end-to-end grid run (the
repeat pair seeded from the tiny sweep of test_sweep.py, plus a CoLA pair whose training file is
broken) checks the folders, the controls' stages, a failing pair and resuming.
"""

import csv
import dataclasses
import io
import json
import math
import os
import shutil

import pytest
import torch
from conftest import TINY_SWEEP, run_command, script
from test_sweep import assert_valid_png

from papa.sweep.arguments import parse_sweep_args
from papa.errors import PapaError
from papa.sweep import run_grid
from papa.sweep.grid import model_folder_name
from papa.data.task_folders import resolve_data_dir
from papa.reporting.results import Results, add_control_columns, build_results, controls_markdown, times_markdown
from papa.sweep.run import prepare_sweep
from papa.reporting.summary import (PairOutcome, half_k, standard_error, summary_markdown, summary_panels, summary_rows,
                                write_summary)
from papa.data.tasks import get_task

MODEL = "all-MiniLM-L6-v2"

# ----------------------------------------------------------------------------- --data_dir as a root


def make_root(tmp_path):
    root = tmp_path / "data"
    (root / "CoLA").mkdir(parents=True)  # directly under the root
    (root / "glue" / "SST-2").mkdir(parents=True)  # one level down
    (root / "conll2003").mkdir()
    (root / "glue" / "mrpc").mkdir()  # another spelling of MRPC
    return root


def test_data_dir_root_resolution(tmp_path):
    root = make_root(tmp_path)
    assert resolve_data_dir(root, get_task("cola"), True) == str(root / "CoLA")
    assert resolve_data_dir(root, get_task("sst2"), True) == str(root / "glue" / "SST-2")
    assert resolve_data_dir(root, get_task("mrpc"), True) == str(root / "glue" / "mrpc")
    for token_task in ("ner", "pos", "chunk"):
        assert resolve_data_dir(root, get_task(token_task), True) == str(root / "conll2003")
    assert resolve_data_dir(root, get_task("repeat"), True) is None  # built in: no data
    for several in (True, False):  # lm reads --train_file/--validation_file, never a task folder
        assert resolve_data_dir(root, get_task("lm"), several) is None
    assert resolve_data_dir(None, get_task("cola"), True) is None  # the hub, when online
    with pytest.raises(PapaError) as err:
        resolve_data_dir(root, get_task("rte"), True)
    assert f"looked for {root / 'RTE'} and {root / '*' / 'RTE'}" in str(err.value)
    (root / "more" / "SST-2").mkdir(parents=True)
    with pytest.raises(PapaError, match="sst2 has several folders"):
        resolve_data_dir(root, get_task("sst2"), True)
    with pytest.raises(PapaError, match="is not a folder"):
        resolve_data_dir(root / "nope", get_task("cola"), True)


def test_one_task_keeps_its_data_dir(tmp_path):
    root = make_root(tmp_path)
    (root / "CoLA" / "train.tsv").write_text("")
    # the task's own folder, as before the grid; a root is searched; anything else is left for the stage to judge
    assert resolve_data_dir(root / "CoLA", get_task("cola"), False) == str(root / "CoLA")
    assert resolve_data_dir(root, get_task("cola"), False) == str(root / "CoLA")
    assert resolve_data_dir(root, get_task("rte"), False) == str(root)


def test_bad_grid_input_stops_before_any_stage(tmp_path):
    out = tmp_path / "out"
    for folder in ("a/m", "b/m"):
        (tmp_path / folder).mkdir(parents=True)
    cases = [
        (["--task_name", "repeat", "nope"], "unknown task 'nope'"),
        (["--task_name", "repeat", "cola", "--train_file", str(tmp_path / "t.tsv")], "--train_file names one task's"),
        (["--model_name_or_path", str(tmp_path / "a" / "m"), str(tmp_path / "b" / "m")], "share the folder 'm'"),
        (["--task_name", "repeat", "rte", "--data_dir", str(make_root(tmp_path))], "has no folder for rte"),
        (["--model_name_or_path", str(tmp_path / "missing"), "bundled", "--task_name", "repeat"],
         "no such folder: .*missing"),
        (["--model_name_or_path", str(tmp_path), "bundled", "--task_name", "repeat"],
         f"{tmp_path.name} x repeat: cannot load the config"),
        (["--task_name", "repeat", "cola", "--static_heads_nums", "0", "99"], "outside 0..72"),
    ]
    for argv, message in cases:
        with pytest.raises(PapaError, match=message):
            run_grid(*parse_sweep_args(["--output_dir", str(out), *argv]))
        assert not out.exists()
    assert model_folder_name(None) == MODEL and model_folder_name("org/bert-base/") == "bert-base"


# ----------------------------------------------------------------------------- results and summary, by hand


def outcome(task_name, by_variant, total=72, controls=(), samples=100, model="m"):
    """A PairOutcome from hand-made scores: {variant: {k: score}}, PAPA's under "PAPA"."""
    task = get_task(task_name)
    metric = f"eval_{task.main_metrics[0]}"
    columns, rows = build_results({k: {metric: v} for k, v in by_variant["PAPA"].items()}, task, total)
    control_results = {c: {k: {metric: v} for k, v in by_variant[c].items()} for c in controls}
    columns, rows = add_control_columns(columns, rows, control_results, task)
    ks = sorted(by_variant["PAPA"])
    return PairOutcome(model, task, total, ks, tuple(controls), Results(columns, rows, "", None, samples))


def test_control_columns_and_tables():
    o = outcome("sst2", {"PAPA": {0: 0.8, 36: 0.78, 72: 0.6}, "uniform": {0: 0.8, 36: 0.7, 72: 0.5},
                         "random_order": {0: 0.8, 36: 0.74, 72: 0.6}}, controls=("uniform", "random_order"))
    columns, rows = o.results.columns, o.results.rows
    assert columns[-4:] == ["uniform_eval_accuracy", "rel_change_uniform_eval_accuracy",
                            "random_order_eval_accuracy", "rel_change_random_order_eval_accuracy"]
    assert rows[1]["rel_change_uniform_eval_accuracy"] == pytest.approx((0.7 - 0.8) / 0.8)
    assert rows[2]["rel_change_random_order_eval_accuracy"] == pytest.approx(-0.25)  # against PAPA's k=0
    md = controls_markdown(rows, o.task, o.controls)
    assert "| k | constant heads (fraction) | PAPA | uniform | random order |" in md
    assert "| 36 | 0.500 | 0.7800 (-2.5%) | 0.7000 (-12.5%) | 0.7400 (-7.5%) |" in md
    times = times_markdown([("avgs", 12.04), ("k_0", None), ("k_36", 30.0)])
    assert "- avgs: 12.0 s" in times and "- k_0: –" in times and "- total: 42.0 s" in times


def test_standard_errors():
    assert standard_error("accuracy", 0.8, 100) == pytest.approx(0.04)
    assert standard_error("mnli-mm_accuracy", 0.5, 25) == pytest.approx(0.1)
    assert standard_error("matthews_correlation", 0.6, 66) == pytest.approx(math.sqrt(0.64 / 64))
    assert standard_error("f1", 0.9, 100) is None and standard_error("accuracy", 0.9, None) is None
    assert [half_k(n) for n in (72, 144, 9, 1)] == [36, 72, 5, 1]


def hand_made_grid():
    cola = outcome("cola", {"PAPA": {0: 0.4, 36: 0.3, 72: 0.1}, "uniform": {0: 0.4, 36: 0.2, 72: 0.0}},
                   controls=("uniform",), samples=1043)
    sst2 = outcome("sst2", {"PAPA": {0: 0.8, 36: 0.84, 72: 0.6}, "uniform": {0: 0.8, 36: 0.76, 72: 0.4}},
                   controls=("uniform",), samples=872)
    failed = PairOutcome("m", get_task("mrpc"), 72, [0, 36, 72], ("uniform",), error="ranking heads failed: boom")
    big = outcome("cola", {"PAPA": {0: 0.5, 72: 0.45, 144: 0.25}}, total=144, model="big")
    return [cola, sst2, failed, big]


def test_a_pair_at_chance_is_left_out_of_the_means(tmp_path):
    """+300% of an MCC of 0.01 is noise: a pair whose k=0 probe is at chance (its sweep warned) is listed, not averaged."""
    cola = outcome("cola", {"PAPA": {0: 0.01, 36: 0.02, 72: 0.04}}, samples=500)
    cola.results = dataclasses.replace(cola.results, warning="at k=0 ... the probe learned (almost) nothing")
    sst2 = outcome("sst2", {"PAPA": {0: 0.8, 36: 0.78, 72: 0.7}}, samples=500)
    md = summary_markdown([cola, sst2])
    assert "| m | PAPA | -2.5% | -12.5% | 1 of 2 |" in md  # sst2's changes alone
    assert "| cola (k=0 at chance: not in the means) | matthews_correlation | 500 |" in md
    assert "| mean across tasks (PAPA) | | | | -2.5% | -12.5% |" in md
    assert [list(tasks) for _, tasks in summary_panels([cola, sst2])] == [["sst2"]]  # nor in the figure
    write_summary(str(tmp_path), [cola, sst2])
    assert_valid_png(tmp_path / "summary.png")
    write_summary(str(tmp_path), [cola])  # nothing to plot: no figure, and no stale one
    assert not (tmp_path / "summary.png").exists() and (tmp_path / "summary.md").is_file()


def test_summary_from_hand_made_results(tmp_path):
    outcomes = hand_made_grid()
    rows = summary_rows(outcomes)
    assert len(rows) == 2 * 2 * 3 + 1 + 3  # m: 2 tasks x 2 variants x 3 k, the failed pair; big: 3 k
    row = next(r for r in rows if (r["model"], r["task"], r["variant"], r["k"]) == ("m", "cola", "uniform", 36))
    assert row["score"] == 0.2 and row["rel_change"] == pytest.approx(-0.5) and row["fraction_constant"] == 0.5
    assert row["eval_samples"] == 1043 and row["se"] == pytest.approx(math.sqrt((1 - 0.04) / 1041))
    assert next(r for r in rows if r["status"] == "failed") == {
        "model": "m", "task": "mrpc", "status": "failed", "metric": "f1", "error": "ranking heads failed: boom"}

    md = summary_markdown(outcomes)
    # headline, per model: the mean over finished tasks of the change at ½ and at all heads
    papa_half, papa_all = ((0.3 - 0.4) / 0.4 + (0.84 - 0.8) / 0.8) / 2, ((0.1 - 0.4) / 0.4 + (0.6 - 0.8) / 0.8) / 2
    assert f"| m | PAPA | {100 * papa_half:+.1f}% | {100 * papa_all:+.1f}% | 2 of 3 |" in md
    assert "| m | uniform | -27.5% | -75.0% | 2 of 3 |" in md
    assert "| big | PAPA | -10.0% | -50.0% | 1 of 1 |" in md  # its own ½ (72 of 144) and all (144)
    assert "| cola | matthews_correlation | 1043 | 0.4000 ± 0.0284 | 0.3000 (-25.0%) | 0.1000 (-75.0%) |" in md
    assert "| sst2, uniform | accuracy | 872 | (same) | 0.7600 (-5.0%) | 0.4000 (-50.0%) |" in md
    assert f"| mean across tasks (PAPA) | | | | {100 * papa_half:+.1f}% | {100 * papa_all:+.1f}% |" in md
    assert "| mrpc | failed: ranking heads failed: boom |" in md and "- m × mrpc: ranking heads failed: boom" in md
    assert "| task | metric | n | k=0 (± SE) | k=72 (0.50) | k=144 (1.00) |" in md

    write_summary(str(tmp_path), outcomes)
    parsed = list(csv.DictReader(io.StringIO((tmp_path / "summary.csv").read_text())))
    assert len(parsed) == len(rows) and float(parsed[0]["score"]) == 0.4
    assert (tmp_path / "summary.md").read_text() == md
    assert_valid_png(tmp_path / "summary.png")
    assert not list(tmp_path.rglob("*.tmp"))


# ----------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def grid_run(tiny_sweep, tmp_path_factory):
    """repeat x cola on the bundled MiniLM with every control: the repeat pair is the tiny sweep (finished
    without controls), the CoLA pair's train.tsv is broken, so it fails in its first stage."""
    out = tmp_path_factory.mktemp("grid") / "out"
    shutil.copytree(tiny_sweep[0], out / MODEL / "repeat")
    root = tmp_path_factory.mktemp("data")
    (root / "CoLA").mkdir()
    (root / "CoLA" / "train.tsv").write_text("not\ta CoLA line\n")
    argv = ["--output_dir", out, "--task_name", "repeat", "cola", "--data_dir", root,
            "--controls", "uniform", "random_order", "mean_output", *TINY_SWEEP]
    return out, argv, run_command(script("run_papa_sweep.py") + argv, check=False)


def stage_lines(stdout, pair):
    """The result lines of one pair's stages (skipped or done), from the grid's console."""
    part = stdout.split(f"x {pair}\n", 1)[1].split("\n[grid] ", 1)[0]
    return [line for line in part.splitlines() if ": up to date, skipped" in line or ": done in " in line]


@pytest.mark.slow
def test_grid_runs_every_pair_and_reports_the_failing_one(grid_run, tiny_sweep):
    out, _, proc = grid_run
    assert proc.returncode == 2
    last = proc.stderr.rstrip().splitlines()[-1]
    assert last.startswith("error: 1 of 2 sweeps failed (all-MiniLM-L6-v2 (bundled) x cola)")
    assert "Traceback" not in proc.stderr
    # the finished pair: only the averaging pass redone (it now also writes mean_outputs.pt, and avgs.pt to the
    # same bytes), so the ranking and PAPA's probing runs stay up to date; the controls' runs are new
    lines = stage_lines(proc.stdout, "repeat")
    assert [line.rsplit(": ", 1)[1] for line in lines if "skipped" in line] == ["up to date, skipped"] * 3
    ran = [line for line in lines if "done in" in line]
    assert len(ran) == 3 and "averaging" in ran[0] and "uniform control: k=72" in ran[1] and "mean output" in ran[2]
    pair = out / MODEL / "repeat"
    assert (pair / "avgs" / "avgs.pt").read_bytes() == (tiny_sweep[0] / "avgs" / "avgs.pt").read_bytes()
    assert torch.load(pair / "avgs" / "mean_outputs.pt", weights_only=True).shape == (6, 12, 32, 32)
    assert torch.equal(torch.load(pair / "uniform" / "avgs.pt", weights_only=True), torch.ones(6, 12, 32, 32))
    assert (pair / "random_order" / "sorted_heads.json").is_file() and not (pair / "random_k_72").exists()
    config = json.loads((pair / "mean_k_72" / "config.json").read_text())
    assert config["papa"]["head_mode"] == "mean_output" and len(config["papa"]["static_heads"]) == 72

    results = list(csv.DictReader(io.StringIO((pair / "results.csv").read_text())))
    assert [r["k"] for r in results] == ["0", "72"]
    for control, folder in (("uniform", "uniform_k_72"), ("random_order", "k_72"), ("mean_output", "mean_k_72")):
        expected = json.loads((pair / folder / "eval_results.json").read_text())["eval_accuracy"]
        assert float(results[1][f"{control}_eval_accuracy"]) == expected
    md = (pair / "results.md").read_text()
    assert "## Controls: accuracy" in md and "## Stage times" in md and "- uniform_k_72: " in md
    assert_valid_png(pair / "results.png")
    assert len(list((pair / "tokenized").iterdir())) == 2  # train and validation, tokenised once

    summary = list(csv.DictReader(io.StringIO((out / "summary.csv").read_text())))
    assert len(summary) == 4 * 2 + 1
    failed = summary[-1]
    assert (failed["task"], failed["status"]) == ("cola", "failed")
    assert "train.tsv:1: expected 4 tab-separated fields, found 2" in failed["error"]  # the stage's own cause
    assert "## Failed pairs" in (out / "summary.md").read_text()
    assert_valid_png(out / "summary.png")
    assert not list(out.rglob("*.tmp"))


@pytest.mark.slow
def test_a_resumed_grid_skips_the_finished_pair(grid_run):
    """What a re-run decides, stage by stage, without running it: the finished pair is skipped whole, the
    failed one redone."""
    out, argv, _ = grid_run
    args, passthrough = parse_sweep_args([str(a) for a in argv])
    for task_name, done in (("repeat", True), ("cola", False)):
        data_dir = None if task_name == "repeat" else os.path.join(args.data_dir, "CoLA")
        pair_args = dataclasses.replace(args, task_name=task_name, output_dir=str(out / MODEL / task_name),
                                        data_dir=data_dir)
        prepared = prepare_sweep(pair_args, get_task(task_name), passthrough)
        reasons = [stage.why_not_done(stage.fingerprint(str(out / MODEL / task_name))) for stage in prepared.stages]
        assert (reasons == [None] * len(reasons)) == done, reasons
