"""The benchmark on decoders (--model_type llama): the FLOP bound with grouped K/V by hand, the inference rows of a
small random Llama recomputed, and the averaging benchmark's loops agreeing on a decoder."""

import json
import statistics

import pytest
import torch

from papa.benchmark import flops, workloads
from papa.benchmark.arguments import BenchmarkArguments  # noqa: F401  (its help reads FAMILY_CONFIGS: import before patching)
from papa.cli.benchmark import main


def small_llama_config():
    """A small random Llama for the benchmark's decoder rows: 2 layers x 6 query heads reading 2 K/V heads
    (groups of 3, so every other head leaves no group without a dynamic head)."""
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=200, hidden_size=48, num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2,
                       intermediate_size=64, max_position_embeddings=128, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def test_flop_bound_with_grouped_key_values_by_hand():
    # h=8, ffn=16 (SwiGLU), 1 layer x 4 query heads (d=2) reading G=2 K/V heads, T=4. Per token: Q and O
    # projections 2·8·8 = 128 each, K and V 2·8·(2·2) = 64 each, FFN 3·2·8·16 = 768, QKᵀ 2·4·8 = 64, AV 64 → 1280.
    # Heads 0, 1, 2 constant: each removes its Q rows 2·8·2 = 32 and QKᵀ 2·4·2 = 16; K/V group 0 (heads 0 and 1)
    # has no dynamic head left, so its K rows 2·8·2 = 32 go too; group 1 keeps head 3 → 3·48 + 32 = 176.
    assert flops.constant_key_groups({0: [0, 1, 2]}, 4, 2) == 1
    assert flops.constant_key_groups({0: [1, 3]}, 4, 2) == 0  # every other head: no group without a dynamic head
    assert flops.constant_key_groups({0: [0, 1, 2, 3], 1: [3, 2]}, 4, 2) == 3
    counts = flops.flop_counts(8, 16, 1, 4, 4, 3, glu=True, num_key_value_heads=2, constant_key_groups=1)
    assert counts["total"] == 1280 and counts["removed"] == 176
    from transformers import LlamaConfig

    config = LlamaConfig(hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=4,
                         num_key_value_heads=2)
    assert flops.flop_bound(config, 4, 3, static_heads={0: [0, 1, 2]}) == counts
    with pytest.raises(ValueError, match="static_heads"):
        flops.flop_bound(config, 4, 3)


def test_llama_shaped_decoder_rows(tmp_path, monkeypatch, capsys):
    """--model_type llama: the stock sdpa decoder against PAPA copies, on right-padded inputs without token types;
    each FLOP bound recomputed from the grouped K/V count by hand (here a small Llama in place of the 12-layer one)."""
    full = workloads.FAMILY_CONFIGS["llama"][1]()  # the shapes the issue asks for
    assert (full.num_hidden_layers, full.hidden_size, full.num_attention_heads, full.num_key_value_heads,
            full.intermediate_size) == (12, 768, 12, 4, 2048)
    monkeypatch.setitem(workloads.FAMILY_CONFIGS, "llama", ("a small Llama", small_llama_config))
    config = small_llama_config()
    inputs = workloads.inference_inputs(config, 2, 16, "cpu")
    assert set(inputs) == {"input_ids", "attention_mask"} and inputs["attention_mask"][:, -4:].sum() == 0
    out = tmp_path / "llama.json"
    main(["--model_type", "llama", "--threads", "1", "--repeats", "2", "--seq_lens", "16", "--batch_size", "2",
          "--skip", "averaging", "training", "--variants", "1/2 constant", "1/2 constant, every other head",
          "all constant", "--json", str(out)])
    results = json.loads(out.read_text())
    assert results["settings"]["model"] == "random llama (a small Llama shapes)"
    assert results["settings"]["stock_attention"] == "sdpa"
    rows = {r["variant"]: r for r in results["inference"]}
    # constant heads and the K/V groups left without a dynamic head (2 layers x 2 groups of 3 query heads):
    # ½ layer by layer = layer 0 whole (2 groups); every other head (1, 3, 5 of each layer) empties none; all: 4
    expected = {"stock": (0, 0), "PAPA, 1/2 constant": (6, 2), "PAPA, 1/2 constant, every other head": (6, 0),
                "PAPA, all constant": (12, 4)}
    assert set(rows) == set(expected)
    for name, (k, groups) in expected.items():
        row = rows[name]
        assert row["constant_heads"] == k and row["total_heads"] == 12
        bound = flops.flop_counts(48, 64, 2, 6, 16, k, glu=True, num_key_value_heads=2, constant_key_groups=groups)
        assert row["flop_bound_speedup"] == pytest.approx(bound["bound_speedup"]), name
        if name != "stock":
            ratios = [b / t for b, t in zip(row["rounds"]["stock_beside_seconds"], row["rounds"]["seconds"])]
            assert row["paired_speed_ratio"] == pytest.approx(statistics.median(ratios))
    # the same k, fewer K rows pruned: every other head's bound lies below layer by layer's
    assert rows["PAPA, 1/2 constant, every other head"]["flop_bound_speedup"] < rows["PAPA, 1/2 constant"]["flop_bound_speedup"]
    assert "| 16 | PAPA, all constant | 12/12 |" in capsys.readouterr().out


def test_averaging_variants_agree_on_a_decoder():
    """The averaging benchmark's loops sum the same attention on a grouped-K/V decoder: ours (papa.method.averaging) and the
    original's (a [B, L, H, T, T] copy, masked by padding only; the causal zeros are in the probabilities already)."""
    from transformers import AutoModel

    torch.manual_seed(0)
    model = AutoModel.from_config(small_llama_config(), attn_implementation="eager").eval()
    batches = workloads.averaging_batches(model.config, 2, 3, 16)
    ours = workloads.AVERAGING_VARIANTS["accumulate_attention (ours)"](model, batches, 16, "cpu")
    original, _ = workloads.original_accumulate(model, batches, 16, "cpu")
    assert ours.full_sums().shape == (2, 6, 16, 16)  # query heads
    torch.testing.assert_close(ours.full_sums().float(), original, atol=1e-5, rtol=1e-5)
    assert torch.all(original.triu(1) == 0)  # nothing above the diagonal: causal
