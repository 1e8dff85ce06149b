"""Pooling benchmark runs (papa-benchmark --pool): inference and training rounds by hand, and the clear errors."""

import json

import pytest


def _run_json(path, batch_size, seconds, beside, process, bound=1.1):
    """A benchmark JSON as papa-benchmark --json writes it, with given rounds of one variant at T = 64."""
    path.write_text(json.dumps({
        "machine": {"date": "2026-12-01"}, "settings": {"model": "m", "batch_size": batch_size, "layers": 2, "heads": 2,
                                                       "hidden_size": 8, "intermediate_size": 16, "command": "c"},
        "inference": [
            {"seq_len": 64, "variant": "stock", "constant_heads": 0, "total_heads": 4, "median_s": 1.0, "rounds": None},
            {"seq_len": 64, "variant": "PAPA, v", "constant_heads": 2, "total_heads": 4, "median_s": 1.0,
             "flop_bound_speedup": bound, "rounds": {"seconds": seconds, "stock_beside_seconds": beside,
                                                     "process": process}}]}))
    return path


def test_pool_runs_by_hand(tmp_path, capsys):
    from papa.benchmark.pool import pool_runs
    from papa.cli.benchmark import main

    a = _run_json(tmp_path / "a.json", 32, [1, 1, 1, 1], [1.1, 1.2, 1.3, 1.4], [0, 0, 1, 1])
    b = _run_json(tmp_path / "b.json", 32, [2, 2], [2.0, 3.0], [0, 0])
    (row,) = pool_runs([a, b])["inference_pooled"]
    # ratios stock beside / variant: 1.1 1.2 1.3 1.4 | 1.0 1.5 → median (1.2 + 1.3) / 2; b's process 0 is not a's
    assert row["paired_speed_ratio"] == pytest.approx(1.25)
    assert (row["runs"], row["processes"], row["rounds"]) == (2, 3, 6)
    assert row["paired_percent_of_bound"] == pytest.approx(100 * 0.25 / 0.1)
    low, high = row["paired_speed_ratio_ci95"]
    assert 1.0 <= low <= 1.25 <= high <= 1.5

    # different setups, a file without rounds, one file: one clear error each, nothing written
    other = _run_json(tmp_path / "c.json", 8, [1], [1], [0])
    old = json.loads(a.read_text())
    old["inference"][1]["rounds"] = None
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "bad.json").write_text(json.dumps({"inference": [{"variant": "stock"}]}))
    _run_json(tmp_path / "short.json", 32, [1, 1], [1.1], [0, 0])  # a round without its stock times
    padded = json.loads(a.read_text())
    padded["settings"]["padded_rows"] = "every third"
    (tmp_path / "third.json").write_text(json.dumps(padded))
    for argv, message in [
        ([a, tmp_path / "third.json"], f"{tmp_path / 'third.json'} and {a} benchmark different setups (padded_rows "
                                       "differ); pool only runs of the same model, batch size and padding"),
        ([a, other], f"{other} and {a} benchmark different setups (batch_size differ); pool only runs of the same model, batch size and padding"),
        ([a, tmp_path / "old.json"], f"{tmp_path / 'old.json'} has no raw rounds for 'PAPA, v' (written by an older "
                                     "papa-benchmark); rerun it to pool it"),
        ([a], "--pool needs at least two JSON files written by papa-benchmark --json"),
        ([a, tmp_path / "bad.json"], f"{tmp_path / 'bad.json'} is not a papa-benchmark --json file (an inference row "
                                     "lacks seq_len, variant, constant_heads, total_heads, median_s)"),
        ([a, tmp_path / "short.json"], f"{tmp_path / 'short.json'}: the rounds of 'PAPA, v' are incomplete; rerun it "
                                       "to pool it"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            main(["--pool", *map(str, argv), "--json", str(tmp_path / "out.json")])
        assert exit_info.value.code == 2 and capsys.readouterr().err == f"error: {message}\n"
    assert not (tmp_path / "out.json").exists()


def test_pool_training_rounds_by_hand(tmp_path):
    """Training modes pool like inference variants (each mode's steps against the stock probing steps around
    them, each run one cluster); a run from before training kept its rounds still pools its inference."""
    from papa.benchmark.pool import pool_runs, pooled_markdown

    def with_training(path, seconds, beside):
        run = json.loads(path.read_text())
        run["training"] = {"seq_len": 64, "batch_size": 32, "rows": [
            {"variant": "probing", "median_s": 2.0},
            {"variant": "probing (all constant)", "median_s": 1.0, "flop_bound_speedup": 1.2,
             "rounds": {"seconds": seconds, "stock_beside_seconds": beside, "process": [0] * len(seconds)}}]}
        path.write_text(json.dumps(run))
        return path

    a = with_training(_run_json(tmp_path / "a.json", 32, [1], [1.1], [0]), [1, 1, 1], [1.1, 1.2, 1.3])
    b = with_training(_run_json(tmp_path / "b.json", 32, [1], [1.1], [0]), [2, 2], [2.0, 3.0])
    old = _run_json(tmp_path / "old.json", 32, [1], [1.1], [0])  # training without rounds, as older runs wrote it
    run = json.loads(old.read_text())
    run["training"] = {"seq_len": 64, "rows": [{"variant": "probing", "median_s": 2.0},
                                                {"variant": "probing (all constant)", "median_s": 1.0}]}
    old.write_text(json.dumps(run))

    results = pool_runs([a, b, old])
    (row,) = results["training_pooled"]
    # ratios 1.1 1.2 1.3 | 1.0 1.5 → median 1.2; the bound 1.2x, so 100% of it; two runs, two clusters
    assert (row["seq_len"], row["variant"], row["runs"], row["processes"], row["rounds"]) == (
        64, "probing (all constant)", 2, 2, 5)
    assert row["paired_speed_ratio"] == pytest.approx(1.2)
    assert row["paired_percent_of_bound"] == pytest.approx(100.0)
    assert [r["runs"] for r in results["inference_pooled"]] == [3]
    table = pooled_markdown(results)
    assert "## One training step" in table and "| 64 | probing (all constant) | 2 | 2 | 5 | 1.200x" in table
    assert "stock probing step T=64: 2000.0 ms" in table
