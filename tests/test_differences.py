"""Paired differences between variants, ranking stability and the claims table, each against a brute-force
computation of its own:

- a control's difference from PAPA and its interval: resample by resample, from the predictions files, with the
  draws the documented protocol makes (papa.reporting.intervals: seeds, then examples, from the task's seed);
- Kendall τ by counting concordant pairs, dynamic overlaps by set intersection, chance as (N − k) / N;
- the claims' words on intervals on either side of their lines.
"""

import csv
import itertools
import json

import numpy as np
import pytest
from test_seeds import fake_sweep

from papa.reporting.claims import FAILS, HOLDS, NOT_RUN, UNSURE, claims
from papa.reporting.intervals import task_seed
from papa.reporting.results import write_results


def accuracy_column(folder):
    rows = [json.loads(line) for line in (folder / "eval_predictions.jsonl").read_text().splitlines()]
    return np.array([r["label"] == r["prediction"] for r in rows], dtype=float)


def test_difference_and_its_interval_against_a_brute_force_paired_bootstrap(tmp_path):
    seeds = (1, 2, 3)
    plan, _ = fake_sweep(tmp_path, seeds, controls=("uniform", "random_order"), n=60)
    write_results(plan, "m")
    legend = (tmp_path / "results.md").read_text().split("## Controls")[1]
    assert "uniform: the replaced heads attend equally" in legend and "random order: the heads" in legend
    assert "zero output" not in legend and "mean output" not in legend  # only the controls that ran
    rows = {int(r["k"]): r for r in csv.DictReader(open(tmp_path / "results.csv"))}
    correct = {name: accuracy_column(tmp_path / name) for name in
               [f"{p}k_{k}_seed_{s}" for p in ("", "uniform_", "random_") for k in (0, 4, 8) for s in seeds]
               if (tmp_path / name).exists()}
    rng = np.random.default_rng(task_seed(plan.task))  # one chunk: 200 resamples of 60 examples
    drawn_seeds, drawn_examples = rng.integers(0, 3, size=(200, 3)), rng.integers(0, 60, size=(200, 60))
    for control, prefix in (("uniform", "uniform_"), ("random_order", "random_")):
        k = 4
        stats = []
        for r in range(200):
            per_seed = []
            for position in drawn_seeds[r]:
                s, index = seeds[position], drawn_examples[r]
                zero = correct[f"k_0_seed_{s}"][index].mean()
                papa = (correct[f"k_{k}_seed_{s}"][index].mean() - zero) / zero
                other = (correct[f"{prefix}k_{k}_seed_{s}"][index].mean() - zero) / zero
                per_seed.append(other - papa)
            stats.append(np.mean(per_seed))
        column = f"diff_{control}_eval_accuracy"
        row = rows[k]
        point = np.mean([(correct[f"{prefix}k_{k}_seed_{s}"].mean() - correct[f"k_{k}_seed_{s}"].mean())
                         / correct[f"k_0_seed_{s}"].mean() for s in seeds])
        assert float(row[column]) == pytest.approx(point)
        assert (float(row[f"{column}_ci_low"]), float(row[f"{column}_ci_high"])) == pytest.approx(
            tuple(np.percentile(stats, [2.5, 97.5])))
    assert (rows[0]["diff_uniform_eval_accuracy_ci_low"], rows[0]["diff_uniform_eval_accuracy_ci_high"]) == ("0.0",
                                                                                                            "0.0")
    # random order at all heads is PAPA's own run: a difference of exactly 0
    assert float(rows[8]["diff_random_order_eval_accuracy"]) == 0.0
    md = (tmp_path / "results.md").read_text()
    assert "## Differences from PAPA: accuracy" in md and "(PAPA's run)" in md and "## Claims" in md
    assert (tmp_path / "differences.png").read_bytes()[:4] == b"\x89PNG"


def brute_tau(x, y):
    pairs = list(itertools.combinations(range(len(x)), 2))
    concordant = sum(np.sign(x[i] - x[j]) * np.sign(y[i] - y[j]) for i, j in pairs)
    return concordant / len(pairs)  # τ-a = τ-b without ties


def test_ranking_stability_between_seeds(tmp_path):
    from papa.method.ranking import save_ranking

    seeds = (1, 2, 3)
    plan, _ = fake_sweep(tmp_path, seeds, ks=(0, 2, 5, 8), rank_per_seed=True)
    lambdas = {s: np.random.default_rng(s).normal(size=(2, 4)) for s in seeds}
    lambdas[2] = lambdas[1] + 0.01 * np.random.default_rng(9).normal(size=(2, 4))  # seed 2 nearly agrees with 1
    for s in seeds:
        save_ranking(lambdas[s], tmp_path / f"sort_seed_{s}")
    results = write_results(plan, "m")
    rows = list(csv.DictReader(open(tmp_path / "ranking_stability.csv")))
    assert [(r["seed_a"], r["seed_b"], r["k"]) for r in rows] == [
        (a, b, k) for a, b in (("1", "2"), ("1", "3"), ("2", "3"), ("mean", "mean")) for k in ("2", "5")]
    for row in rows[:6]:
        a, b, k = int(row["seed_a"]), int(row["seed_b"]), int(row["k"])
        la, lb = lambdas[a].ravel().astype(np.float32), lambdas[b].ravel().astype(np.float32)
        assert float(row["kendall_tau"]) == pytest.approx(brute_tau(la, lb))
        keep_a, keep_b = set(np.argsort(la, kind="stable")[k:]), set(np.argsort(lb, kind="stable")[k:])
        assert float(row["dynamic_overlap"]) == pytest.approx(len(keep_a & keep_b) / (8 - k))
        assert float(row["chance_overlap"]) == pytest.approx((8 - k) / 8)
    mean = [r for r in rows if r["seed_a"] == "mean" and r["k"] == "2"][0]
    assert float(mean["kendall_tau"]) == pytest.approx(np.mean([float(r["kendall_tau"]) for r in rows[:6:2]]))
    assert float(rows[0]["kendall_tau"]) > 0.9  # the near copy
    assert "## Ranking stability between seeds" in (tmp_path / "results.md").read_text()
    assert set(results.rankings) == set(seeds)


def test_one_ranking_writes_no_stability_file(tmp_path):
    plan, _ = fake_sweep(tmp_path, (1, 2))  # one ranking run, shared by both seeds
    write_results(plan, "m")
    assert not (tmp_path / "ranking_stability.csv").exists()
    assert "Ranking stability" not in (tmp_path / "results.md").read_text()


def row(k, change=None, low=None, high=None, diff=None, dlow=None, dhigh=None):
    return {"k": k, "rel_change_eval_accuracy": change, "rel_change_eval_accuracy_ci_low": low,
            "rel_change_eval_accuracy_ci_high": high, "diff_random_order_eval_accuracy": diff,
            "diff_random_order_eval_accuracy_ci_low": dlow, "diff_random_order_eval_accuracy_ci_high": dhigh}


@pytest.mark.parametrize("half, full, diff, words", [
    ((-0.01, -0.03, 0.01), (-0.05, -0.08, -0.02), (-0.04, -0.06, -0.01), (HOLDS, HOLDS, HOLDS)),
    ((-0.20, -0.25, -0.15), (-0.30, -0.35, -0.20), (0.03, 0.01, 0.05), (FAILS, FAILS, FAILS)),
    ((-0.04, -0.07, -0.01), (-0.09, -0.12, -0.06), (-0.01, -0.03, 0.02), (UNSURE, UNSURE, UNSURE)),
    # on the lines: a 5% or 10% drop is still "little" / "modest"; a difference of exactly 0 beats nothing
    ((-0.05, -0.05, -0.05), (-0.10, -0.10, -0.10), (0.0, 0.0, 0.0), (HOLDS, HOLDS, FAILS)),
    ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (-0.02, -0.04, 0.0), (HOLDS, HOLDS, UNSURE)),
])
def test_claims_words(half, full, diff, words):
    rows = [row(0, 0.0, 0.0, 0.0), row(4, *half, *diff), row(8, *full)]
    assert [c[-1] for c in claims(rows, "eval_accuracy", 8)] == list(words)
    assert [c[1] for c in claims(rows, "eval_accuracy", 8)] == [4, 8, 4]


def test_claims_not_run():
    rows = [row(0, 0.0, 0.0, 0.0), row(8, -0.1, -0.2, 0.0)]  # no k = ½, no random order
    assert [c[-1] for c in claims(rows, "eval_accuracy", 8)] == [NOT_RUN, UNSURE, NOT_RUN]


def test_grid_summary_differences_claims_and_stability_between_tasks(tmp_path):
    from papa.method.ranking import save_ranking
    from papa.reporting.summary import PairOutcome, write_summary

    outcomes, lambdas = [], {}
    for index, task in enumerate(("sst2", "qnli")):
        plan, _ = fake_sweep(tmp_path / task, (1, 2), controls=("random_order",), task_name=task)
        lambdas[task] = np.random.default_rng(10 + index).normal(size=(2, 4))
        save_ranking(lambdas[task], tmp_path / task / "sort")
        outcome = PairOutcome("m", plan.task, plan.total_heads, plan.ks, plan.controls)
        outcome.results = write_results(plan, "m")
        outcomes.append(outcome)
    write_summary(str(tmp_path), outcomes)
    summary = list(csv.DictReader(open(tmp_path / "summary.csv")))
    for outcome in outcomes:
        results = {int(r["k"]): r for r in csv.DictReader(open(tmp_path / outcome.task.name / "results.csv"))}
        for row in (r for r in summary if r["task"] == outcome.task.name and r["variant"] == "random_order"):
            expected = results[int(row["k"])]
            for end in ("", "_ci_low", "_ci_high"):
                assert row[f"diff{'_vs_papa' if not end else end}"] == expected[f"diff_random_order_eval_accuracy{end}"]
    md = (tmp_path / "summary.md").read_text()
    assert "## Differences from PAPA" in md and "**mean across tasks**" in md
    for task in ("sst2", "qnli", "**mean across tasks**"):  # random order with all heads is PAPA's own run
        assert f"| m | random order | {task} | " in md
        assert any(line.startswith(f"| m | random order | {task} | ") and line.endswith("| (PAPA's run) |")
                   for line in md.splitlines())
    assert "## Claims" in md and "| sst2 | the ranking beats a random order" in md
    assert "## Ranking stability between tasks" in md
    stability = list(csv.DictReader(open(tmp_path / "ranking_stability.csv")))
    assert {(r["a"], r["b"], r["seed_a"]) for r in stability} == {("sst2", "qnli", "1")}  # one ranking: the first seed's
    la, lb = (lambdas[t].ravel().astype(np.float32) for t in ("sst2", "qnli"))
    assert float(stability[0]["kendall_tau"]) == pytest.approx(brute_tau(la, lb))


# ----------------------------------------------------------------------------- papa-compare


def finished_sweep(folder, seeds, controls=(), task_name="sst2", n=60):
    """fake_sweep's runs, their results, and the sweep.json a real sweep writes."""
    plan, _ = fake_sweep(folder, seeds, controls=controls, task_name=task_name, n=n)
    write_results(plan, "m")
    (folder / "sweep.json").write_text(json.dumps({"task": task_name, "layers": 2, "heads_per_layer": 4,
                                                   "controls": list(controls), "seeds": list(seeds)}))
    return plan


def test_papa_compare_equals_the_sweeps_own_paired_difference(tmp_path, capsys):
    from papa.cli.compare import main

    finished_sweep(tmp_path / "a", (1, 2, 3), controls=("uniform",))
    out = tmp_path / "cmp.csv"
    main([str(tmp_path / "a"), str(tmp_path / "a"), "--variant_a", "uniform", "--bootstrap_samples", "200",
          "--output", str(out)])
    rows = {int(r["k_a"]): r for r in csv.DictReader(open(out))}
    own = {int(r["k"]): r for r in csv.DictReader(open(tmp_path / "a" / "results.csv"))}
    assert sorted(rows) == [4, 8]  # k = 0 left out
    for k, row in rows.items():  # uniform − PAPA: the column the brute-force test checks, from the same draws
        for end in ("", "_ci_low", "_ci_high"):
            assert float(row[f"diff{end}"]) == pytest.approx(float(own[k][f"diff_uniform_eval_accuracy{end}"]))
    assert "a (uniform) − a" in capsys.readouterr().out


@pytest.mark.parametrize("case, message", [
    ("task", "different tasks"),
    ("seeds", "3 and 1 seeds"),
    ("variant", "ran no 'mean_output' variant"),
    ("unfinished", "has not finished"),
])
def test_papa_compare_bad_input(tmp_path, case, message):
    from papa.errors import PapaError
    from papa.reporting.compare import compare_runs

    finished_sweep(tmp_path / "a", (1, 2, 3))
    other = {"task": dict(seeds=(1, 2, 3), task_name="qnli"), "seeds": dict(seeds=(1,))}.get(case, dict(seeds=(1, 2, 3)))
    finished_sweep(tmp_path / "b", **other)
    if case == "unfinished":
        (tmp_path / "b" / "results.csv").unlink()
    with pytest.raises(PapaError, match=message):
        compare_runs(tmp_path / "a", tmp_path / "b", variant_b="mean_output" if case == "variant" else "PAPA",
                     samples=50)
