"""A decoder's constants held as block-row strips (papa/families/block_triangle.py): the strips against numpy's
lower triangle, their product and row sums against numpy, and a patched model holding strips against one holding
the full matrices (the verified path): padding, every path (fast, probabilities, attention dropout, mix mode), the
trained constants' gradient, half precision, and state dicts of either shape."""

import numpy as np
import pytest
import torch
from torch.testing import assert_close

import papa
from papa.families import attention_modules, block_triangle
from papa.families.block_triangle import BlockTriangle, block_triangle_size, pack_blocks
from papa.families.constant_math import constants_in, inverse_row_sums, row_scale
from papa.runs.outputs import same_tensor_shape
from tiny_decoders import H, L, T, right_padded_batch, tiny_decoder

STATIC = [[0, 1], [1, 0], [1, 3], [2, 2], [2, 3]]


def lower_triangular(S, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(S, n, n, generator=g, dtype=torch.float64).tril()


@pytest.mark.parametrize("n, block", [(10, 3), (12, 4), (7, 7), (5, 2)])
def test_strips_hold_numpys_lower_triangle(n, block):
    full = lower_triangular(3, n)
    packed = pack_blocks(full, block)
    rows = np.arange(n)
    # each row i is stored up to the end of its block: min(T, (i // b + 1)·b) columns
    assert packed.shape == (3, block_triangle_size(n, block)) == (3, int(np.minimum(n, (rows // block + 1) * block).sum()))
    assert torch.equal(BlockTriangle(packed, n, block).full(), torch.from_numpy(np.tril(full.numpy())))
    with pytest.raises(ValueError, match="strips"):
        BlockTriangle(packed[:, 1:], n, block)


def test_product_and_row_sums_against_numpy():
    full = lower_triangular(3, 10, seed=1)
    rhs = torch.randn(3, 10, 4, dtype=torch.float64)
    want = np.einsum("hij,hjn->hin", full.numpy(), rhs.numpy())
    for block in (2, 3, 5):
        strips = BlockTriangle(pack_blocks(full, block), 10, block)
        assert_close(strips.matmul(rhs), torch.from_numpy(want))
        assert_close(strips.matmul(rhs, in_place=True), torch.from_numpy(want))
        assert_close(strips.row_sums(torch.float64), torch.from_numpy(full.numpy().sum(-1)))
        valid = torch.tensor([[1.0] * 10, [1.0] * 6 + [0.0] * 4], dtype=torch.float64)  # (B, T)
        assert_close(row_scale(strips, valid), row_scale(full, valid))
        assert_close(inverse_row_sums(strips), inverse_row_sums(full))
    values = pack_blocks(full, 3).requires_grad_(True)  # autograd reaches the stored values through every view
    BlockTriangle(values, 10, 3).matmul(rhs).sum().backward()
    # the full product's gradient, ones @ rhsᵀ, on every stored entry (inside a diagonal block above the diagonal too)
    assert_close(values.grad, pack_blocks(torch.ones(3, 10, 4, dtype=torch.float64) @ rhs.transpose(1, 2), 3))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_rows_are_the_full_matrices_rows(dtype):
    """constants_in scales each row to unit sum before rounding: a strip's row is the whole row."""
    full = lower_triangular(4, 12, seed=2).float() * 1e-6
    got = constants_in(BlockTriangle(pack_blocks(full, 4), 12, 4), dtype).full()
    assert torch.equal(got, constants_in(full, dtype))


def averages(seed=3):
    return lower_triangular(L * H, T, seed).float().view(L, H, T, T)


def patched(name, block, monkeypatch, **kwargs):
    """A tiny decoder patched holding strips of `block` rows (None: the full matrices)."""
    monkeypatch.setattr(block_triangle, "BLOCK", block or 10**6)
    model = papa.patch_model(tiny_decoder(name, "eager"), averages(), **kwargs)
    monkeypatch.setattr(block_triangle, "BLOCK", 256)
    return model


@pytest.mark.parametrize("name", ["llama", "mistral", "gpt2"])
@pytest.mark.parametrize("mix", [False, True])
def test_a_model_holding_strips_equals_one_holding_full_matrices(monkeypatch, name, mix):
    """Right and left padding; the fast and the probabilities paths; Mistral's window inside the strips."""
    kwargs = dict(mix_all_heads=True) if mix else dict(static_heads=STATIC)
    want_model, got_model = patched(name, None, monkeypatch, **kwargs), patched(name, 4, monkeypatch, **kwargs)
    module = attention_modules(got_model)[2]
    assert module.papa_block == 4 and module.constant_matrices.shape == (H if mix else 2, block_triangle_size(T, 4))
    assert attention_modules(want_model)[2].constant_matrices.shape == (H if mix else 2, T, T)
    ids, mask = right_padded_batch()
    for attention_mask in (mask, mask.flip(1)):
        with torch.no_grad():
            want = want_model(input_ids=ids, attention_mask=attention_mask, output_attentions=True)
            got = got_model(input_ids=ids, attention_mask=attention_mask, output_attentions=True)
            fast = got_model(input_ids=ids, attention_mask=attention_mask).logits
        real = attention_mask.bool()
        assert_close(got.logits[real], want.logits[real], rtol=1e-5, atol=1e-5)
        assert_close(fast[real], want.logits[real], rtol=1e-5, atol=1e-5)
        for a, b in zip(got.attentions, want.attentions):
            assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_dropout_and_the_trained_constants_gradient(monkeypatch):
    """Training with attention dropout, the constants trainable (the trained-constant control): the same seeded
    loss, and the strips' gradient is the full matrices' gradient packed."""
    want_model, got_model = (patched("llama", b, monkeypatch, static_heads=STATIC).train() for b in (None, 4))
    ids, mask = right_padded_batch()
    losses = []
    for model in (want_model, got_model):
        torch.manual_seed(7)
        loss = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss
        loss.backward()
        losses.append(loss)
    assert_close(losses[1], losses[0])
    for want, got in zip(attention_modules(want_model), attention_modules(got_model)):
        if want.constant_matrices is not None:
            assert_close(got.constant_matrices.grad, pack_blocks(want.constant_matrices.grad, 4), rtol=1e-5, atol=1e-7)


def test_state_dicts_of_either_shape_load(monkeypatch):
    """A strips model saves strips and loads them; a state dict of full matrices (a folder saved before) is
    packed as it loads; a checkpoint of either shape fits the run's model."""
    source = patched("llama", 4, monkeypatch, static_heads=STATIC)
    full = patched("llama", None, monkeypatch, static_heads=STATIC)
    for state in (source.state_dict(), full.state_dict()):
        target = patched("llama", 4, monkeypatch, static_heads=STATIC)
        for module in attention_modules(target):
            if module.constant_matrices is not None:
                module.constant_matrices.data.zero_()
        target.load_state_dict(state)
        for a, b in zip(attention_modules(target), attention_modules(source)):
            if a.constant_matrices is not None:
                assert torch.equal(a.constant_matrices, b.constant_matrices)
    S, N = attention_modules(source)[2].constant_matrices.shape
    monkeypatch.setattr(block_triangle, "BLOCK", 4)
    assert same_tensor_shape((S, T, T), (S, N)) and same_tensor_shape((S, N), (S, N))
    assert not same_tensor_shape((S, T + 1, T + 1), (S, N)) and not same_tensor_shape((S + 1, T, T), (S, N))


def test_long_sequences_hold_strips_by_default():
    model = papa.patch_model(tiny_decoder("llama", "eager"), torch.rand(L, H, 512, 512).tril(), static_heads=STATIC)
    module = attention_modules(model)[1]
    assert module.papa_block == block_triangle.BLOCK == 256
    assert module.constant_matrices.shape == (2, block_triangle_size(512, 256)) == (2, 256 * 256 * 3)
