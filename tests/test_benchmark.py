"""The benchmark (papa.benchmark): its FLOP bound by hand, its variant tables, a smoke run on a tiny random BERT."""

import json
import math
import random
import statistics

import pytest
import torch
from conftest import run_command, script, tiny_config
from tiny_decoders import tiny_decoder_config

from papa import fork_server
from papa.benchmark import flops, harness, memory, workloads
from papa.benchmark.report import markdown


def test_flop_bound_matches_hand_calculation():
    # h=8, ffn=16, 2 layers x 2 heads (d=4), T=4, one constant head. Per layer per token:
    # projections 4·2·64 = 512, FFN 2·2·8·16 = 512, QKᵀ 2·4·8 = 64, AV 64 → 1152; x2 layers = 2304.
    # One constant head removes Q and K projections 2·2·8·4 = 128 and its QKᵀ 2·4·4 = 32 → 160.
    counts = flops.flop_counts(hidden_size=8, intermediate_size=16, num_layers=2, num_heads=2, seq_len=4,
                               num_constant_heads=1)
    assert counts["total"] == 2304
    assert counts["removed"] == 160
    assert counts["removed_share"] == pytest.approx(160 / 2304)
    assert counts["bound_speedup"] == pytest.approx(2304 / (2304 - 160))
    # no constant head: nothing removed, bound 1; every head: 4 x 160 removed
    assert flops.flop_counts(8, 16, 2, 2, 4, 0)["bound_speedup"] == 1.0
    assert flops.flop_counts(8, 16, 2, 2, 4, 4)["removed"] == 640
    # the config wrapper reads the same fields
    config = tiny_config(hidden_size=8, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2)
    assert flops.flop_bound(config, 4, 1) == counts
    # % of bound: reaching the bound is 100 %, no speed-up 0 %
    assert flops.percent_of_bound(counts["bound_speedup"], counts["bound_speedup"]) == pytest.approx(100.0)
    assert flops.percent_of_bound(1.0, counts["bound_speedup"]) == pytest.approx(0.0)
    assert flops.percent_of_bound(1.2, 1.0) is None


def test_sandwiched_times_cancel_a_drifting_machine(monkeypatch):
    # A fake clock on a machine that slows down linearly with every call: call i costs
    # cost·(1 + 0.1·i). The stock costs 1, variant "a" 2 and "b" 4 units; the mean of the stock
    # runs on either side of a variant is the stock's cost at the variant's own call exactly,
    # so the paired ratios are exactly 1/2 and 1/4, though unpaired medians drift far from them.
    clock, calls = [0.0], []
    monkeypatch.setattr(harness.time, "perf_counter", lambda: clock[0])

    def variant(name, cost):
        def run():
            clock[0] += cost * (1 + 0.1 * len(calls))
            calls.append(name)
        return run

    variants = {"stock": variant("stock", 1.0), "a": variant("a", 2.0), "b": variant("b", 4.0)}
    times, beside = harness.sandwiched_times(variants, "stock", repeats=3, warmup=1, device="cpu")
    # each round: stock before and after every other variant, the others' order rotated per round
    assert calls == (["stock", "a", "stock", "b", "stock"] + ["stock", "b", "stock", "a", "stock"]) * 2
    assert [len(times[n]) for n in ("stock", "a", "b")] == [9, 3, 3] and set(beside) == {"a", "b"}
    assert harness.paired_ratios(beside["a"], times["a"]) == pytest.approx([0.5] * 3)
    assert harness.paired_ratios(beside["b"], times["b"]) == pytest.approx([0.25] * 3)
    # the first timed stock run is call 5 (after the warm-up round), cost 1.5
    assert times["stock"][0] == pytest.approx(1.5)


def test_minilm_bound_for_all_heads_constant():
    # all-MiniLM-L6-v2: h=384, ffn=1536, 6 x 12 heads; T=64 → removed 638,976 of 3,637,248 per layer-token
    counts = flops.flop_counts(384, 1536, 6, 12, 64, 72)
    assert counts["removed_share"] == pytest.approx(638976 / 3637248)


def test_deberta_bound_counts_the_position_terms_by_hand():
    # h=8, ffn=16, 1 layer x 2 heads (d=4), T=4, c2p and p2c over 2s = 8 relative positions, batch of 2 (8 tokens).
    # Per token: projections 512, FFN 512, QKᵀ 64, AV 64, c2p = p2c = 2·8·8 = 128, their projections
    # 2·8·8·8 / 8 tokens = 128 each → 1152 + 2·(128 + 128) = 1664.
    # One constant head: Q, K projections 128, QKᵀ 32, per term 2·8·4 = 64 and 2·8·8·4 / 8 = 64 → 160 + 2·128 = 416.
    counts = flops.flop_counts(8, 16, 1, 2, 4, 1, position_terms=2, relative_span=4, batch_tokens=8)
    assert counts["total"] == 1664 and counts["removed"] == 416
    # DeBERTa-base at T=128 and a large batch: about 1.28x (the position projections vanish per token)
    from transformers import DebertaConfig

    base = DebertaConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                         relative_attention=True, pos_att_type="c2p|p2c", max_position_embeddings=512)
    assert flops.relative_span(base, 128) == (2, 128)
    assert flops.flop_bound(base, 128, 144, batch_size=10**6)["bound_speedup"] == pytest.approx(1.278, abs=1e-3)
    assert flops.relative_span(tiny_config(), 128) == (0, 0)  # BERT: no position terms


def test_head_choices():
    variants = workloads.INFERENCE_VARIANTS
    assert workloads.chosen_heads(variants["1/2 constant"], 5, 2, 3) == {0: [0, 1, 2], 1: [0, 1]}  # layer-major
    assert workloads.chosen_heads(variants["1/2 constant"], 0, 2, 3) == {}
    # every other head: odd heads of every layer first, so half the heads touch every layer
    every_other = variants["1/2 constant, every other head"]
    assert workloads.chosen_heads(every_other, 3, 2, 4) == {0: [1, 3], 1: [1]}
    assert workloads.chosen_heads(every_other, 4, 2, 4) == {0: [1, 3], 1: [1, 3]}
    assert sorted(map(tuple, workloads.every_other(2, 4))) == sorted(map(tuple, workloads.layer_major(2, 4)))
    with pytest.raises(Exception, match="--sorted_heads"):
        workloads.chosen_heads(workloads.INFERENCE_VARIANTS["1/2 constant, ranked"], 2, 2, 4)


def test_inference_inputs_pad_the_rows_asked_for():
    config = workloads.tiny_config()
    everywhere = workloads.inference_inputs(config, 7, 16, "cpu")["attention_mask"]
    third = workloads.inference_inputs(config, 7, 16, "cpu", padded_rows="every third")["attention_mask"]
    assert everywhere.sum(1).tolist() == [12] * 7  # the last quarter of every row
    assert third.sum(1).tolist() == [12, 16, 16, 12, 16, 16, 12]  # rows 0, 3, 6 (issue 28's check)


@pytest.mark.parametrize("config", [workloads.tiny_config(), tiny_decoder_config("llama")], ids=["bert", "llama"])
def test_training_variants_build_what_they_say(config):
    class Args:
        tiny, device, batch_size, model_name_or_path = True, "cpu", 2, None

    heads = config.num_hidden_layers * config.num_attention_heads
    for name, variant in workloads.TRAINING_VARIANTS.items():
        model, _, step = workloads.training_setup(Args, config, name, seq_len=8)
        step()  # one step runs
        papa = model.config.papa  # what the patch recorded
        assert papa.get("mix_all_heads", False) == variant.mix, name
        assert len(papa.get("static_heads", [])) == int(variant.constant_fraction * heads), name
        trainable = [n for n, p in model.named_parameters() if p.requires_grad]
        assert (len(trainable) == len(list(model.parameters()))) == (variant.mode is None), name


@pytest.mark.slow
@pytest.mark.parametrize("n, ranks", [(6, (1, 6)), (8, (1, 8)), (10, (2, 9)), (15, (4, 12)), (20, (6, 15)),
                                      (30, (10, 21)), (40, (14, 27))])
def test_median_interval_matches_the_published_ranks(n, ranks):
    """1-based ranks of the 95% distribution-free interval for the median (Conover, Practical
    Nonparametric Statistics, table A3 / the usual sign-test table)."""
    assert harness.median_interval([10.0 * r for r in range(n, 0, -1)]) == (10.0 * ranks[0], 10.0 * ranks[1])


def test_median_interval_covers_the_median_in_95_percent_of_samples():
    rng = random.Random(0)
    hits = 0
    for _ in range(4000):  # exponential samples (skewed, like timings): median ln 2
        low, high = harness.median_interval([rng.expovariate(1.0) for _ in range(20)])
        hits += low <= math.log(2) <= high
    assert 0.95 <= hits / 4000 <= 0.975  # exact coverage at n = 20 is 95.86%


def test_clustered_interval_with_one_cluster_is_a_bootstrap_of_the_median():
    """One cluster: a plain bootstrap of the median, whose 95% interval for 41 evenly spaced
    values spans about the binomial interval's ranks (Conover's table: 14th to 28th of 40; here 41)."""
    samples = [float(i) for i in range(41)]
    low, high = harness.clustered_median_interval(samples, [0] * 41)
    binomial_low, binomial_high = harness.median_interval(samples)
    assert abs(low - binomial_low) <= 2 and abs(high - binomial_high) <= 2
    assert harness.clustered_median_interval(samples, [0] * 41) == (low, high)  # seeded: reproducible


def test_clustered_interval_widens_with_the_spread_between_clusters():
    """Five processes, tight within, far apart: the interval must reach across the processes'
    levels, where the binomial interval of the pooled rounds stays near the middle one."""
    rng = random.Random(1)
    levels = [1.00, 1.02, 1.04, 1.06, 1.08]
    samples = [level + rng.gauss(0, 0.001) for level in levels for _ in range(30)]
    clusters = [i for i in range(5) for _ in range(30)]
    low, high = harness.clustered_median_interval(samples, clusters)
    naive_low, naive_high = harness.median_interval(samples)
    assert low <= 1.021 and high >= 1.059
    assert naive_high - naive_low < 0.01


@pytest.mark.slow
def test_clustered_interval_covers_a_random_effects_median():
    """Rounds x = μ_p + ε with process effects μ_p ~ N(0, 1) and ε ~ N(0, 0.1): the median of the
    population is 0. The two-stage bootstrap over 8 processes covers it in most samples (a
    percentile bootstrap over few clusters undercovers somewhat); the binomial interval of the
    pooled rounds, which takes them as independent, misses it most of the time."""
    rng = random.Random(2)
    hits = naive_hits = 0
    trials = 120
    for _ in range(trials):
        effects = [rng.gauss(0, 1) for _ in range(8)]
        samples = [mu + rng.gauss(0, 0.1) for mu in effects for _ in range(15)]
        clusters = [p for p in range(8) for _ in range(15)]
        low, high = harness.clustered_median_interval(samples, clusters, resamples=400, seed=rng.randrange(10**6))
        hits += low <= 0 <= high
        naive_low, naive_high = harness.median_interval(samples)
        naive_hits += naive_low <= 0 <= naive_high
    assert hits / trials >= 0.8 and naive_hits / trials <= 0.5


def test_processes_pool_fresh_processes(tmp_path):
    out = tmp_path / "pooled.json"
    run_command(script("benchmark_papa.py") + ["--tiny", "--threads", "1", "--repeats", "3", "--processes", "2",
                                               "--seq_lens", "16", "--skip", "averaging", "training",
                                               "--variants", "all constant", "--json", str(out)], timeout=240)
    results = json.loads(out.read_text())
    rows = results["inference"]
    assert [r["variant"] for r in rows] == ["stock", "PAPA, all constant"]
    assert [r["n"] for r in rows] == [2 * 3 * 2, 2 * 3]  # rounds of both processes; stock twice per round
    assert all(r["processes"] == 2 for r in rows)
    rounds = rows[1]["rounds"]  # the variant's raw rounds, labelled by process, for later pooling
    assert rounds["process"] == [0, 0, 0, 1, 1, 1] and len(rounds["seconds"]) == len(rounds["stock_beside_seconds"]) == 6
    assert statistics.median(b / t for b, t in zip(rounds["stock_beside_seconds"], rounds["seconds"])) == pytest.approx(
        rows[1]["paired_speed_ratio"])
    ratios = [b / t for b, t in zip(rounds["stock_beside_seconds"], rounds["seconds"])]
    assert tuple(rows[1]["paired_speed_ratio_ci95"]) == harness.clustered_median_interval(ratios, rounds["process"])
    table = out.with_suffix(".md").read_text()
    assert "3 rounds in each of 2 fresh processes, pooled" in table and "two-stage bootstrap" in table

    # a real run pools (here with a copy of itself): every round twice, each copy's processes their own clusters
    copy = tmp_path / "again.json"
    copy.write_text(out.read_text())
    done = run_command(script("benchmark_papa.py") + ["--pool", str(out), str(copy), "--json", str(tmp_path / "p.json")])
    pooled = json.loads((tmp_path / "p.json").read_text())["inference_pooled"]
    assert [(r["variant"], r["runs"], r["processes"], r["rounds"]) for r in pooled] == [("PAPA, all constant", 2, 4, 12)]
    assert pooled[0]["paired_speed_ratio"] == pytest.approx(rows[1]["paired_speed_ratio"])
    assert "| 16 | PAPA, all constant | 8/8 | 2 | 4 | 12 |" in done.stdout


def test_smoke_run_tiny(tmp_path):
    out = tmp_path / "tiny.json"
    ranking = tmp_path / "sorted_heads.json"
    ranking.write_text(json.dumps([[1, 3], [0, 2], [1, 0], [0, 0], [1, 1], [0, 3], [0, 1], [1, 2]]))
    done = run_command(
        script("benchmark_papa.py") + ["--tiny", "--threads", "1", "--repeats", "2", "--warmup", "1",
                                       "--sorted_heads", ranking,
                                       "--avg_batches", "2", "--avg_repeats", "2", "--train_repeats", "2",
                                       "--seq_lens", "16", "32", "--avg_seq_len", "16", "--train_seq_len", "16",
                                       "--batch_size", "4", "--json", out], timeout=240)
    results = json.loads(out.read_text())
    assert {"machine", "settings", "flop_model", "inference", "averaging", "training", "goals"} <= set(results)
    for key in ("cpu", "torch_threads", "torch", "transformers", "date"):
        assert results["machine"][key]

    inference = results["inference"]
    assert {r["seq_len"] for r in inference} == {16, 32}
    assert len(inference) == 2 * (1 + len(workloads.INFERENCE_VARIANTS))  # stock + every patched variant per length
    assert {r["constant_heads"] for r in inference} == {0, 4, 7, 8}
    assert {"stock", "PAPA, 1/2 constant, ranked", "PAPA, 1/2 constant, every other head"} <= {r["variant"] for r in inference}
    # each figure recomputed from the raw rounds in the JSON; 2 rounds: the 95% interval is their whole range
    by_name = {(r["seq_len"], r["variant"]): r for r in inference}
    for (T, name), row in by_name.items():
        stock = by_name[T, "stock"]
        assert row["speed_ratio_to_stock"] == pytest.approx(stock["median_s"] / row["median_s"])
        if name == "stock":
            assert row["paired_speed_ratio"] == 1.0 and row["rounds"] is None
            continue
        seconds, beside = row["rounds"]["seconds"], row["rounds"]["stock_beside_seconds"]
        assert len(seconds) == len(beside) == 2 and row["median_s"] == pytest.approx(statistics.median(seconds))
        ratios = [b / t for b, t in zip(beside, seconds)]
        assert row["paired_speed_ratio"] == pytest.approx(statistics.median(ratios))
        assert row["paired_speed_ratio_ci95"] == pytest.approx([min(ratios), max(ratios)])
    mixing = [r for r in inference if "mixing_time_ratio" in r]
    assert [r["variant"] for r in mixing] == ["PAPA, 1/2 constant, every other head"] * 2
    for row in mixing:  # per round: (mixed / the stock beside it) / (whole layers / the stock beside it)
        whole = by_name[row["seq_len"], "PAPA, 1/2 constant"]["rounds"]
        ratios = [(m / bm) / (w / bw) for m, bm, w, bw in zip(row["rounds"]["seconds"], row["rounds"]["stock_beside_seconds"],
                                                              whole["seconds"], whole["stock_beside_seconds"])]
        assert row["mixing_time_ratio"] == pytest.approx(statistics.median(ratios))
        assert row["mixing_time_ratio_ci95"] == pytest.approx([min(ratios), max(ratios)])
    for row in inference:  # between 1 and the FLOP bound; the stock's own share is one per length
        assert 1.0 <= row["time_weighted_bound"] <= row["flop_bound_speedup"] + 1e-12
        assert 0.0 < row["stock_modelled_time_share"] < 1.0
    full = [r for r in inference if r["constant_heads"] == 8]
    assert all(r["flop_bound_speedup"] > 1 and r["percent_of_bound"] is not None for r in full)

    averaging = results["averaging"]
    assert len(averaging["timing"]) == 4
    plain = next(r for r in averaging["timing"] if r["variant"] == "plain eager forward, output_attentions")
    ours = next(r for r in averaging["timing"] if r["variant"] == "accumulate_attention (ours)")
    for row in averaging["timing"]:  # timed batch by batch: 2 passes over 2 batches; 4 rounds: the whole range
        assert row["n"] == len(row["seconds"]) == 2 * 2
        assert row["median_s"] == pytest.approx(statistics.median(row["seconds"]))
        assert row["time_ratio_to_plain"] == pytest.approx(row["median_s"] / plain["median_s"])
        ratios = [t / p for t, p in zip(row["seconds"], plain["seconds"])]
        assert row["paired_time_ratio_to_plain"] == pytest.approx(statistics.median(ratios))
        assert row["paired_time_ratio_ci95"] == pytest.approx([min(ratios), max(ratios)])
        to_ours = [t / o for t, o in zip(row["seconds"], ours["seconds"])]
        assert row["paired_time_ratio_to_ours"] == pytest.approx(statistics.median(to_ours))
    assert any(g["goal"] == "averaging: --mean_corrections ≤ 1.05x accumulate_attention" for g in results["goals"])
    assert [(m["batches"], m["layers"]) for m in averaging["memory"]][:3] == [(2, 2), (8, 2), (2, 1)]
    for row in averaging["memory"] + results["training"]["rows"]:  # measured in the child (memory.peak_increase)
        assert row["peak_increase_mb"] == pytest.approx(row["peak_rss_after_mb"] - row["peak_rss_before_mb"])

    training = results["training"]["rows"]
    assert [r["variant"] for r in training] == list(workloads.TRAINING_VARIANTS)
    assert all(r["trainable_parameters"] > 0 for r in training)
    full_ft = next(r for r in training if r["variant"] == "full fine-tuning")
    assert all(r["trainable_parameters"] < full_ft["trainable_parameters"] for r in training if r is not full_ft)
    for row in training[1:]:  # every mode beside the stock probing step keeps its raw rounds, for --pool
        assert len(row["rounds"]["seconds"]) == len(row["rounds"]["stock_beside_seconds"]) == 2, row["variant"]
    bounded = [r for r in training if "flop_bound_speedup" in r]
    assert [r["variant"] for r in bounded] == ["probing (1/2 constant)", "probing (all constant)",
                                               "probing (all constant, probabilities path)"]
    for row in bounded:  # removed FLOP share 1 − 1/bound, weighted by the stock step's matmul time share s
        s, bound = row["stock_modelled_time_share"], row["flop_bound_speedup"]
        assert 0 < s < 1 and 1 < row["time_weighted_bound"] < bound
        assert row["time_weighted_bound"] == pytest.approx(1 / (1 - (1 - 1 / bound) * s))

    assert results["goals"] and all(isinstance(g["met"], bool) for g in results["goals"])
    table = out.with_suffix(".md").read_text()
    assert "## Inference" in table and "## Averaging pass" in table and "## One training step" in table
    assert "Cost of mixing dynamic and constant heads in a layer" in table
    assert "| stock |" in done.stdout
    assert table == markdown(results)  # the .md beside the JSON is the printed report
    assert results["settings"]["command"].startswith("papa-benchmark --tiny")
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically


def allocate_and_fill(megabytes):
    """In a fresh child: the peak memory figures of filling a new tensor of `megabytes` MiB."""
    return memory.peak_increase(lambda: torch.ones(megabytes * 2**18), "cpu", 131072)  # float32: 4 bytes


def test_peak_increase_sees_a_known_allocation_in_a_fresh_process():
    """What the memory rows measure: a 16 and a 64 MiB tensor filled in fresh children raise the peak by
    16 and 64 MiB, plus what a first tensor operation sets up (~5 MiB here), their difference by 48 MiB."""
    small = fork_server.call(allocate_and_fill, 16)["peak_increase_mb"]
    large = fork_server.call(allocate_and_fill, 64)["peak_increase_mb"]
    assert 16 <= small <= 16 + 8 and 64 <= large <= 64 + 8
    assert abs((large - small) - 48) <= 1


def test_bad_flags_are_one_clear_error(capsys):
    from papa.cli.benchmark import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--tiny", "--repeats", "0"])
    assert exit_info.value.code == 2 and capsys.readouterr().err == "error: --repeats must be positive; got 0\n"
    with pytest.raises(SystemExit) as exit_info:
        main(["--tiny", "--variants", "1/2 constant, ranked"])
    assert exit_info.value.code == 2 and capsys.readouterr().err == (
        "error: --variants '1/2 constant, ranked' needs --sorted_heads (a ranking run's sorted_heads.json)\n")


def test_variants_choose_the_inference_rows_in_bf16(tmp_path):
    """--variants picks the rows; --dtype bf16 casts the stock model before the PAPA copies are patched from it (the
    time-weighted bound, profiled on the fp32 eager forward only, is then not given)."""
    out = tmp_path / "few.json"
    run_command(script("benchmark_papa.py") + ["--tiny", "--repeats", "2", "--seq_lens", "16", "--skip", "averaging",
                                               "training", "--variants", "all constant", "1/2 constant",
                                               "--dtype", "bf16", "--json", str(out)])
    rows = json.loads(out.read_text())["inference"]
    assert [r["variant"] for r in rows] == ["stock", "PAPA, 1/2 constant", "PAPA, all constant"]
    assert [r["n"] for r in rows] == [2 * 3, 2, 2]  # stock before and after each of the two, every round
    assert all(r["stock_modelled_time_share"] is None and r["time_weighted_bound"] is None for r in rows)


def test_modelled_time_share_tells_matrix_products_from_elementwise_work():

    a = torch.randn(256, 256)
    assert harness.modelled_time_share(lambda: torch.mm(a, a)) > 0.9
    assert harness.modelled_time_share(lambda: torch.nn.functional.gelu(a)) == 0.0


def test_time_weighted_bound_by_hand():
    assert flops.time_weighted_bound(0.2, 1.0) == pytest.approx(1.25)  # all time modelled: the FLOP bound
    assert flops.time_weighted_bound(0.2, 0.5) == pytest.approx(1 / 0.9)
    assert flops.time_weighted_bound(0.2, 0.0) == 1.0

