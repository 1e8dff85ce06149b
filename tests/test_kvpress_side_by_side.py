"""The peer benchmark's own arithmetic (findings/kvpress_side_by_side): its Wilson interval against scipy's, the
table's cache ratio against the stock row of the same prompt, its paired differences (pairing, the prompts used, the
normal approximation), and the measuring code both sides share, on a tiny
decoder (its greedy decoding against transformers' generate). kvpress itself is not needed here."""

import functools
import json

import pytest
import torch

from conftest import REPO, load_module

FOLDER = REPO / "findings" / "kvpress_side_by_side"
table = load_module(FOLDER / "table.py")
measure = load_module(FOLDER / "measure.py")


@pytest.mark.parametrize("found, n", [(0, 10), (10, 10), (5, 10), (1, 20), (81, 263), (40, 50)])
def test_wilson_matches_scipy(found, n):
    from scipy.stats import binomtest

    interval = binomtest(found, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert table.wilson(found, n) == pytest.approx((interval.low, interval.high), abs=1e-12)


def test_the_table_divides_by_the_stock_row_of_the_same_prompt(tmp_path):
    rows = [{"method": "stock", "fraction": 0.0, "length": 8, "index": i, "found": True, "cache_bytes": b,
             "prefill_s": 1.0, "decode_s_per_token": 0.1, "peak_rss_growth": 0} for i, b in ((0, 100), (1, 200))]
    rows += [{"method": "press", "fraction": 0.5, "length": 8, "index": i, "found": i == 0, "cache_bytes": b,
              "removed_share": 0.5, "prefill_s": 1.0, "decode_s_per_token": 0.1, "peak_rss_growth": 0}
             for i, b in ((0, 50), (1, 120))]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table.main(["--rows", str(path), "--out", str(tmp_path / "t.md")])
    press = next(line for line in (tmp_path / "t.md").read_text().splitlines() if line.startswith("| press"))
    assert "| 0.550 |" in press and "| 1/2 |" in press  # median of 0.5 and 0.6, not of the bytes


def test_paired_difference_pairs_the_prompts_and_matches_the_normal_interval():
    import numpy as np

    rng = np.random.default_rng(1)
    same = rng.integers(0, 2, 30).astype(float)
    assert table.paired_difference(same, same, rng) == (0.0, 0.0, 0.0)  # unpaired, this would be about ±25 points
    a = np.array([1.0] * 30 + [0.0] * 10 + [1.0] * 10)  # 50 prompts: 10 found by a only, the rest agree
    b = np.array([1.0] * 30 + [0.0] * 10 + [0.0] * 10)
    mean, low, high = table.paired_difference(a, b, rng)
    d = 100 * (a - b)
    half = 1.959964 * d.std() / np.sqrt(len(d))  # the normal approximation the percentile bootstrap tends to
    assert mean == pytest.approx(20.0)
    assert (low, high) == pytest.approx((mean - half, mean + half), abs=2.5)


def test_the_differences_use_only_prompts_both_methods_ran():
    rows = [{"method": m, "fraction": 0.5, "length": 8, "index": i, "found": f}
            for m, i, f in (("PAPA x", 0, True), ("PAPA x", 1, True), ("PAPA x", 2, False),
                            ("kvpress y", 0, False), ("kvpress y", 1, True))]
    line = next(line for line in table.differences(rows) if line.startswith("| kvpress y"))
    assert "+50 [" in line and "(n = 2)" in line


def test_papa_fractions_pair_with_the_nearest_press_fraction():
    assert table.nearest_fraction(66 / 270, [0.25, 0.5, 0.75]) == 0.25
    assert table.nearest_fraction(204 / 270, [0.25, 0.5, 0.75]) == 0.75
    assert table.nearest_fraction(0.4, [0.25, 0.5, 0.75]) is None  # 0.1 from the nearest: not compared
    rows = [{"method": m, "fraction": f, "length": 8, "index": i, "found": hit}
            for m, f, hits in (("PAPA x", 204 / 270, (1, 1)), ("kvpress y", 0.75, (0, 1)), ("kvpress y", 0.25, (1, 1)))
            for i, hit in enumerate(hits)]
    lines = table.differences(rows)
    assert any("PAPA 0.756 removed against the presses' 0.75" in line for line in lines)
    rows_y = [line for line in lines if line.startswith("| kvpress y")]
    assert len(rows_y) == 1 and rows_y[0].startswith("| kvpress y | +50 [")  # against 0.75's (0, 1), not 0.25's


def test_times_with_ranges_give_the_median_and_the_extremes():
    assert table.spread([3.0, 1.0, 2.0, 10.0], "{:.1f}", True) == "2.5 (1.0–10.0)"
    assert table.spread([3.0, 1.0, 2.0], "{:.2f}", False) == "2.00"


@pytest.mark.parametrize("task", ["passkey", "passkey_multi", "multikey"])
def test_each_prompt_splits_into_context_question_and_answer(task):
    """prompts.py's split, read back as text: the three parts make the example, the question is the one asked (the
    asked door's, or the asked key's) and ends where the answer starts, and the answer is the asked key's."""
    from transformers import AutoTokenizer

    from papa.data.retrieval import make_examples
    from papa.errors import PapaError
    from papa.models.bundled import local_model_path

    prompts = load_module(FOLDER / "prompts.py")
    try:
        tokenizer = AutoTokenizer.from_pretrained(local_model_path("smollm2"))
    except PapaError as err:
        pytest.skip(f"the bundled SmolLM2 cannot be had here: {err}")
    for example in make_examples(task, tokenizer, 400, 5, "validation"):
        context, question, answer = prompts.split_prompt(tokenizer, task, example)
        assert context + question + answer == example.input_ids
        asked = tokenizer.decode(question).strip()
        text = tokenizer.decode(example.input_ids[example.needle[0]:example.needle[1]])  # the asked needle
        if task == "multikey":
            assert asked.startswith("What is the special magic number for " + example.key)
            assert f"for {example.key} is: {tokenizer.decode(answer).strip()}." in text
        else:
            door = asked.split(" door?")[0].split()[-1] if task == "passkey_multi" else None
            assert asked.startswith("What is the pass key") and asked.endswith("is")
            assert (door is None) == ("door" not in text) and (door is None or f"the {door} door" in text)
            assert tokenizer.decode(answer).strip() == example.key and example.key in text


def test_greedy_decoding_on_a_prefilled_cache_is_generates():
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    model = LlamaForCausalLM(config).eval()
    context, question = torch.randint(0, 50, (20,)).tolist(), torch.randint(0, 50, (3,)).tolist()
    cache = DynamicCache(config=config)
    measure.prefill(model, cache, context)
    tokens, _ = measure.greedy(model, cache, question, 6, len(context))
    expected = model.generate(torch.tensor([context + question]), max_new_tokens=6, do_sample=False)
    assert tokens == expected[0, len(context) + len(question):].tolist()
    assert cache.get_seq_length() == len(context) + len(question) + 5  # the last token is not fed back


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    return LlamaForCausalLM(config).eval()


def test_positions_count_from_the_uncompressed_context_as_kvpress_pipeline_passes_them():
    from transformers import DynamicCache

    model = tiny_llama()
    cache = DynamicCache(config=model.config)
    measure.prefill(model, cache, list(range(20)))
    seen, forward = [], model.forward

    @functools.wraps(forward)  # its signature too: measure.cache_keyword reads it
    def recording(**kw):
        seen.append(kw["position_ids"].tolist())
        return forward(**kw)

    model.forward = recording
    for layer in cache.layers:  # a press that kept the last 8 tokens
        layer.keys, layer.values = layer.keys[:, :, -8:], layer.values[:, :, -8:]
    measure.greedy(model, cache, [1, 2, 3], 3, 20)
    assert seen == [[[20]], [[21]], [[22]], [[23]], [[24]]]  # not 8, 9, ...: the cache's length


def test_a_cache_whose_layers_differ_in_length_decodes():
    from transformers import DynamicCache

    model = tiny_llama()
    cache = DynamicCache(config=model.config)
    measure.prefill(model, cache, list(range(20)))
    layer = cache.layers[1]  # per-layer budgets (PyramidKV): layer 1 keeps fewer tokens than layer 0
    layer.keys, layer.values = layer.keys[:, :, -12:], layer.values[:, :, -12:]
    tokens, _ = measure.greedy(model, cache, [1, 2, 3], 4, 20)  # a 3-token forward fails on its mask here
    assert len(tokens) == 4 and cache.layers[1].keys.shape[2] == 12 + 3 + 3
