"""Patched attention against stock transformers and against an independent numpy computation."""

import copy

import numpy as np
import pytest
import torch
from torch.testing import assert_close

import papa
from numpy_attention import numpy_norm, softmax_rows
from papa.method.attention import constant_attention_output, normalized_constant
from papa.errors import PapaError
from tiny_encoders import HIDDEN, H, L, T, padded_batch, random_constants, tiny_model


@pytest.mark.parametrize("kind", ["bert", "roberta"])
@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_zero_constant_heads_equals_stock(kind, impl):
    stock = tiny_model(kind, impl)
    patched = papa.patch_model(copy.deepcopy(stock), random_constants(), static_heads=None)
    ids, mask = padded_batch(kind)
    with torch.no_grad():
        assert_close(patched(ids, attention_mask=mask).logits, stock(ids, attention_mask=mask).logits)
        out = patched(ids, attention_mask=mask, output_attentions=True)
    ref = tiny_model(kind, "eager")(ids, attention_mask=mask, output_attentions=True)
    for a, b in zip(out.attentions, ref.attentions):
        assert_close(a, b)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("mix", [False, True])
def test_layer_against_independent_numpy(impl, mix):
    """One layer's context and attentions, recomputed head by head from the unpruned weights."""
    model = tiny_model("bert", impl, head="base")
    constants = random_constants()
    attn = model.encoder.layer[1].attention.self
    wq, bq = attn.query.weight.detach().numpy().copy(), attn.query.bias.detach().numpy().copy()
    wk, bk = attn.key.weight.detach().numpy().copy(), attn.key.bias.detach().numpy().copy()
    wv, bv = attn.value.weight.detach().numpy().copy(), attn.value.bias.detach().numpy().copy()
    projection = model.encoder.layer[1].attention.output.dense  # reads the heads' concatenated outputs
    wo = projection.weight.detach().double().numpy().copy()
    static = {1: [0, 2]}
    papa.patch_model(model, constants, static_heads=None if mix else static, mix_all_heads=mix)
    if mix:
        with torch.no_grad():
            attn.lambdas.copy_(torch.tensor([0.5, -1.0, 2.0, 0.0]))
    ids, mask = padded_batch("bert")
    captured = {}

    def grab(module, args, kwargs, output):
        captured["x"], captured["mask"], captured["out"] = args[0], kwargs["attention_mask"], output

    attn.register_forward_hook(grab, with_kwargs=True)
    with torch.no_grad():
        model(ids, attention_mask=mask, output_attentions=True)
    x = captured["x"].numpy().astype(np.float64)
    context, probs = captured["out"]
    d = HIDDEN // H
    lam = np.array([0.5, -1.0, 2.0, 0.0])
    for b in range(x.shape[0]):
        valid = mask[b].numpy().astype(np.float64)
        q, k, v = x[b] @ wq.T + bq, x[b] @ wk.T + bk, x[b] @ wv.T + bv
        stock_context = np.zeros((x.shape[1], HIDDEN))
        for h in range(H):
            sl = slice(h * d, (h + 1) * d)
            soft = softmax_rows(q[:, sl] @ k[:, sl].T / np.sqrt(d), np.outer(np.ones_like(valid), valid) > 0)
            const = numpy_norm(constants[1, h].numpy(), valid)
            if mix:
                w = 1 / (1 + np.exp(-lam[h]))
                expected = w * soft + (1 - w) * const
            elif h in static[1]:
                expected = const
            else:
                expected = numpy_norm(soft, valid)  # dynamic heads of a layer with constants: padded rows zeroed
            np.testing.assert_allclose(probs[b, h].numpy(), expected, rtol=1e-5, atol=1e-6)
            stock_context[:, sl] = expected @ v[:, sl]
        # the heads' outputs as the output projection reads them: its input columns follow the
        # patched layer's head layout, so compare after it (against the stock projection)
        got = context[b].double().numpy() @ projection.weight.detach().double().numpy().T
        np.testing.assert_allclose(got, stock_context @ wo.T, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["bert", "roberta"])
@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("heads", ["some", "all", "mix"])
def test_fast_path_equals_attentions_path(kind, impl, heads):
    model = tiny_model(kind, impl)
    if heads == "mix":
        papa.patch_model(model, random_constants(), mix_all_heads=True)
        with torch.no_grad():
            for i, layer in enumerate(model.base_model.encoder.layer):
                layer.attention.self.lambdas.copy_(torch.linspace(-2, 2, H) * (i + 1))
    else:
        static = [[l, h] for l in range(L) for h in range(H)] if heads == "all" else [[0, 1], [2, 0], [2, 3], [1, 2]]
        papa.patch_model(model, random_constants(), static_heads=static)
    ids, mask = padded_batch("bert")
    with torch.no_grad():
        fast = model(ids, attention_mask=mask).logits
        slow = model(ids, attention_mask=mask, output_attentions=True)
    assert slow.attentions is not None and len(slow.attentions) == L
    assert_close(fast, slow.logits, rtol=1e-5, atol=1e-5)


def test_mix_limits():
    ids, mask = padded_batch("bert")
    stock = tiny_model("bert", "sdpa")
    mixed = papa.patch_model(copy.deepcopy(stock), random_constants(), mix_all_heads=True)
    everything = [[l, h] for l in range(L) for h in range(H)]
    constant = papa.patch_model(copy.deepcopy(stock), random_constants(), static_heads=everything)
    with torch.no_grad():
        for big, reference in [(50.0, stock), (-50.0, constant)]:
            for layer in mixed.bert.encoder.layer:
                layer.attention.self.lambdas.fill_(big)
            assert_close(mixed(ids, attention_mask=mask).logits, reference(ids, attention_mask=mask).logits)


def test_padding_content_does_not_matter():
    """Valid positions ignore whatever sits at padded positions (constant, mixed and dynamic heads)."""
    for kwargs in [dict(static_heads=[[0, 0], [1, 1], [1, 2]]), dict(mix_all_heads=True)]:
        model = papa.patch_model(tiny_model("bert", "sdpa", head="token"), random_constants(), **kwargs)
        ids, mask = padded_batch("bert")
        other = ids.clone()
        other[mask == 0] = 7
        with torch.no_grad():
            a = model(ids, attention_mask=mask).logits
            b = model(other, attention_mask=mask).logits
        assert_close(a[mask == 1], b[mask == 1])


def test_padded_equals_unpadded_without_constants():
    model = papa.patch_model(tiny_model("bert", "sdpa", head="token"), random_constants())
    ids, mask = padded_batch("bert")
    with torch.no_grad():
        padded = model(ids, attention_mask=mask).logits
        for b in range(ids.shape[0]):
            n = int(mask[b].sum())
            alone = model(ids[b : b + 1, :n]).logits[0]
            assert_close(padded[b, :n], alone, rtol=1e-5, atol=1e-5)


def test_attentions_even_if_hooks_were_installed_before_patching():
    model = tiny_model("bert", "sdpa")
    ids, mask = padded_batch("bert")
    with torch.no_grad():
        model(ids, attention_mask=mask, output_attentions=True)  # installs HF's recording hooks
        papa.patch_model(model, random_constants(), static_heads=[[0, 0]])
        out = model(ids, attention_mask=mask, output_attentions=True)
    assert len(out.attentions) == L and out.attentions[0].shape == (3, H, T, T)
    assert_close(out.attentions[0][:, 0], normalized_constant(model.bert.encoder.layer[0].attention.self.constant_matrices, mask.float())[:, 0])


def test_pruned_shapes_and_all_constant_layer_skips_qk():
    model = papa.patch_model(tiny_model("bert", "sdpa"), random_constants(), static_heads={0: [1, 3], 2: [0, 1, 2, 3]})
    d = HIDDEN // H
    layers = [layer.attention.self for layer in model.bert.encoder.layer]
    assert layers[0].query.weight.shape == (2 * d, HIDDEN) and layers[0].key.bias.shape == (2 * d,)
    assert layers[0].value.weight.shape == (HIDDEN, HIDDEN)
    assert layers[1].query.weight.shape == (HIDDEN, HIDDEN)
    assert layers[2].query.weight.shape == (0, HIDDEN) and layers[2].constant_matrices.shape == (H, T, T)
    calls = []
    layers[2].query.register_forward_hook(lambda *a: calls.append(1))
    layers[2].key.register_forward_hook(lambda *a: calls.append(1))
    ids, mask = padded_batch("bert")
    with torch.no_grad():
        model(ids, attention_mask=mask)
        model(ids, attention_mask=mask, output_attentions=True)
    assert calls == []


def test_pruned_rows_are_the_dynamic_heads_rows():
    stock = tiny_model("bert", "sdpa")
    weight = stock.bert.encoder.layer[0].attention.self.query.weight.detach().clone()
    model = papa.patch_model(stock, random_constants(), static_heads=[[0, 1], [0, 2]])
    d = HIDDEN // H
    kept = torch.cat([weight[0:d], weight[3 * d : 4 * d]])
    assert torch.equal(model.bert.encoder.layer[0].attention.self.query.weight, kept)


def test_constant_output_helper_matches_materialised_probabilities():
    g = torch.Generator().manual_seed(0)
    constant = torch.randn(H, T, T, generator=g)  # negative entries too: L1 norm uses |x|
    constant[0, 3] = 0  # an all-zero row stays zero
    values = torch.randn(5, T, H, 8, generator=g)
    valid = (torch.rand(5, T, generator=g) > 0.3).float()
    valid[4] = 0  # a fully padded example gives zeros, not NaN
    for m in [valid, None]:
        probs = normalized_constant(constant, m)
        expected = torch.matmul(probs, values.transpose(1, 2)).transpose(1, 2)
        got = constant_attention_output(constant, values, m)
        assert torch.isfinite(got).all()
        assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_known_facts_of_constants_give_the_same_output():
    """`row_scale` may be told C ≥ 0 (|C| is C) and handed 1 / Σ_j |C_ij| when Σ_j |C_ij| is this call's
    Σ_j |C_ij| m_j: the output is norm(C·P)·V either way."""
    g = torch.Generator().manual_seed(2)
    constant = torch.rand(H, T, T, generator=g).tril()  # a decoder's
    constant[1, 4] = 0
    values = torch.randn(3, T, H, 8, generator=g)
    right = torch.ones(3, T)
    right[2, T - 4:] = 0  # right padding: every key j <= i of a real query i is real
    for m in [right, None]:
        expected = torch.matmul(normalized_constant(constant, m), values.transpose(1, 2)).transpose(1, 2)
        sums = constant.sum(-1, keepdim=True)
        inverse = torch.where(sums > 0, 1 / sums, torch.zeros(()))  # an all-zero row stays zero
        got = constant_attention_output(constant, values, m, nonnegative=True, inverse_rows=inverse)
        assert_close(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("family, padding", [("bert", "any"), ("llama", "right"), ("llama", "left")])
def test_frozen_layers_cache_only_what_holds(family, padding):
    """A frozen layer checks its constants' sign once per change of the parameter and reuses their row sums only
    where they are the call's (no padding; a decoder with right padding); signed constants (trained ones may be)
    still normalise by Σ|C|, against the materialised path (output_attentions), in every case."""
    from tiny_decoders import right_padded_batch, tiny_decoder

    if family == "bert":
        model, (ids, mask) = tiny_model("bert", "sdpa"), padded_batch("bert")
        layer = lambda m: m.bert.encoder.layer[0].attention.self  # noqa: E731
    else:
        model, (ids, mask) = tiny_decoder("llama", "sdpa"), right_padded_batch()
        layer = lambda m: m.model.layers[0].self_attn  # noqa: E731
        if padding == "left":
            ids, mask = torch.stack([r.roll(int((m == 0).sum())) for r, m in zip(ids, mask)]), mask.flip(-1)
    L_, H_, T_ = model.config.num_hidden_layers, model.config.num_attention_heads, ids.shape[1]
    constants = torch.rand(L_, H_, T_, T_, generator=torch.Generator().manual_seed(3))
    model = papa.patch_model(model, constants, static_heads=[[0, 1], [0, 2], [1, 0]]).eval()
    attn = layer(model)
    valid = mask.to(torch.float32)
    assert attn._constant_facts(attn._constants(torch.float32), valid) == {}  # trainable, under autograd
    for sign in (1, -1):
        with torch.no_grad():
            attn.constant_matrices.mul_(sign)  # -1: signed constants, the cached facts must follow
            facts = attn._constant_facts(attn._constants(torch.float32), valid)
            assert facts["nonnegative"] == (sign == 1)
            assert (facts["inverse_rows"] is not None) == (family == "llama" and padding == "right")
            assert attn._constant_facts(attn._constants(torch.float32), None)["inverse_rows"] is not None
            fast = model(ids, attention_mask=mask).logits
            slow = model(ids, attention_mask=mask, output_attentions=True).logits  # materialises norm(C·P)
        real = mask.bool() if family == "llama" else slice(None)  # (left-padded rows' pad positions differ by path)
        assert_close(fast[real], slow[real], rtol=1e-5, atol=1e-5)


def test_validity_is_computed_once_per_mask_and_follows_in_place_changes():
    """The layers of a forward share the (B, T) validity kept on their mask; a mask changed in place between calls
    (its version counter moves) gives the output of a fresh mask with the same values."""
    from tiny_decoders import right_padded_batch, tiny_decoder

    model = tiny_decoder("llama", "sdpa")
    L_, H_ = model.config.num_hidden_layers, model.config.num_attention_heads
    ids, mask = right_padded_batch()
    constants = torch.rand(L_, H_, ids.shape[1], ids.shape[1], generator=torch.Generator().manual_seed(4))
    model = papa.patch_model(model, constants, static_heads=[[0, 1], [1, 2], [2, 0]]).eval()
    with torch.no_grad():
        model(ids, attention_mask=mask)
        mask[0, -2:] = 0  # in place: the cached validity must not be reused
        ids[0, -2:] = 0
        again = model(ids, attention_mask=mask).logits
        fresh = model(ids.clone(), attention_mask=mask.clone()).logits
    assert torch.equal(again, fresh)


def test_float64_constants_are_normalised_in_float64():
    """The sums and divisions run in float32 for lower precisions; float64 inputs (a reference's) stay float64."""
    g = torch.Generator().manual_seed(1)
    constant = torch.rand(H, T, T, generator=g, dtype=torch.float64)
    constant[1, 2] = 0
    values = torch.randn(3, T, H, 4, generator=g, dtype=torch.float64)
    valid = torch.ones(3, T, dtype=torch.float64)
    valid[1, T - 3:] = 0
    expected = torch.tensor(np.stack([[numpy_norm(constant[h].numpy(), valid[b].numpy()) for h in range(H)]
                                      for b in range(3)]))  # (B, H, T, T)
    assert_close(normalized_constant(constant, valid), expected, rtol=1e-13, atol=1e-16)
    want = torch.einsum("bhij,bjhd->bihd", expected, values)
    for grad in (False, True):  # the out= writes, and the autograd form
        got = constant_attention_output(constant, values.clone().requires_grad_(grad), valid)
        assert got.dtype == torch.float64
        assert_close(got, want, rtol=1e-12, atol=1e-14)


def test_gradients_reach_constants_and_lambdas():
    model = papa.patch_model(tiny_model("bert", "sdpa"), random_constants(), mix_all_heads=True).train()
    ids, mask = padded_batch("bert")
    model(ids, attention_mask=mask, labels=torch.tensor([0, 1, 2])).loss.backward()
    attn = model.bert.encoder.layer[0].attention.self
    assert attn.lambdas.grad is not None and attn.lambdas.grad.abs().sum() > 0
    assert attn.constant_matrices.grad is not None


@pytest.mark.parametrize("kwargs", [dict(static_heads=[[0, 1], [1, 0], [1, 1], [1, 2], [1, 3]]), dict(mix_all_heads=True)])
def test_fast_path_with_autograd_equals_attentions_path(kwargs):
    """Grad enabled, no dropout (eval): the fast path runs under autograd and matches."""
    model = papa.patch_model(tiny_model("bert", "sdpa"), random_constants(), **kwargs)
    ids, mask = padded_batch("bert")
    fast = model(ids, attention_mask=mask)
    slow = model(ids, attention_mask=mask, output_attentions=True)
    assert_close(fast.logits, slow.logits, rtol=1e-5, atol=1e-5)
    fast.logits.sum().backward()
    fast_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    slow.logits.sum().backward()
    for name, p in model.named_parameters():
        if p.grad is not None:
            assert_close(fast_grads[name], p.grad, rtol=1e-4, atol=1e-5)


def test_clear_errors(tmp_path):
    with pytest.raises(PapaError, match="layers x"):
        papa.patch_model(tiny_model("bert", "sdpa"), torch.rand(L + 1, H, T, T))
    with pytest.raises(PapaError, match="NaN"):
        bad = random_constants()
        bad[0, 0, 0, 0] = float("nan")
        papa.patch_model(tiny_model("bert", "sdpa"), bad)
    with pytest.raises(PapaError, match="does not exist"):
        papa.patch_model(tiny_model("bert", "sdpa"), random_constants(), static_heads=[[L, 0]])
    with pytest.raises(PapaError, match="twice"):
        papa.patch_model(tiny_model("bert", "sdpa"), random_constants(), static_heads=[[0, 0], [0, 0]])
    with pytest.raises(PapaError, match="avgs.pt"):
        papa.patch_model(tiny_model("bert", "sdpa"), tmp_path)
    torch.save({"not": "a tensor"}, tmp_path / "avgs.pt")
    with pytest.raises(PapaError, match="not a"):
        papa.patch_model(tiny_model("bert", "sdpa"), tmp_path)
    from transformers import OPTConfig, OPTModel  # a family PAPA does not support

    with pytest.raises(PapaError, match="OPTModel"):
        papa.patch_model(OPTModel(OPTConfig(num_hidden_layers=1, num_attention_heads=2, hidden_size=8, ffn_dim=8,
                                            word_embed_proj_dim=8)), random_constants())
    model = papa.patch_model(tiny_model("bert", "sdpa"), random_constants(), static_heads=[[0, 0]])
    with pytest.raises(PapaError, match="already"):
        papa.patch_model(model, random_constants())
    ids, mask = padded_batch("bert")
    with pytest.raises(PapaError, match="12x12.*length is 7"):
        model(ids[:, :7], attention_mask=mask[:, :7])
