"""Several rankers and random orders in the sweep: their stages, folders and flags (papa.sweep.orderings), the
differences of each ranker from each random order and from their mean (papa.reporting.orderings, against a
brute-force bootstrap of the same draws), the claims' third row, and one end-to-end sweep on a tiny decoder."""

import csv
import json

import numpy as np
import pytest
from test_controls import flag, plan_and_stages

from papa.errors import PapaError
from papa.sweep.arguments import parse_sweep_args
from papa.sweep.controls import random_order
from papa.reporting.orderings import add_ordering_differences, best_ranker


def test_rankers_and_random_orders_lay_out_their_stages(tmp_path):
    plan, stages = plan_and_stages(tmp_path, "--ranker", "taylor", "loo", "--random_orders", "3",
                                   "--ranker_max_samples", "16")
    assert plan.rankers == ("taylor", "loo")
    assert plan.controls == ("ranker_loo", "random_order", "random_order_2", "random_order_3")
    assert list(stages) == ["avgs", "sort", "sort_loo", "k_0", "k_36", "k_72", "loo_k_36", "random_k_36",
                            "random2_k_36", "random3_k_36"]  # k = 0 and all heads: PAPA's runs
    assert flag(stages["sort"], "--ranker") == "taylor" and flag(stages["sort_loo"], "--ranker") == "loo"
    assert flag(stages["sort_loo"], "--ranker_max_samples") == "16"
    assert flag(stages["loo_k_36"], "--sorting_heads_dir") == plan.ranking_folder(42, "loo")
    assert flag(stages["random3_k_36"], "--sorting_heads_dir").endswith("random_order_3")
    assert "--ranker" not in stages["k_36"].args
    assert stages["sort_loo"].outputs == ["sorted_heads.json", "head_scores.csv"]  # k_0 evaluates the stock model
    assert "--do_eval" not in stages["sort_loo"].args
    assert "--ranker_sample" not in stages["sort_loo"].args  # the first N, as before


def test_a_gates_stage_names_its_steps(tmp_path):
    _, stages = plan_and_stages(tmp_path / "a", "--ranker", "gates", "--ranker_steps", "16")
    assert "gates trained for 16 steps" in stages["sort"].description  # not the epochs it does not train for
    _, stages = plan_and_stages(tmp_path / "b", "--ranker", "gates")
    assert "gates trained for 1 epoch" in stages["sort"].description


def test_seeded_ranking_samples_reach_the_rankers_per_seed(tmp_path):
    plan, stages = plan_and_stages(tmp_path, "--ranker", "lambda", "taylor", "--ranker_max_samples", "16",
                                   "--ranker_sample", "seeded", "--seeds", "1", "2", "--rank_per_seed")
    assert flag(stages["sort_taylor_seed_2"], "--ranker_sample") == "seeded"
    assert flag(stages["sort_taylor_seed_2"], "--seed") == "2"
    assert "--ranker_sample" not in stages["sort_seed_1"].args  # λ trains on all the training data


def test_lambda_stays_the_default_and_its_stages_unchanged(tmp_path):
    _, plain = plan_and_stages(tmp_path / "a")
    _, explicit = plan_and_stages(tmp_path / "a", "--ranker", "lambda")
    assert plain["sort"].args == explicit["sort"].args and "--ranker" not in plain["sort"].args


def test_random_orders_are_seeded_and_distinct():
    first = random_order(6, 12, 42)
    assert first == random_order(6, 12, 42, 1)  # order 1: the random_order control's, as before
    others = [random_order(6, 12, 42, i) for i in (2, 3)]
    assert len({json.dumps(o) for o in [first, *others]}) == 3
    assert others[0] == random_order(6, 12, 42, 2)


@pytest.mark.parametrize("argv, message", [
    (["--random_orders", "0"], "--random_orders must be 1 or more"),
    (["--ranker", "taylor", "--ranker_loss", "distill"], "no signal for taylor"),
    (["--ranker", "nope"], "invalid choice"),
    (["--ranker", "taylor", "--ranker_sample", "seeded"], "add --ranker_max_samples"),
])
def test_bad_ordering_flags(argv, message):
    with pytest.raises(PapaError, match=message):
        parse_sweep_args(argv)


def test_differences_from_random_orders_use_the_same_draws(tmp_path):
    plan, _ = plan_and_stages(tmp_path, "--ranker", "lambda", "taylor", "--random_orders", "2")
    rng = np.random.default_rng(0)
    stats = {name: rng.normal(size=200) for name in ("papa", "taylor", "r1", "r2")}
    columns = {"papa": "rel_change_eval_accuracy", "taylor": "rel_change_ranker_taylor_eval_accuracy",
               "r1": "rel_change_random_order_eval_accuracy", "r2": "rel_change_random_order_2_eval_accuracy"}
    row = {"k": 36, **{c: float(stats[n].mean()) for n, c in columns.items()}}
    distributions = {(c, 36): stats[n] for n, c in columns.items()}
    cols = list(columns.values())
    add_ordering_differences(cols, [row], distributions, plan, ["eval_accuracy"])
    mean_vs_taylor = (stats["r1"] + stats["r2"]) / 2 - stats["taylor"]
    assert row["diff_random_mean_vs_taylor_eval_accuracy"] == pytest.approx(mean_vs_taylor.mean())
    assert row["diff_random_mean_vs_taylor_eval_accuracy_ci_low"] == pytest.approx(np.percentile(mean_vs_taylor, 2.5))
    one = stats["r2"] - stats["taylor"]
    assert row["diff_random_order_2_vs_ranker_taylor_eval_accuracy_ci_high"] == pytest.approx(np.percentile(one, 97.5))
    assert "diff_random_mean_vs_lambda_eval_accuracy" in cols
    assert best_ranker([row], plan, "eval_accuracy", 36) == (
        "lambda" if row[columns["papa"]] >= row[columns["taylor"]] else "taylor",
        f"diff_random_mean_vs_{'lambda' if row[columns['papa']] >= row[columns['taylor']] else 'taylor'}_eval_accuracy")


@pytest.mark.slow
def test_a_sweep_with_rankers_and_random_orders(tmp_path):
    """A tiny decoder's lm sweep with λ, taylor and loo and three random orders: every file and column."""
    from lm_fixtures import save_tiny_lm, write_text
    from conftest import run_command, script

    model = save_tiny_lm("llama", tmp_path / "lm")
    train, valid = write_text(tmp_path / "train.txt", 24), write_text(tmp_path / "valid.txt", 8, seed=1)
    out = tmp_path / "sweep"
    run_command(script("run_papa_sweep.py") + [
        "--model_name_or_path", model, "--task_name", "lm", "--train_file", train, "--validation_file", valid,
        "--max_seq_length", "16", "--static_heads_nums", "0", "6", "12", "--ranker", "lambda", "taylor", "loo",
        "--random_orders", "3", "--output_dir", out, "--bootstrap_samples", "200"])
    for folder in ("sort", "taylor_k_6", "loo_k_6", "random_k_6", "random3_k_6"):  # λ's ranking run evaluates, the others not
        assert (out / folder / "eval_results.json").is_file(), folder
    with open(out / "results.csv") as f:
        header = next(csv.reader(f))
    for column in ("random_order_3_eval_perplexity", "diff_random_order_3_eval_perplexity",
                   "diff_random_order_2_vs_ranker_loo_eval_perplexity_ci_low",
                   "diff_random_mean_vs_lambda_eval_perplexity", "diff_random_mean_vs_taylor_eval_perplexity_ci_high",
                   "ranker_taylor_eval_perplexity"):
        assert column in header, column
    markdown = (out / "results.md").read_text()
    assert "## Rankers against 3 random orders: perplexity" in markdown
    assert "the best ranker (" in markdown and "beats the random orders" in markdown
    assert "Ranking time (all seeds' ranking runs): lambda:" in markdown


def test_a_grid_summary_names_the_orderings():
    from test_grid import outcome

    from papa.reporting.summary import summary_markdown, summary_rows

    o = outcome("sst2", {"PAPA": {0: 0.8, 36: 0.78, 72: 0.6}, "ranker_taylor": {0: 0.8, 36: 0.79, 72: 0.6},
                         "random_order_2": {0: 0.8, 36: 0.7, 72: 0.6}}, controls=("ranker_taylor", "random_order_2"))
    md = summary_markdown([o])
    assert "taylor ranking" in md and "random order 2" in md
    assert {r["variant"] for r in summary_rows([o])} == {"PAPA", "ranker_taylor", "random_order_2"}


def test_random_orders_of_kv_groups_take_each_groups_heads_together():
    """--rank_kv_groups: the random orders permute K/V groups, as the rankers rank them; one head per unit is the
    permutation it always was."""
    import numpy as np

    from papa.sweep.controls import random_order

    heads_order = random_order(4, 6, seed=3, index=2)
    expected = np.random.default_rng([3, 2]).permutation(24)
    assert heads_order == [[int(i // 6), int(i % 6)] for i in expected]
    groups = random_order(4, 6, seed=3, index=2, group=3)
    assert sorted(map(tuple, groups)) == [(layer, head) for layer in range(4) for head in range(6)]
    units = [groups[i:i + 3] for i in range(0, 24, 3)]
    assert all(len({layer for layer, _ in u}) == 1 and [h for _, h in u] == [u[0][1], u[0][1] + 1, u[0][1] + 2]
               and u[0][1] % 3 == 0 for u in units)
    assert groups != random_order(4, 6, seed=3, index=3, group=3)
