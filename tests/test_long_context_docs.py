"""findings/long_context_structured/structured.py and far_weight.py: the findings' tables and shares against hand
computations."""

import json
import math
from pathlib import Path

import pytest
import numpy as np
import torch
from conftest import load_module

DOCS = Path(__file__).resolve().parent.parent / "findings" / "long_context_structured"


def _run(folder, rows):
    folder.mkdir()
    with open(folder / "eval_predictions.jsonl", "w") as f:
        for i, (block, nll, tokens) in enumerate(rows):
            f.write(json.dumps({"index": i, "nll_sum": nll, "tokens": tokens, "block": block}) + "\n")


def test_structured_tables_against_hand_computed_log_perplexities(tmp_path, monkeypatch, capsys):
    _run(tmp_path / "stock", [("a", 100.0, 50), ("b", 300.0, 100)])
    _run(tmp_path / "x", [("a", 150.0, 50), ("b", 330.0, 100)])
    _run(tmp_path / "y", [("a", 120.0, 50), ("b", 360.0, 100)])
    out = tmp_path / "t.md"
    monkeypatch.setattr("sys.argv", ["structured.py", "--runs", str(tmp_path), "--seq_len", "64", "--stock", "stock",
                                     "--rows", "x:run x", "--pairs", "x:y:x − y", "--samples", "200",
                                     "--out", str(out)])
    load_module(DOCS / "structured.py").main()
    text = out.read_text()
    stock, x, y = 400 / 150, 480 / 150, 480 / 150
    assert f"| run x | {math.exp(x):.2f} | {x - stock:+.3f} [" in text
    assert f"| x − y | {x - y:+.3f} [" in text  # equal totals: 0, though the blocks differ
    capsys.readouterr()


def test_structured_tables_refuse_runs_of_other_blocks(tmp_path, monkeypatch):
    _run(tmp_path / "stock", [("a", 1.0, 1)])
    _run(tmp_path / "x", [("z", 1.0, 1)])
    monkeypatch.setattr("sys.argv", ["structured.py", "--runs", str(tmp_path), "--seq_len", "8", "--stock", "stock",
                                     "--rows", "x:x"])
    with pytest.raises(SystemExit, match="other blocks"):
        load_module(DOCS / "structured.py").main()


def test_far_weight_is_the_last_rows_share_beyond_the_distance(tmp_path, monkeypatch, capsys):
    sink = torch.tensor([[[2.0]]])  # (L, H, S) = (1, 1, 1)
    profile = torch.tensor([[[1.0, 1.0, 3.0, 5.0, 7.0]]])  # T = 5: the last row (i = 4) sees d = 0 .. 3 after the sink
    (tmp_path / "c").mkdir()
    torch.save({"sink": sink, "profile": profile}, tmp_path / "c" / "structured_constants.pt")
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "sorted_heads.json").write_text("[[0, 0]]")
    monkeypatch.setattr("sys.argv", ["far_weight.py", "--constants", str(tmp_path / "c"), "--sorting_heads_dir",
                                     str(tmp_path / "s"), "--k", "1", "--beyond", "1"])
    load_module(DOCS / "far_weight.py").main()
    # row 4: sink 2 at j = 0, then j = 1..4 at d = 3, 2, 1, 0: weights 5, 3, 1, 1; beyond d = 1: 3 + 5 of 12
    printed = capsys.readouterr().out
    assert f"median {8 / 12:.4f}" in printed and f"on the sink: median {2 / 12:.4f}" in printed


def test_the_retrieval_heatmap_counts_keys_by_length_and_depth(tmp_path, monkeypatch, capsys):
    """findings/long_context_retrieval/heatmap.py: a cell is the share of that depth's keys found (correct ==
    tokens); the Wilson interval against its closed form for 5 of 10 and its ends at 0 and n."""
    heatmap = load_module(DOCS.parent / "long_context_retrieval" / "heatmap.py")
    for T, found in ((64, [6, 6, 0, 6, 6, 6]), (128, [6, 3, 6, 6, 6, 6])):
        (tmp_path / f"m_t{T}").mkdir()
        with open(tmp_path / f"m_t{T}" / "eval_predictions.jsonl", "w") as f:
            for i, correct in enumerate(found):
                depth = [0.0, 0.25, 0.5, 0.751, 1.0][i % 5]
                f.write(json.dumps({"index": i, "nll_sum": 1.0, "tokens": 6, "correct": correct, "depth": depth}) + "\n")
    assert heatmap.by_depth(tmp_path / "m_t64") == {0.0: [2, 2], 0.25: [1, 1], 0.5: [0, 1], 0.75: [1, 1], 1.0: [1, 1]}
    low, high = heatmap.wilson(5, 10)
    half = 1.96 * math.sqrt(0.25 / 10 + 1.96 ** 2 / 400) / (1 + 1.96 ** 2 / 10)
    assert (low, high) == pytest.approx((0.5 - half, 0.5 + half))
    assert heatmap.wilson(0, 10)[0] == 0 and heatmap.wilson(10, 10)[1] == 1
    monkeypatch.setattr("sys.argv", ["heatmap.py", "--runs", f"m={tmp_path}/m_t{{T}}", "--lengths", "64", "128",
                                     "--out", str(tmp_path / "h.png")])
    heatmap.main()
    table = capsys.readouterr().out
    assert "| m | 64 | 5/6 |" in table and "| m | 128 | 5/6 |" in table and (tmp_path / "h.png").is_file()


def test_the_retrieval_comparison_pairs_examples_and_refuses_other_texts(tmp_path, monkeypatch, capsys):
    """findings/long_context_retrieval/compare.py: shares and paired differences on the examples both runs scored."""
    compare = load_module(DOCS.parent / "long_context_retrieval" / "compare.py")

    def run(name, hits, digests=None):
        (tmp_path / name).mkdir()
        with open(tmp_path / name / "eval_predictions.jsonl", "w") as f:
            for i, hit in enumerate(hits):
                f.write(json.dumps({"index": i, "tokens": 5, "correct": 5 if hit else 3,
                                    "block": (digests or "abcdefgh")[i]}) + "\n")

    run("stock", [1, 1, 1, 1, 1, 1, 1, 0])
    run("x", [1, 0, 0, 1])  # the first four examples
    run("other", [1, 1], digests="zz")
    a, b = compare.shared(compare.found(tmp_path / "x"), compare.found(tmp_path / "stock"))
    assert a.tolist() == [1, 0, 0, 1] and b.tolist() == [1, 1, 1, 1]
    mean, low, high = compare.difference(a, b, np.random.default_rng(0))
    assert mean == -0.5 and -1 <= low <= mean <= high <= 0
    assert compare.interval(np.ones(5), np.random.default_rng(0)) == (1.0, 1.0, 1.0)
    monkeypatch.setattr("sys.argv", ["compare.py", "--reference", f"stock={tmp_path / 'stock'}", "--runs",
                                     f"x={tmp_path / 'x'}"])
    compare.main()
    assert "| x | 2/4 | 0.50 [" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="differs between the runs"):
        compare.shared(compare.found(tmp_path / "other"), compare.found(tmp_path / "stock"))
    # the copy task: each example's share of its answer's tokens predicted (3 of 5 where not all)
    assert [v for v, _ in compare.found(tmp_path / "x", "token_accuracy").values()] == [1.0, 0.6, 0.6, 1.0]
    monkeypatch.setattr("sys.argv", ["compare.py", "--reference", f"stock={tmp_path / 'stock'}", "--runs",
                                     f"x={tmp_path / 'x'}", "--metric", "token_accuracy"])
    compare.main()
    assert "| x | 4 | 0.80 [0.60, 1.00] | -20 [" in capsys.readouterr().out  # x 0.80, stock 1.00 on those four


def test_the_retrieval_groups_and_where_each_ranking_puts_them(tmp_path, monkeypatch, capsys):
    """findings/long_context_retrieval/heads.py on hand-made head_scores.csv files of two K/V-group rankings."""
    heads = load_module(DOCS.parent / "long_context_retrieval" / "heads.py")

    def ranking(name, order, scores):
        (tmp_path / name).mkdir()
        lines = ["rank,layer,head,unit,score,profile"]
        for u, (layer, group) in enumerate(order):
            for h in (2 * group, 2 * group + 1):
                lines.append(f"{len(lines) - 1},{layer},{h},{u},{scores[u]},broad")
        (tmp_path / name / "head_scores.csv").write_text("\n".join(lines) + "\n")

    ranking("retrieval", [(0, 0), (0, 1), (1, 0), (1, 1)], [0.0, 0.05, 0.2, 0.9])
    ranking("other", [(1, 1), (0, 0), (1, 0), (0, 1)], [1, 2, 3, 4])
    monkeypatch.setattr("sys.argv", ["heads.py", "--retrieval", str(tmp_path / "retrieval"), "--rankings",
                                     f"other={tmp_path / 'other'}", "--fraction", "0.5"])
    heads.main()
    out = capsys.readouterr().out
    assert "2 of 4 K/V groups" in out and "| 1 | 2–3 | broad, broad | 0.90 |" in out
    assert "| other | 0, 2 | 1 of 2 |" in out  # group (1, 1) ranked first, (1, 0) third: one of the two kept


def test_accuracy_against_k_reads_one_folder_per_k_and_the_stock_run_at_0(tmp_path, monkeypatch, capsys):
    """findings/long_context_retrieval/accuracy_vs_k.py: each point is the share of keys found in that k's folder
    (k = 0: the stock run), with heatmap.py's Wilson interval; a k without a folder is left out."""
    curves = load_module(DOCS.parent / "long_context_retrieval" / "accuracy_vs_k.py")

    def run(name, hits):
        (tmp_path / name).mkdir()
        with open(tmp_path / name / "eval_predictions.jsonl", "w") as f:
            for i, hit in enumerate(hits):
                f.write(json.dumps({"index": i, "tokens": 5, "correct": 5 if hit else 4, "block": "x"}) + "\n")

    run("stock", [1, 1, 1, 1])
    run("r_k2", [1, 0, 1, 0])
    measured = curves.points(str(tmp_path / "r_k{k}"), [0, 2, 4], str(tmp_path / "stock"))
    heatmap = load_module(DOCS.parent / "long_context_retrieval" / "heatmap.py")
    assert sorted(measured) == [0, 2] and measured[0] == (1.0, *heatmap.wilson(4, 4), 4, 4)
    assert measured[2] == (0.5, *heatmap.wilson(2, 4), 2, 4) and measured[0][1] < 1
    monkeypatch.setattr("sys.argv", ["accuracy_vs_k.py", "--ks", "0", "2", "4", "--stock", str(tmp_path / "stock"),
                                     "--runs", f"r={tmp_path}/r_k{{k}}", "--out", str(tmp_path / "c.png")])
    curves.main()
    assert "| r | 4/4: 1.00 [0.51, 1.00] | 2/4: 0.50 [0.15, 0.85] | – |" in capsys.readouterr().out and (tmp_path / "c.png").is_file()


def test_whole_groups_counts_groups_with_every_query_head_constant(tmp_path, monkeypatch, capsys):
    """findings/long_context_retrieval/whole_groups.py: a group counts once all its query heads are among the first k."""
    script = load_module(DOCS.parent / "long_context_retrieval" / "whole_groups.py")
    heads = [[0, 0], [0, 1], [1, 5], [0, 2], [1, 3], [1, 4]]  # groups of 3: (0, 0) whole at k = 4, (1, 1) at 6
    assert script.whole_groups(heads, 3, 3) == (0, 2)
    assert script.whole_groups(heads, 4, 3) == (1, 2)
    assert script.whole_groups(heads, 6, 3) == (2, 2)
    (tmp_path / "sort").mkdir()
    (tmp_path / "sort" / "sorted_heads.json").write_text(json.dumps(heads))
    monkeypatch.setattr("sys.argv", ["whole_groups.py", "--rankings", f"x={tmp_path / 'sort'}", "--ks", "3", "6",
                                     "--group_size", "3"])
    script.main()
    assert "| x | 0 whole, 2 touched | 2 whole, 2 touched |" in capsys.readouterr().out
