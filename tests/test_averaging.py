"""Attention averaging against a direct computation, and across processes."""

import copy
import os

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.testing import assert_close
from transformers import BertConfig, BertModel
from transformers.pytorch_utils import Conv1D

from papa.method.averaging import AttentionAverager, accumulate_attention, shard
from papa.families import attention_modules
from tiny_decoders import DECODER_NAMES, SDPA_DECODERS, family_batch, tiny_family_model
from tiny_encoders import FAMILY_NAMES, H as FH, L as FL, T as FT

ALL_FAMILIES = FAMILY_NAMES + DECODER_NAMES  # encoders and decoders: the same L, H, T

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
        averager = accumulate_attention(model, batches(ids, mask, 4, shard(len(ids), rank, world_size)), T,
                                        mean_outputs=True)
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
    single = accumulate_attention(model, batches(ids, mask, 4), T, mean_outputs=True)
    assert torch.load(tmp_path / "count.pt") == len(ids)  # 11 examples over 2 or 3 ranks: none duplicated
    assert_close(torch.load(tmp_path / "avgs.pt", weights_only=True), single.averages())
    assert_close(torch.load(tmp_path / "mean_outputs.pt", weights_only=True), single.mean_outputs())
    assert_close(torch.load(tmp_path / "attention_sums.pt", weights_only=True), single.attention_sums.float())


def test_mean_outputs_equal_direct_computation(tmp_path):
    """Each head's mean context vector A·V per position, example by example in numpy from the hidden states."""
    model = tiny_eager_model()
    ids, mask = examples()
    averager = accumulate_attention(model, batches(ids, mask, 4), T, mean_outputs=True)
    d = 12 // H
    sums, counts = np.zeros((L, H, T, d)), np.zeros(T)
    with torch.no_grad():
        for i in range(len(ids)):
            out = model(ids[i : i + 1], attention_mask=mask[i : i + 1], output_attentions=True, output_hidden_states=True)
            m = mask[i].numpy().astype(np.float64)
            counts += m
            for layer in range(L):
                x = out.hidden_states[layer][0].numpy().astype(np.float64)
                value = model.encoder.layer[layer].attention.self.value
                v = x @ value.weight.numpy().T.astype(np.float64) + value.bias.numpy()
                for h in range(H):
                    context = out.attentions[layer][0, h].numpy().astype(np.float64) @ v[:, h * d : (h + 1) * d]
                    sums[layer, h] += context * m[:, None]
    expected = np.divide(sums, counts[:, None], out=np.zeros_like(sums), where=counts[:, None] > 0)
    np.testing.assert_allclose(averager.mean_outputs().numpy(), expected, rtol=1e-5, atol=1e-6)
    averager.save(tmp_path)
    assert torch.load(tmp_path / "mean_outputs.pt", weights_only=True).shape == (L, H, T, d)


@pytest.mark.parametrize("name", ALL_FAMILIES)
def test_every_family_averages_equal_direct_computation(name):
    """Stock sdpa models are averaged too (switched to eager for the pass, then restored). A decoder's averages
    (one matrix per query head, whatever its K/V grouping) are lower-triangular, as every causal head is."""
    impl = "eager" if name.startswith("deberta") or name in set(DECODER_NAMES) - set(SDPA_DECODERS) else "sdpa"
    model = tiny_family_model(name, impl, head="base")
    ids, mask = family_batch(name, lengths=(FT, 7, 3, 9, 1))
    averager = accumulate_attention(model, batches(ids, mask, 2), FT)
    assert model.config._attn_implementation == impl
    reference = tiny_family_model(name, "eager", head="base")
    sums, patterns = np.zeros((FL, FH, FT, FT)), np.zeros((FT, FT))
    with torch.no_grad():
        for i in range(len(ids)):
            att = reference(input_ids=ids[i : i + 1], attention_mask=mask[i : i + 1], output_attentions=True).attentions
            p = np.outer(mask[i].numpy(), mask[i].numpy()).astype(np.float64)
            patterns += p
            for layer in range(FL):
                sums[layer] += att[layer][0].numpy().astype(np.float64) * p
    np.testing.assert_allclose(averager.full_sums().numpy(), sums, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(averager.pattern_sums.numpy(), patterns)
    assert averager.lower_triangle == (name in DECODER_NAMES)  # decoders keep their lower triangles only
    if name in DECODER_NAMES:
        assert torch.equal(averager.averages().triu(1), torch.zeros(FL, FH, FT, FT))
    # no hook is left behind: a later forward records nothing
    before = averager.attention_sums.clone()
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
    assert torch.equal(before, averager.attention_sums)


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_mean_outputs_of_one_example_reproduce_it(name):
    """Every head outputting its mean context vector over a single example is the stock model on it."""
    from papa import patch_model

    stock = tiny_family_model(name, "eager", head="token")
    ids, mask = family_batch(name, lengths=(8,))
    means = accumulate_attention(stock, batches(ids, mask, 1), FT, mean_outputs=True).mean_outputs()
    everything = [[layer, head] for layer in range(FL) for head in range(FH)]
    ablated = patch_model(copy.deepcopy(stock), static_heads=everything, mean_outputs=means)
    with torch.no_grad():
        got = ablated(input_ids=ids, attention_mask=mask).logits
        want = stock(input_ids=ids, attention_mask=mask).logits
    assert_close(got[mask == 1], want[mask == 1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ALL_FAMILIES)
def test_averaging_a_partly_patched_model_reports_stock_head_order(name):
    """A patched layer lays its heads out [dynamic | replaced]; the averages come back in the stock order.

    Only the last layer is patched, so its dynamic heads see the stock inputs and must average as the
    stock heads do; its mean-output heads attend nowhere and output exactly their given means. (In the
    grouped-K/V decoders each replaced head shares its K/V group with a dynamic one.)
    """
    from papa import patch_model

    stock = tiny_family_model(name, "eager", head="base")
    ids, mask = family_batch(name, lengths=(FT, FT))  # no padding: dynamic heads equal stock heads
    want = accumulate_attention(stock, batches(ids, mask, 2), FT, mean_outputs=True)
    last, replaced = FL - 1, [0, 2]  # layout [1, 3, 0, 2]: not the stock order
    means = torch.randn(FL, FH, FT, want.output_sums.shape[-1], generator=torch.Generator().manual_seed(4))
    patched = patch_model(copy.deepcopy(stock), static_heads={last: replaced}, mean_outputs=means)
    got = accumulate_attention(patched, batches(ids, mask, 2), FT, mean_outputs=True)
    for head in range(FH):
        if head in replaced:
            assert torch.equal(got.averages()[last, head], torch.zeros(FT, FT))
            assert_close(got.mean_outputs()[last, head], means[last, head])
        else:
            assert_close(got.averages()[last, head], want.averages()[last, head], rtol=1e-5, atol=1e-6)
            assert_close(got.mean_outputs()[last, head], want.mean_outputs()[last, head], rtol=1e-5, atol=1e-5)
    assert_close(got.averages()[:last], want.averages()[:last], rtol=1e-5, atol=1e-6)


def modules_started(encoder, run):
    """Names of the encoder's modules in the order their forwards started while `run()` ran."""
    started = []
    handles = [module.register_forward_pre_hook(lambda module, args, name=name: started.append(name))
               for name, module in encoder.named_modules() if name]
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()
    return started


@pytest.mark.parametrize("mean_outputs", [False, True], ids=["attention", "mean_outputs"])
@pytest.mark.parametrize("name", ALL_FAMILIES)
def test_the_averaging_forward_ends_after_the_last_layers_statistics(name, mean_outputs):
    """The pass starts a plain forward's modules in its order up to the last layer's attention (and, for
    mean outputs, the projection reading its heads), then stops: that layer's feed-forward never runs."""
    model = tiny_family_model(name, "eager", head="base")
    ids, mask = family_batch(name)
    with torch.no_grad():
        full = modules_started(model, lambda: model(input_ids=ids, attention_mask=mask))
    ran = modules_started(model, lambda: accumulate_attention(model, batches(ids, mask, 3), FT,
                                                              mean_outputs=mean_outputs))
    assert ran == full[: len(ran)]
    modules = dict(model.named_modules())
    last_attention = next(n for n, m in modules.items() if m is attention_modules(model)[-1])
    assert last_attention in ran
    skipped_linears = [n for n in full[len(ran):] if isinstance(modules[n], (torch.nn.Linear, Conv1D))]  # GPT-2: Conv1D
    assert len(skipped_linears) >= 2, skipped_linears  # the last feed-forward block's two (or more)
