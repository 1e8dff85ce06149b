"""Seeds in the sweep (--seeds, --rank_per_seed): the stages they lay out, that a finished seed's stages keep
their command lines when a seed is added, and, end to end, that a resumed sweep with an added seed runs only
that seed's stages; the seeds' results (mean, std, intervals) in results.csv and results_per_seed.csv."""

import pytest
from test_controls import flag, plan_and_stages

from papa.arguments import parse_sweep_args
from papa.errors import PapaError


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
])
def test_bad_seed_flags(argv, message):
    with pytest.raises(PapaError, match=message):
        parse_sweep_args(argv)
