"""findings/smollm2_rankers_lm_qnli/seeds_vs_random.py: each seed's ranking against each random order, paired over
held-out blocks.

The point estimates are checked against perplexities computed here from the blocks' NLL sums; the orders may come
from the seeds sweep itself or, with --orders_from, from a one-seed sweep (folders without the seed suffix)."""

import json
import math
import re
import sys
from pathlib import Path

import pytest
from conftest import load_module

SCRIPT = Path(__file__).resolve().parents[1] / "findings" / "smollm2_rankers_lm_qnli" / "seeds_vs_random.py"


def write_run(folder, nlls, tokens=10, hashes=None):
    folder.mkdir(parents=True)
    hashes = hashes or [f"b{i}" for i in range(len(nlls))]
    with open(folder / "eval_predictions.jsonl", "w") as f:
        for i, (nll, h) in enumerate(zip(nlls, hashes)):
            f.write(json.dumps({"index": i, "nll_sum": nll, "tokens": tokens, "block": h}) + "\n")


def run(monkeypatch, capsys, *argv):
    monkeypatch.setattr(sys, "argv", ["seeds_vs_random.py", *argv, "--samples", "200"])
    load_module(SCRIPT).main()
    return capsys.readouterr().out


def cell_estimates(report):
    """{(seed, k): (ranking ppl, [(order ppl, difference), ...])} from the markdown table."""
    out = {}
    for line in report.splitlines():
        if not re.match(r"\| \d+ \| \d+ \|", line):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        orders = [re.match(r"([\d.]+) \(([+-]\d+)", c).groups() for c in cells[3:]]
        out[int(cells[0]), int(cells[1])] = float(cells[2]), [(float(p), int(d)) for p, d in orders]
    return out


def expected(nll0, nll_rank, nll_order, tokens=10):
    ppl = [math.exp(sum(n) / (tokens * len(n))) for n in (nll0, nll_rank, nll_order)]
    return ppl[1], ppl[2], round(100 * (ppl[1] - ppl[2]) / ppl[0])


NLL0 = [20.0, 22.0, 18.0, 21.0]
RANKING = {1: [25.0, 26.0, 23.0, 27.0], 2: [24.0, 29.0, 22.0, 25.0]}
ORDERS = {"random": [30.0, 31.0, 29.0, 33.0], "random2": [26.0, 25.0, 27.0, 24.0]}


def seeds_sweep(root, with_orders):
    for seed, nll in RANKING.items():
        write_run(root / f"k_0_seed_{seed}", NLL0)
        write_run(root / f"k_5_seed_{seed}", nll)
    if with_orders:  # evaluated under seed 1 only: they stand for seed 2 as well
        for order, nll in ORDERS.items():
            write_run(root / f"{order}_k_5_seed_1", nll)


@pytest.mark.parametrize("orders_from", [False, True])
def test_differences_match_perplexities_computed_from_the_blocks(tmp_path, monkeypatch, capsys, orders_from):
    seeds_sweep(tmp_path / "seeds", with_orders=not orders_from)
    argv = [str(tmp_path / "seeds"), "--ks", "5"]
    if orders_from:
        for order, nll in ORDERS.items():
            write_run(tmp_path / "one" / f"{order}_k_5", nll)
        argv += ["--orders_from", str(tmp_path / "one")]
    table = cell_estimates(run(monkeypatch, capsys, *argv))
    assert set(table) == {(1, 5), (2, 5)}
    for seed in RANKING:
        ranking, cells = table[seed, 5]
        for (order_ppl, diff), order in zip(cells, ["random", "random2"]):
            want_rank, want_order, want_diff = expected(NLL0, RANKING[seed], ORDERS[order])
            assert ranking == pytest.approx(want_rank, abs=0.05)
            assert order_ppl == pytest.approx(want_order, abs=0.05)
            assert diff == want_diff


def test_orders_on_other_blocks_are_refused(tmp_path, monkeypatch, capsys):
    seeds_sweep(tmp_path / "seeds", with_orders=False)
    write_run(tmp_path / "one" / "random_k_5", ORDERS["random"], hashes=["x0", "x1", "x2", "x3"])
    with pytest.raises(SystemExit, match="evaluated other blocks"):
        run(monkeypatch, capsys, str(tmp_path / "seeds"), "--ks", "5", "--orders_from", str(tmp_path / "one"))


def test_the_summary_counts_each_side_of_0(tmp_path, monkeypatch, capsys):
    """Per block, order "random" is worse than the ranking, "random2" better and "random3" the same: every resample
    puts the first difference below 0, the second above, the third at 0."""
    nll_rank = [25.0, 26.0, 23.0, 27.0]
    for seed in (1, 2):
        write_run(tmp_path / f"k_0_seed_{seed}", NLL0)
        write_run(tmp_path / f"k_5_seed_{seed}", nll_rank)
    for order, shift in {"random": 3.0, "random2": -2.0, "random3": 0.0}.items():
        write_run(tmp_path / f"{order}_k_5_seed_1", [n + shift for n in nll_rank])
    report = run(monkeypatch, capsys, str(tmp_path), "--ks", "5")
    assert "4 of 6 differences exclude 0: 2 with the ranking better, 2 with the order better." in report
