"""The one-command sweep (papa.sweep, papa_scripts/run_papa_sweep.py): layout, results, resuming, staleness.

End-to-end tests run the real scripts as subprocesses on the bundled MiniLM and the synthetic
repeat task with a tiny budget (32 train / 16 eval examples, T=32, 1 epoch, k = 0 and 72).
"""

import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from papa import plots
from papa.errors import PapaError
from papa.sweep import (build_results, chance_warning, default_static_heads_nums, main_metrics, results_csv,
                        results_markdown, run_sweep)

REPO = Path(__file__).resolve().parents[1]
SWEEP = REPO / "papa_scripts" / "run_papa_sweep.py"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TINY = ["--max_train_samples", "32", "--max_eval_samples", "16", "--num_train_epochs", "1", "--sort_num_train_epochs", "1",
        "--static_heads_nums", "0", "72", "--max_seq_length", "32",
        "--per_device_eval_batch_size", "16"]  # the last one is passed through to the training runs
STAGES = ("avgs", "sort", "k_0", "k_72")


def run_sweep_cli(output_dir, *extra, check=True):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run([sys.executable, str(SWEEP), "--output_dir", str(output_dir), *TINY, *extra],
                          capture_output=True, text=True, env=env, timeout=600)
    if check:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def ran_stages(stdout):
    """Stage names ("avgs", "sort", "k_0", ...) that the sweep ran (not skipped), from its [sweep] lines."""
    ran = []
    for line in stdout.splitlines():
        m = re.match(r"\[sweep\] \d+/\d+ (.*?) \.\.\.", line)
        if m:
            desc = m.group(1)
            if desc.startswith("averaging"):
                ran.append("avgs")
            elif desc.startswith("ranking"):
                ran.append("sort")
            else:
                ran.append("k_" + re.search(r"k=(\d+)", desc).group(1))
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


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    """One finished tiny sweep, plus the stdout of the run that made it."""
    out = tmp_path_factory.mktemp("sweep") / "out"
    proc = run_sweep_cli(out)
    return out, proc.stdout


# ----------------------------------------------------------------------------- pure helpers


def test_default_static_heads_nums():
    assert default_static_heads_nums(72) == [0, 36, 63, 68, 72]
    assert default_static_heads_nums(144) == [0, 72, 126, 135, 144]
    assert default_static_heads_nums(1) == [0, 1]
    with pytest.raises(PapaError):
        default_static_heads_nums(0)


def test_main_metrics():
    assert main_metrics("CoLA") == ["matthews_correlation"]
    assert main_metrics("sst-2") == ["accuracy"]
    assert main_metrics("mrpc")[0] == "f1"
    assert main_metrics("stsb")[0] == "pearson"
    assert main_metrics("ner") == ["f1"]
    with pytest.raises(PapaError, match="unknown task"):
        main_metrics("nope")


def test_results_table_from_hand_made_eval_results(tmp_path):
    k_results = {
        0: {"eval_accuracy": 0.8, "eval_f1": 0.5, "eval_combined_score": 0.65, "eval_loss": 0.4,
            "eval_runtime": 1.0, "eval_samples_per_second": 9.0, "eval_steps_per_second": 1.0,
            "eval_samples": 10, "epoch": 3.0},
        72: {"eval_accuracy": 0.6, "eval_f1": 0.55, "eval_combined_score": 0.575, "eval_loss": 0.7, "epoch": 3.0},
        36: {"eval_accuracy": 0.8, "eval_f1": 0.25, "eval_combined_score": 0.525, "eval_loss": 0.5},
    }
    columns, rows = build_results(k_results, "mrpc", 72)
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
                                  "cola", 16)
    assert rows[1]["rel_change_eval_matthews_correlation"] == pytest.approx(0.5)
    columns, rows = build_results({0: {"eval_matthews_correlation": 0.0}, 8: {"eval_matthews_correlation": 0.1}},
                                  "cola", 16)
    assert rows[1]["rel_change_eval_matthews_correlation"] is None
    assert "–" in results_markdown(columns, rows, "t", 16)
    # no k=0 run: no reference
    columns, rows = build_results({8: {"eval_accuracy": 0.7}}, "sst2", 16)
    assert rows[0]["rel_change_eval_accuracy"] is None


def test_chance_warning():
    _, rows = build_results({0: {"eval_accuracy": 0.52}, 72: {"eval_accuracy": 0.5}}, "repeat", 72)
    warning = chance_warning("repeat", rows)
    assert warning and "chance (0.5)" in warning
    assert "**Warning:**" in results_markdown(["k"], [], "t", 72, warning)
    _, rows = build_results({0: {"eval_accuracy": 0.8}, 72: {"eval_accuracy": 0.5}}, "repeat", 72)
    assert chance_warning("repeat", rows) is None
    _, rows = build_results({0: {"eval_matthews_correlation": 0.01}}, "cola", 72)
    assert chance_warning("cola", rows)  # MCC: chance is 0
    _, rows = build_results({0: {"eval_accuracy": 0.52}}, "sst2", 72)
    assert chance_warning("sst2", rows) is None  # real dev sets are not balanced: chance unknown


def test_plots_write_valid_pngs(tmp_path):
    plots.plot_results([0, 36, 72], [0.9, None, 0.6], "accuracy", 72, "model on task", tmp_path / "r.png")
    plots.plot_lambdas(np.arange(12.0).reshape(3, 4), tmp_path / "l.png")
    avgs = torch.rand(3, 4, 8, 8)
    plots.plot_constant_matrices(avgs, [[2, 1], [0, 0], [1, 3]], tmp_path / "c.png")
    for name in ("r.png", "l.png", "c.png"):
        assert_valid_png(tmp_path / name)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


@pytest.mark.parametrize("kwargs, message", [
    ({"task_name": "nope"}, "unknown task"),
    ({"static_heads_nums": [0, 99]}, "outside 0..72"),
    ({"num_train_epochs": 0}, "must be positive"),
    ({"extra_args": ["--static_heads_num", "3"]}, "cannot be passed through"),
    ({"extra_args": ["--not_a_trainer_flag", "1"]}, "would reject these flags.*not_a_trainer_flag"),
    ({"extra_args": ["--weight_decay", "abc"]}, "would reject these flags.*weight_decay"),
])
def test_bad_input_raises_before_any_stage(tmp_path, kwargs, message):
    with pytest.raises(PapaError, match=message):
        run_sweep(output_dir=str(tmp_path / "o"), log=lambda m: None, **kwargs)
    assert not (tmp_path / "o" / "avgs").exists()


def test_bad_input_on_the_command_line_is_one_clear_error(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    proc = subprocess.run([sys.executable, str(SWEEP), "--output_dir", str(tmp_path / "o"), "--task_name", "nope"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: unknown task 'nope'") and "Traceback" not in proc.stderr


# ----------------------------------------------------------------------------- end to end


def test_sweep_layout_and_results(sweep_dir):
    out, stdout = sweep_dir
    assert ran_stages(stdout) == list(STAGES)
    assert "[sweep] 3/4 probing with k=0" in stdout
    for stage in STAGES:
        assert (out / stage / "stage.json").is_file()
    assert (out / "avgs" / "avgs.pt").is_file()
    assert (out / "sort" / "sorted_heads.json").is_file() and (out / "sort" / "lambdas.npy").is_file()

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
    assert len([line for line in md.splitlines() if line.startswith("|")]) == 4  # header, rule, 2 rows
    for name in ("results.png", "lambdas.png", "constant_matrices.png"):
        assert_valid_png(out / name)
    assert not list(out.rglob("*.tmp"))


def test_rerun_skips_everything(sweep_dir, tmp_path):
    out, _ = sweep_dir
    copy = tmp_path / "moved"  # a moved sweep folder stays valid: paths are not part of the fingerprint
    shutil.copytree(out, copy)
    before = stamp_mtimes(copy)
    proc = run_sweep_cli(copy)
    assert ran_stages(proc.stdout) == []
    assert proc.stdout.count("up to date, skipped") == len(STAGES)
    assert stamp_mtimes(copy) == before
    assert (copy / "results.csv").read_text() == (out / "results.csv").read_text()


def test_deleting_one_k_redoes_only_that_k(sweep_dir, tmp_path):
    out, _ = sweep_dir
    copy = tmp_path / "s"
    shutil.copytree(out, copy)
    before = stamp_mtimes(copy)
    shutil.rmtree(copy / "k_72")
    proc = run_sweep_cli(copy)
    assert ran_stages(proc.stdout) == ["k_72"]
    after = stamp_mtimes(copy)
    assert all(after[s] == before[s] for s in ("avgs", "sort", "k_0"))
    # same seed, same inputs: the redone run reproduces its metrics
    assert read_csv(copy / "results.csv") == read_csv(out / "results.csv")


def test_an_incomplete_stage_is_redone(sweep_dir, tmp_path):
    out, _ = sweep_dir
    copy = tmp_path / "s"
    shutil.copytree(out, copy)
    (copy / "sort" / "eval_results.json").unlink()  # an output gone (as if killed mid-way): not done
    proc = run_sweep_cli(copy)
    # the redone ranking run rewrites sorted_heads.json with the same content (same seed and avgs.pt);
    # fingerprints hash contents, so the probing runs stay up to date
    assert ran_stages(proc.stdout) == ["sort"]
    assert (copy / "sort" / "eval_results.json").is_file()


def test_a_failing_stage_stops_the_sweep_cleanly(sweep_dir, tmp_path):
    out, _ = sweep_dir
    copy = tmp_path / "s"
    shutil.copytree(out, copy)
    shutil.rmtree(copy / "sort")
    (copy / "avgs" / "avgs.pt").write_bytes(b"not a tensor")  # the ranking run cannot read it
    proc = run_sweep_cli(copy, check=False)
    assert proc.returncode == 2
    assert "avgs.pt is not a readable tensor file" in proc.stderr  # the script's own message
    assert proc.stderr.rstrip().splitlines()[-1].startswith("error: ranking heads")
    assert "Traceback" not in proc.stderr
    assert not (copy / "sort" / "stage.json").exists()  # no stamp: the next run redoes it
    assert (copy / "avgs" / "stage.json").is_file()


def test_changed_avgs_redoes_dependent_stages(sweep_dir, tmp_path):
    out, _ = sweep_dir
    copy = tmp_path / "s"
    shutil.copytree(out, copy)
    avgs = torch.load(copy / "avgs" / "avgs.pt")
    torch.save(torch.flip(avgs, dims=[1]), copy / "avgs" / "avgs.pt")  # different constant matrices
    proc = run_sweep_cli(copy)
    # the averaging stage itself is up to date (its own inputs did not change); everything after it redoes
    assert ran_stages(proc.stdout) == ["sort", "k_0", "k_72"]
    assert "inputs changed" in proc.stdout


def test_changed_epochs_redo_the_probing_runs(sweep_dir, tmp_path):
    out, _ = sweep_dir
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


def test_same_seed_same_metrics(sweep_dir, tmp_path):
    out, _ = sweep_dir
    second = tmp_path / "second"
    run_sweep_cli(second, "--static_heads_nums", "72")  # a second sweep from scratch (k=72 only, for time)
    assert torch.equal(torch.load(second / "avgs" / "avgs.pt"), torch.load(out / "avgs" / "avgs.pt"))
    assert np.array_equal(np.load(second / "sort" / "lambdas.npy"), np.load(out / "sort" / "lambdas.npy"))
    assert (second / "sort" / "sorted_heads.json").read_text() == (out / "sort" / "sorted_heads.json").read_text()
    with open(out / "sort" / "eval_results.json") as a, open(second / "sort" / "eval_results.json") as b:
        assert json.load(a)["eval_accuracy"] == json.load(b)["eval_accuracy"]
    first_row, second_row = read_csv(out / "results.csv")[1], read_csv(second / "results.csv")[0]
    assert first_row["k"] == second_row["k"] == "72"
    assert first_row["eval_accuracy"] == second_row["eval_accuracy"]
    assert not math.isnan(float(second_row["eval_accuracy"]))
