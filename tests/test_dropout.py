"""Attention dropout in training: the dropout path (attentions not requested) against the probabilities path, the
masks' head order, and the mask and scale against F.dropout's multipliers.

Every family (encoders and the decoders of tests/tiny_decoders.py) on tiny random models and padded batches.
"""

import pytest
import torch
import torch.nn.functional as F
import transformers
from torch.testing import assert_close

import papa
from papa.families.constant_math import dropped_constant_output
from papa.families import attention_modules
from layer_reference import run
from numpy_attention import numpy_norm
from tiny_decoders import DECODER_NAMES, SDPA_DECODERS, family_batch, tiny_family_model
from tiny_encoders import FAMILY_NAMES, H, L, T, padded_batch, random_constants, tiny_config

SDPA_FAMILIES = [n for n in FAMILY_NAMES if not n.startswith("deberta")]  # DeBERTa has no sdpa in transformers 5
ALL_FAMILIES = FAMILY_NAMES + DECODER_NAMES


def all_heads():
    return [[layer, head] for layer in range(L) for head in range(H)]


@pytest.mark.parametrize("name", ALL_FAMILIES)
@pytest.mark.parametrize("heads", ["some", "all", "mean_output", "mean_corrected"])
def test_dropout_path_equals_probabilities_path_with_gradients(name, heads):
    """Training with attention dropout: the dropout path (attentions not requested) draws the probabilities path's
    mask and gives its outputs and gradients, in layers that mix both kinds of heads (laid out), on padded batches
    with all-zero constant rows; the probabilities path's mask is checked by hand in
    test_attention_dropout_masks_follow_the_stock_head_order."""
    impl = "sdpa" if name in SDPA_FAMILIES + SDPA_DECODERS else "eager"
    model = tiny_family_model(name, impl, head="token")
    static = all_heads() if heads == "all" else [[0, 1], [2, 0], [2, 3], [1, 2], [1, 0], [1, 1]]
    if heads == "mean_output":
        means = torch.randn(L, H, T, papa.method.attention.head_dim(model), generator=torch.Generator().manual_seed(3))
        papa.patch_model(model, static_heads=static, mean_outputs=means)
    else:
        constants = random_constants()
        constants[:, :, -2:] = 0  # rows no training example reached
        corrections = None if heads != "mean_corrected" else torch.randn(
            L, H, T, papa.method.attention.head_dim(model), generator=torch.Generator().manual_seed(4))
        papa.patch_model(model, constants, static_heads=static, output_corrections=corrections)
    assert any(m.papa_head_order for m in attention_modules(model)) or heads == "all"
    assert all(m.papa_dropout_p > 0 for m in attention_modules(model))
    model.train()
    ids, mask = family_batch(name)
    outputs = {}
    for path, want_attentions in (("dropout", False), ("probabilities", True)):
        torch.manual_seed(11)
        out = model(input_ids=ids, attention_mask=mask, output_attentions=want_attentions)
        assert (out.attentions is not None) == want_attentions
        model.zero_grad()
        out.logits[mask > 0].sum().backward()
        outputs[path] = out.logits, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    (fast, fast_grads), (slow, slow_grads) = outputs["dropout"], outputs["probabilities"]
    real = mask > 0
    assert_close(fast[real], slow[real], rtol=1e-5, atol=1e-5)
    torch.manual_seed(11)
    with torch.no_grad():  # no autograd, as in a probing run's frozen encoder: the in-place products
        frozen = model(input_ids=ids, attention_mask=mask).logits
    assert_close(frozen[real], slow[real], rtol=1e-5, atol=1e-5)
    assert fast_grads.keys() == slow_grads.keys()
    for n, grad in slow_grads.items():
        assert_close(fast_grads[n], grad, rtol=1e-4, atol=1e-5 * max(1.0, grad.abs().max().item()))


def test_attention_dropout_masks_follow_the_stock_head_order():
    """Heads laid out [dynamic | replaced] draw their attention-dropout mask in the stock head order,
    so a seeded training step drops the same entries of each head as an unpermuted layer did and
    seeded runs reproduce across the layout change."""
    config = tiny_config("bert")
    config.hidden_dropout_prob, config.attention_probs_dropout_prob = 0.0, 0.5  # attention dropout: the only draw
    torch.manual_seed(0)
    model = transformers.BertModel(config)
    papa.patch_model(model, random_constants(), static_heads={0: [1]})
    assert attention_modules(model)[0].papa_head_order == [0, 2, 3, 1]  # layer 0 is permuted
    ids, mask = padded_batch("bert")
    expected = run(model.eval(), ids, mask, output_attentions=True).attentions[0]  # (B, H, T, T), stock order
    torch.manual_seed(5)
    got = run(model.train(), ids, mask, output_attentions=True).attentions[0]
    torch.manual_seed(5)
    keep = F.dropout(torch.ones_like(expected), p=0.5)  # the forward's first draw, in the stock order
    assert_close(got, expected * keep)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_dropout_mask_and_scale_are_f_dropouts_multipliers_bit_for_bit(dtype):
    """The dropout path keeps the mask 0/1 and applies 1/(1−p) later; mask · scale, and the probabilities path's
    multipliers, equal F.dropout's draw exactly, for a p whose 1/(1−p) rounds (0.1), in every precision."""
    config = tiny_config("bert")
    config.attention_probs_dropout_prob = 0.1
    model = transformers.BertModel(config)
    papa.patch_model(model, random_constants(), static_heads={0: [1]})  # layer 0 laid out [0, 2, 3, 1]
    module = attention_modules(model)[1]  # unpermuted: the draw in the order F.dropout makes it
    like = torch.zeros(1, dtype=dtype)
    torch.manual_seed(3)
    expected = F.dropout(torch.ones(2, H, T, T, dtype=dtype), p=0.1)
    torch.manual_seed(3)
    mask, scale = module._dropout_mask(like, 2, H, T)
    torch.manual_seed(3)
    keep = module._dropout_keep(like, 2, H, T)
    assert set(mask.unique().tolist()) == {0.0, 1.0} and scale.dtype == dtype
    assert torch.equal(mask * scale, expected) and torch.equal(keep, expected)


@pytest.mark.parametrize("autograd", [False, True])
@pytest.mark.parametrize("padding", [True, False])
def test_dropped_constant_output_against_numpy(autograd, padding):
    """(mask · scale ⊙ norm(C·P)) · V recomputed per example and head in float64 (numpy_norm), with negative
    entries, an all-zero row and a fully padded example; the in-place branch (no autograd) also into a slice of a
    wider context (out=), and it leaves the caller's mask as mask ⊙ C, as documented."""
    g = torch.Generator().manual_seed(0)
    B, S, d, p = 4, 3, 5, 0.25
    constant = torch.randn(S, T, T, generator=g)
    constant[1, 2] = 0  # a row no training example reached
    values = torch.randn(B, T, S, d, generator=g)
    valid = (torch.rand(B, T, generator=g) > 0.3).float()
    valid[3] = 0
    mask = (torch.rand(B, S, T, T, generator=g) > p).float()
    scale = torch.tensor(1 / (1 - p))
    m = valid if padding else None
    expected = torch.zeros(B, T, S, d, dtype=torch.float64)
    for b in range(B):
        real = (valid[b] if padding else torch.ones(T)).numpy()
        for h in range(S):
            weights = torch.from_numpy(numpy_norm(constant[h].numpy(), real)) * mask[b, h].double() / (1 - p)
            expected[b, :, h] = weights @ values[b, :, h].double()
    if autograd:
        values.requires_grad_(True)
        got = dropped_constant_output(constant, mask, scale, values, m)
        got.sum().backward()
        assert torch.isfinite(values.grad).all()
    else:
        drawn = mask.clone()
        wide = torch.full((B, T, S + 2, d), float("nan"))
        got = dropped_constant_output(constant, mask, scale, values, m, out=wide[:, :, 2:])
        assert got.data_ptr() == wide[:, :, 2:].data_ptr() and torch.isnan(wide[:, :, :2]).all()
        assert torch.equal(mask, drawn * constant)
    assert_close(got.detach().double(), expected, rtol=1e-5, atol=1e-6)
