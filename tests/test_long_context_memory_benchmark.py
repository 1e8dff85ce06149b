"""benchmarks/long_context_memory.py: the patched model it measures keeps the cache a constant group's reach allows
(the toeplitz profile cut by --window), counted by hand from the ranking, and its measured children get the
allocator setting the report names."""

import json
from types import SimpleNamespace

import pytest
import torch

from conftest import REPO, load_module
from papa.errors import PapaError

bench = load_module(REPO / "benchmarks" / "long_context_memory.py")
SORT = REPO / "findings/long_context_retrieval/smollm2_t2048/sort_gates/sorted_heads.json"
TOEPLITZ = REPO / "findings/long_context_reach/t2048/toeplitz"


def test_children_get_the_mmap_threshold_or_glibc_default(monkeypatch):
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "7")
    fixed = bench.child_environment(SimpleNamespace(threads=1, malloc_mmap_threshold=131072))
    default = bench.child_environment(SimpleNamespace(threads=2, malloc_mmap_threshold=0))
    assert (fixed["MALLOC_MMAP_THRESHOLD_"], fixed["OMP_NUM_THREADS"]) == ("131072", "1")
    assert "MALLOC_MMAP_THRESHOLD_" not in default and default["OMP_NUM_THREADS"] == "2"


@pytest.mark.parametrize("window", [64, None])
def test_toeplitz_reach_sets_the_cache_bytes(window):
    from transformers import AutoTokenizer

    from papa.models.bundled import local_model_path

    try:
        path = local_model_path("smollm2")
    except PapaError as err:
        pytest.skip(f"the bundled smollm2 cannot be had here: {err}")
    args = SimpleNamespace(sorted_heads=str(SORT), replacement="toeplitz", constants=str(TOEPLITZ), window=window,
                           sinks=4)
    model = bench.build("smollm2", args, 0.5)
    T = 300
    ids = bench.prompt_ids(AutoTokenizer.from_pretrained(path), T)
    cache, _, _ = bench.prefill(model, ids)

    # by hand: the first 45 whole groups of the ranking are constant; a constant group keeps its sink (1 position
    # in this file) and the last D − 1 values, no key; a dynamic group keeps T keys and T values (float32, d = 64)
    config, size = model.config, 3
    seen, constant = {}, set()
    for layer, head in json.load(open(SORT)):
        seen[layer, head // size] = seen.get((layer, head // size), 0) + 1
        if seen[layer, head // size] == size and len(constant) < 45:
            constant.add((layer, head // size))
    reach = min(T, 1 + ((window or 2048) - 1))
    d = config.head_dim
    groups = config.num_hidden_layers * config.num_key_value_heads
    expected = 4 * d * ((groups - len(constant)) * 2 * T + len(constant) * reach)
    assert bench.cache_total(cache) == expected
    assert len(ids[0]) == T and torch.isfinite(model(input_ids=ids[:, :8]).logits).all()
