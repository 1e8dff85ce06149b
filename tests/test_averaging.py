"""Attention averaging against a direct computation, and across processes."""

import os

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.testing import assert_close
from transformers import BertConfig, BertModel

from papa.averaging import AttentionAverager, accumulate_attention, shard

L, H, T = 2, 3, 8


def tiny_eager_model(seed=0):
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=50, hidden_size=12, num_hidden_layers=L, num_attention_heads=H,
                        intermediate_size=16, max_position_embeddings=32)
    config._attn_implementation = "eager"
    return BertModel(config).eval()


def examples(n=11, seed=3):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, 50, (n, T), generator=g)
    mask = torch.zeros(n, T, dtype=torch.long)
    for i in range(n):
        mask[i, : int(torch.randint(1, T + 1, (1,), generator=g))] = 1
    mask[2, 4] = 0  # a hole in the middle, as the PAPA layout makes
    mask[2, -1] = 1
    return ids, mask


def batches(ids, mask, size, indices=None):
    indices = list(range(len(ids))) if indices is None else indices
    for start in range(0, len(indices), size):
        part = indices[start : start + size]
        yield {"input_ids": ids[part], "attention_mask": mask[part]}


def direct_averages(model, ids, mask):
    """Example by example, in float64 numpy, straight from the definition."""
    sums = np.zeros((L, H, T, T))
    patterns = np.zeros((T, T))
    with torch.no_grad():
        for i in range(len(ids)):
            att = model(ids[i : i + 1], attention_mask=mask[i : i + 1], output_attentions=True).attentions
            m = mask[i].numpy().astype(np.float64)
            p = np.outer(m, m)
            patterns += p
            for layer in range(L):
                sums[layer] += att[layer][0].numpy().astype(np.float64) * p
    avgs = np.divide(sums, patterns, out=np.zeros_like(sums), where=patterns > 0)
    return sums, patterns, avgs


def test_averages_equal_direct_computation(tmp_path):
    model = tiny_eager_model()
    ids, mask = examples()
    averager = accumulate_attention(model, batches(ids, mask, 4), T)
    sums, patterns, avgs = direct_averages(model, ids, mask)
    np.testing.assert_allclose(averager.attention_sums.numpy(), sums, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(averager.pattern_sums.numpy(), patterns)
    assert averager.num_examples == len(ids)
    averager.save(tmp_path)
    saved = torch.load(tmp_path / "avgs.pt", weights_only=True)
    assert saved.dtype == torch.float32 and saved.shape == (L, H, T, T)
    np.testing.assert_allclose(saved.numpy(), avgs, rtol=1e-5, atol=1e-7)
    assert torch.load(tmp_path / "attention_patterns_sums.pt", weights_only=True).shape == (T, T)
    assert torch.load(tmp_path / "attention_sums.pt", weights_only=True).shape == (L, H, T, T)
    assert sorted(os.listdir(tmp_path)) == ["attention_patterns_sums.pt", "attention_sums.pt", "avgs.pt"]


def test_unseen_positions_are_zero_not_nan():
    averager = AttentionAverager(1, 1, 4)
    mask = torch.tensor([[1, 1, 0, 0]])
    averager.update([torch.full((1, 1, 4, 4), 0.25)], mask)
    avgs = averager.averages()
    assert torch.isfinite(avgs).all()
    assert avgs[0, 0, 2:].abs().sum() == 0 and avgs[0, 0, :2, :2].eq(0.25).all()


def test_accumulates_in_float64():
    averager = AttentionAverager(1, 1, 2)
    probs = torch.full((1, 1, 2, 2), 0.1)
    for _ in range(2000):
        averager.update([probs], torch.ones(1, 2))
    assert averager.attention_sums.dtype == torch.float64
    exact = 2000 * float(probs[0, 0, 0, 0])  # 2000 x float32(0.1), in float64
    float32_sum = torch.zeros((), dtype=torch.float32)
    for _ in range(2000):
        float32_sum += probs[0, 0, 0, 0]
    assert abs(float32_sum.item() - exact) > 1e-5  # what float32 sums would lose
    assert abs(averager.attention_sums[0, 0, 0, 0].item() - exact) < 1e-9


def test_batch_size_does_not_matter():
    model = tiny_eager_model()
    ids, mask = examples()
    a = accumulate_attention(model, batches(ids, mask, 1), T).averages()
    b = accumulate_attention(model, batches(ids, mask, 5), T).averages()
    assert_close(a, b)


def test_shards_cover_every_example_once():
    for n, world in [(11, 2), (10, 3), (2, 4)]:
        parts = [shard(n, rank, world) for rank in range(world)]
        assert sorted(i for p in parts for i in p) == list(range(n))


def _worker(rank, world_size, port, out_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        model = tiny_eager_model()
        ids, mask = examples()
        averager = accumulate_attention(model, batches(ids, mask, 4, shard(len(ids), rank, world_size)), T)
        averager.all_reduce()
        if rank == 0:
            averager.save(out_dir)
            torch.save(averager.num_examples, os.path.join(out_dir, "count.pt"))
    finally:
        dist.destroy_process_group()


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("world_size", [2, 3])
def test_multi_process_average_equals_single_process(tmp_path, world_size):
    mp.spawn(_worker, args=(world_size, _free_port(), str(tmp_path)), nprocs=world_size, join=True)
    model = tiny_eager_model()
    ids, mask = examples()
    single = accumulate_attention(model, batches(ids, mask, 4), T)
    assert torch.load(tmp_path / "count.pt") == len(ids)  # 11 examples over 2 or 3 ranks: none duplicated
    assert_close(torch.load(tmp_path / "avgs.pt", weights_only=True), single.averages())
    assert_close(torch.load(tmp_path / "attention_sums.pt", weights_only=True), single.attention_sums.float())
