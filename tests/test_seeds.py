"""Seeds in the sweep (--seeds, --rank_per_seed): the stages they lay out, that a finished seed's stages keep
their command lines when a seed is added, and, end to end, that a resumed sweep with an added seed runs only
that seed's stages; the seeds' results (mean, std, intervals) in results.csv and results_per_seed.csv."""

import os

import pytest
from test_controls import flag, plan_and_stages

from papa.sweep.arguments import parse_sweep_args
from papa.errors import PapaError
from papa.data.tasks import get_task


def test_default_layout_is_unchanged_by_the_seed_flags(tmp_path):
    _, plain = plan_and_stages(tmp_path)
    assert list(plain) == ["avgs", "sort", "k_0", "k_36", "k_72"]
    _, seeded = plan_and_stages(tmp_path, "--bootstrap_samples", "50")
    assert {n: s.args for n, s in seeded.items()} == {n: s.args for n, s in plain.items()}


def test_seeds_lay_out_a_run_per_seed(tmp_path):
    plan, stages = plan_and_stages(tmp_path, "--seeds", "1", "2", "--controls", "uniform", "random_order")
    out = plan.output_dir
    assert list(stages) == ["avgs", "sort",
                            "k_0_seed_1", "k_36_seed_1", "k_72_seed_1", "k_0_seed_2", "k_36_seed_2", "k_72_seed_2",
                            "uniform_k_36_seed_1", "uniform_k_72_seed_1", "random_k_36_seed_1",
                            "uniform_k_36_seed_2", "uniform_k_72_seed_2", "random_k_36_seed_2"]
    assert flag(stages["sort"], "--seed") == "1"  # one ranking run, with the first seed
    for name, seed in (("k_36_seed_2", "2"), ("uniform_k_72_seed_1", "1"), ("random_k_36_seed_2", "2")):
        assert flag(stages[name], "--seed") == seed and flag(stages[name], "--output_dir") == f"{out}/{name}"
    assert flag(stages["k_36_seed_2"], "--sorting_heads_dir") == f"{out}/sort"
    assert "seed 2" in stages["k_36_seed_2"].description
    assert flag(stages["avgs"], "--seed") == "42"  # the averages do not depend on the seed: one pass, --seed's


def test_an_added_seed_leaves_the_finished_seeds_stages_alone(tmp_path):
    _, one = plan_and_stages(tmp_path, "--seeds", "1", "--controls", "mean_output")
    _, two = plan_and_stages(tmp_path, "--seeds", "1", "2", "--controls", "mean_output")
    assert set(two) - set(one) == {"k_0_seed_2", "k_36_seed_2", "k_72_seed_2", "mean_k_36_seed_2", "mean_k_72_seed_2"}
    for name, stage in one.items():  # same command line, same inputs: their stamps stay valid
        assert two[name].args == stage.args and two[name].inputs == stage.inputs


def test_rank_per_seed(tmp_path):
    plan, stages = plan_and_stages(tmp_path, "--seeds", "3", "4", "--rank_per_seed", "--controls", "uniform")
    out = plan.output_dir
    assert [n for n in stages if n.startswith("sort")] == ["sort_seed_3", "sort_seed_4"]
    assert flag(stages["sort_seed_4"], "--seed") == "4"
    assert flag(stages["k_36_seed_4"], "--sorting_heads_dir") == f"{out}/sort_seed_4"
    assert f"{out}/sort_seed_3/sorted_heads.json" in stages["uniform_k_72_seed_3"].inputs
    assert flag(stages["uniform_k_72_seed_3"], "--sorting_heads_dir") == f"{out}/sort_seed_3"


@pytest.mark.parametrize("argv, message", [
    (["--rank_per_seed"], "--rank_per_seed ranks per seed of --seeds"),
    (["--seeds"], "expected at least one argument"),
    (["--bootstrap_samples", "0"], "--bootstrap_samples"),
    (["--seeds", "1", "-1"], "--seeds must be between 0 and 4294967295; got -1"),
    (["--seed", str(2**32)], "--seed must be between 0 and 4294967295"),
    (["--seeds", "1", "2", "1"], "--seeds lists 1 more than once: give each seed once"),
    (["--output_dir", __file__], "is a file, not a folder"),
])
def test_bad_seed_flags(argv, message):
    with pytest.raises(PapaError, match=message):
        parse_sweep_args(argv)


# ----------------------------------------------------------------------------- results of several seeds


def fake_sweep(out, seeds, ks=(0, 4, 8), controls=(), n=60, predictions=True, task_name="sst2", rank_per_seed=False):
    """A finished sweep's files without running it: per (run, seed) predictions of an SST-2 probe whose accuracy
    falls with k, their eval_results.json computed from them, and the ranking's artifacts for the figures."""
    import json

    import numpy as np
    import torch

    from papa.runs.metrics import compute_glue_metrics
    from papa.sweep.controls import run_folder
    from papa.sweep.plan import Plan

    task = get_task(task_name)
    plan = Plan(task=task, model_path="m", layers=2, heads_per_layer=4, ks=list(ks), output_dir=str(out),
                max_seq_length=8, num_train_epochs=1.0, sort_num_train_epochs=1.0, learning_rate=1e-3,
                per_device_train_batch_size=4, per_device_eval_batch_size=4, avgs_batch_size=4,
                evaluation_strategy="no", controls=tuple(controls), seed=42,
                seeds=None if seeds is None else tuple(seeds), rank_per_seed=rank_per_seed, bootstrap_samples=200)
    labels = np.random.default_rng(0).integers(0, 2, n)
    made = {}
    for seed, tag in plan.seed_runs:
        for control in (None, *controls):
            for k in ks:
                folder = out / run_folder(control, k, 8, tag)
                if folder.name in made:
                    continue
                rng = np.random.default_rng([seed, k, len(control or "")])
                wrong = rng.random(n) < 0.1 + 0.04 * k + (0.1 if control else 0)
                predicted = np.where(wrong, 1 - labels, labels)
                folder.mkdir(parents=True)
                results = {f"eval_{m}": v for m, v in compute_glue_metrics(task, predicted, labels).items()}
                (folder / "eval_results.json").write_text(json.dumps({**results, "eval_samples": n}))
                if predictions:
                    (folder / "eval_predictions.jsonl").write_text("".join(
                        json.dumps({"index": i, "label": int(y), "prediction": int(p)}) + "\n"
                        for i, (y, p) in enumerate(zip(labels, predicted))))
                made[folder.name] = results["eval_accuracy"]
    (out / "avgs").mkdir()
    torch.save(torch.full((2, 4, 8, 8), 1 / 8), out / "avgs" / "avgs.pt")
    for seed in plan.ranking_seeds:
        sort = out / os.path.basename(plan.ranking_folder(seed))
        sort.mkdir()
        np.save(sort / "lambdas.npy", np.zeros((2, 4)))
        (sort / "sorted_heads.json").write_text(json.dumps([[i // 4, i % 4] for i in range(8)]))
    return plan, made


def test_results_of_several_seeds(tmp_path):
    import csv

    import numpy as np

    from papa.reporting.results import write_results

    plan, made = fake_sweep(tmp_path, [1, 2, 3], controls=("uniform",), rank_per_seed=True)
    results = write_results(plan, "m")
    rows = list(csv.DictReader(open(tmp_path / "results.csv")))
    assert [r["k"] for r in rows] == ["0", "4", "8"] and {r["n_seeds"] for r in rows} == {"3"}
    assert list(rows[0]) == ["k", "fraction_constant", "n_seeds", "eval_accuracy", "eval_accuracy_std",
                             "rel_change_eval_accuracy", "rel_change_eval_accuracy_ci_low",
                             "rel_change_eval_accuracy_ci_high", "uniform_eval_accuracy", "uniform_eval_accuracy_std",
                             "rel_change_uniform_eval_accuracy", "rel_change_uniform_eval_accuracy_ci_low",
                             "rel_change_uniform_eval_accuracy_ci_high", "diff_uniform_eval_accuracy",
                             "diff_uniform_eval_accuracy_ci_low", "diff_uniform_eval_accuracy_ci_high"]
    at = {name: made[name] for name in made}
    for row, k in zip(rows, (0, 4, 8)):
        values = [at[f"k_{k}_seed_{s}"] for s in (1, 2, 3)]
        changes = [(at[f"k_{k}_seed_{s}"] - at[f"k_0_seed_{s}"]) / at[f"k_0_seed_{s}"] for s in (1, 2, 3)]
        assert float(row["eval_accuracy"]) == pytest.approx(np.mean(values))
        assert float(row["eval_accuracy_std"]) == pytest.approx(np.std(values, ddof=1))
        assert float(row["rel_change_eval_accuracy"]) == pytest.approx(np.mean(changes))  # mean of per-seed changes
        low, high = float(row["rel_change_eval_accuracy_ci_low"]), float(row["rel_change_eval_accuracy_ci_high"])
        assert low <= float(row["rel_change_eval_accuracy"]) <= high
    assert (rows[0]["rel_change_eval_accuracy_ci_low"], rows[0]["rel_change_eval_accuracy_ci_high"]) == ("0.0", "0.0")
    assert float(rows[2]["rel_change_eval_accuracy_ci_high"]) < 0  # 30 points worse: clearly real
    uniform = [(at[f"uniform_k_8_seed_{s}"] - at[f"k_0_seed_{s}"]) / at[f"k_0_seed_{s}"] for s in (1, 2, 3)]
    assert float(rows[2]["rel_change_uniform_eval_accuracy"]) == pytest.approx(np.mean(uniform))

    per_seed = list(csv.DictReader(open(tmp_path / "results_per_seed.csv")))
    assert [(r["k"], r["seed"]) for r in per_seed] == [(str(k), str(s)) for k in (0, 4, 8) for s in (1, 2, 3)]
    assert float(per_seed[4]["eval_accuracy"]) == at["k_4_seed_2"]

    md = (tmp_path / "results.md").read_text()
    change, low, high = (100 * float(rows[2][f"rel_change_eval_accuracy{end}"]) for end in ("", "_ci_low", "_ci_high"))
    shown = f"{change:+.1f}% [{low:+.1f}, {high:+.1f}]*"
    assert shown in md and "mean over 3 seeds" in md and "± " in md
    k0_row = next(line for line in md.splitlines() if line.startswith("| 0 |"))
    assert "+0.0% |" in k0_row and "[" not in k0_row  # the reference against itself: no interval shown
    assert "[" in next(line for line in md.splitlines() if line.startswith("| 4 |"))
    assert "## Controls" in md and "uniform" in md
    for figure in ("results.png", "lambdas.png", "constant_matrices.png"):  # the first seed's ranking run's
        assert (tmp_path / figure).read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "sort").exists()
    assert results.n_seeds == 3 and ("rel_change_eval_accuracy", 8) in results.distributions
    before = (tmp_path / "results.csv").read_bytes()
    write_results(plan, "m")
    assert (tmp_path / "results.csv").read_bytes() == before  # the bootstrap is seeded


def test_one_seed_without_predictions_still_writes_its_results(tmp_path):
    """Runs made before eval_predictions.jsonl existed: the values and changes as before, no intervals, a note."""
    import csv

    from papa.reporting.results import write_results

    plan, made = fake_sweep(tmp_path, None, predictions=False)
    write_results(plan, "m")
    rows = list(csv.DictReader(open(tmp_path / "results.csv")))
    assert float(rows[1]["eval_accuracy"]) == made["k_4"] and rows[1]["n_seeds"] == "1"
    assert rows[1]["eval_accuracy_std"] == "" and rows[1]["rel_change_eval_accuracy_ci_low"] == ""
    assert "eval_predictions.jsonl does not exist" in (tmp_path / "results.md").read_text()


def test_grid_summary_columns_and_headline_from_seeded_sweeps(tmp_path):
    import csv

    import numpy as np

    from papa.reporting.results import write_results
    from papa.reporting.summary import PairOutcome, summary_markdown, write_summary

    outcomes = []
    for task_name in ("sst2", "qnli"):
        plan, _ = fake_sweep(tmp_path / task_name, [1, 2], controls=("uniform",), task_name=task_name)
        outcomes.append(PairOutcome("m", plan.task, 8, plan.ks, plan.controls, write_results(plan, "m")))
    write_summary(str(tmp_path), outcomes)
    rows = list(csv.DictReader(open(tmp_path / "summary.csv")))
    assert list(rows[0]) == ["model", "task", "status", "metric", "variant", "k", "fraction_constant", "score", "se",
                             "rel_change", "ci_low", "ci_high", "diff_vs_papa", "diff_ci_low", "diff_ci_high",
                             "eval_samples", "n_seeds", "error"]
    assert len(rows) == 2 * 2 * 3 and {r["n_seeds"] for r in rows} == {"2"}
    for row in rows:
        results = next(o.results for o in outcomes if o.task.name == row["task"])
        table = next(r for r in results.rows if r["k"] == int(row["k"]))
        column = "rel_change_eval_accuracy" if row["variant"] == "PAPA" else "rel_change_uniform_eval_accuracy"
        assert float(row["ci_low"]) == table[f"{column}_ci_low"] and float(row["ci_high"]) == table[f"{column}_ci_high"]

    # the headline: the mean across tasks, with the percentile interval of the mean of the tasks' statistics
    md = summary_markdown(outcomes)
    for variant, column in (("PAPA", "rel_change_eval_accuracy"), ("uniform", "rel_change_uniform_eval_accuracy")):
        cells = []
        for k in (4, 8):
            mean = np.mean([next(r for r in o.results.rows if r["k"] == k)[column] for o in outcomes])
            stats = np.mean([o.results.distributions[(column, k)] for o in outcomes], axis=0)
            low, high = np.percentile(stats, [2.5, 97.5])
            assert high < 0  # a 20-30% loss on 60 examples and 2 seeds per task: real
            cells.append(f"{100 * mean:+.1f}% [{100 * low:+.1f}, {100 * high:+.1f}]*")
        assert f"| m | {variant} | {cells[0]} | {cells[1]} | 2 of 2 | ½: yes; all: yes |" in md
    assert "| sst2, uniform | accuracy | 60 | (same) |" in md and "]*) |" in md
    assert (tmp_path / "summary.png").read_bytes()[:4] == b"\x89PNG"
    # the tasks' resamples are independent: not the same draws
    a, b = (o.results.distributions[("rel_change_eval_accuracy", 8)] for o in outcomes)
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.3


# ----------------------------------------------------------------------------- end to end


def ran(stdout):
    """(k, seed) of the probing stages a sweep ran, and whether it ran the averaging or ranking stage."""
    import re

    probes = re.findall(r"probing with k=(\d+) .*, seed (\d+)\): done in ", stdout)
    return [(int(k), int(s)) for k, s in probes], bool(re.search(r"(averaging|ranking) .*: done in ", stdout))


@pytest.mark.slow
def test_an_added_seed_runs_only_its_stages(tiny_sweep, tmp_path):
    import csv
    import json
    import shutil

    from conftest import TINY_SWEEP, run_command, script

    from papa.runs.predictions import metrics_from_predictions

    out = tmp_path / "s"
    shutil.copytree(tiny_sweep[0], out)  # finished with --seed 42 alone: its averages and ranking are reused

    def sweep(*seeds):
        return run_command(script("run_papa_sweep.py") + ["--output_dir", out, *TINY_SWEEP, "--seeds", *seeds,
                                                          "--bootstrap_samples", "100"]).stdout

    assert ran(sweep("42")) == ([(0, 42), (72, 42)], False)
    stamps = {k: (out / f"k_{k}_seed_42" / "stage.json").stat().st_mtime_ns for k in (0, 72)}
    assert ran(sweep("42", "7")) == ([(0, 7), (72, 7)], False)
    assert stamps == {k: (out / f"k_{k}_seed_42" / "stage.json").stat().st_mtime_ns for k in (0, 72)}
    # the same seed, flags and data as the plain k_<k>/ runs: the same result
    for k in (0, 72):
        plain = json.loads((out / f"k_{k}" / "eval_results.json").read_text())["eval_accuracy"]
        assert json.loads((out / f"k_{k}_seed_42" / "eval_results.json").read_text())["eval_accuracy"] == plain
        metrics = metrics_from_predictions(get_task("repeat"), out / f"k_{k}_seed_7" / "eval_predictions.jsonl")
        assert metrics["accuracy"] == json.loads((out / f"k_{k}_seed_7" / "eval_results.json").read_text())[
            "eval_accuracy"]

    rows = list(csv.DictReader(open(out / "results.csv")))
    assert [(r["k"], r["n_seeds"]) for r in rows] == [("0", "2"), ("72", "2")]
    low, point, high = (float(rows[1][f"rel_change_eval_accuracy{end}"]) for end in ("_ci_low", "", "_ci_high"))
    assert low <= point <= high
    assert len(list(csv.DictReader(open(out / "results_per_seed.csv")))) == 4
    assert json.loads((out / "sweep.json").read_text())["seeds"] == [42, 7]


def test_metric_band_puts_the_interval_on_the_metric_axis():
    from papa.reporting.results import change_text, metric_band

    rows = [{"k": 0, "eval_matthews_correlation": -0.5, "rel_change_eval_matthews_correlation_ci_low": 0.0,
             "rel_change_eval_matthews_correlation_ci_high": 0.0},
            {"k": 8, "rel_change_eval_matthews_correlation_ci_low": -0.2,
             "rel_change_eval_matthews_correlation_ci_high": 0.1},
            {"k": 9}]
    lows, highs = metric_band(rows, "rel_change_eval_matthews_correlation", "eval_matthews_correlation")
    assert lows == [-0.5, pytest.approx(-0.6), None] and highs == [-0.5, pytest.approx(-0.45), None]  # -0.5 ± x·0.5
    assert change_text(-0.013, -0.021, -0.004) == "-1.3% [-2.1, -0.4]*"
    assert change_text(0.02, -0.01, 0.05) == "+2.0% [-1.0, +5.0]" and change_text(None) == "–"
