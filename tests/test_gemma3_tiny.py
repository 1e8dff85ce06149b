"""Gemma-3-270M's attention design in miniature, against stock transformers and an independent numpy computation.

A tiny random Gemma3 text model laid out as the bundled Gemma-3-270M is (tests/test_bundled_decoders.py has the real
weights): 6 layers, 5 sliding-window layers then one global layer (the config's default pattern), 4 query heads on
a single K/V head (one group: its keys go only when all four heads are constant), per-head (1 + w) RMS norms on Q
and K, query_pre_attn_scalar ≠ head_dim, rotary with base 10 000 in the sliding layers and 10⁶ in the global one.
Checked: 0 constant heads give the stock model's logits and attentions; one layer's PAPA probabilities and output
recomputed head by head in numpy from the unpruned weights (replace and mix); constant heads attend inside the
window of a sliding layer and over the whole causal band of the global one; the pruned parameters.
"""

import copy

import numpy as np
import pytest
import torch
from torch.testing import assert_close
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

import papa
from layer_reference import expected_probs, patch_and_capture, run
from numpy_attention import capture_layer, np_, softmax_rows
from papa.families import attention_modules
from tiny_decoders import right_padded_batch

L, H, D_HEAD, HIDDEN, T, WINDOW, SCALAR = 6, 4, 16, 32, 12, 4, 24
GLOBAL = 5  # the one full-attention layer, as every sixth layer of Gemma 3


def config(impl="eager"):
    c = Gemma3TextConfig(vocab_size=120, hidden_size=HIDDEN, intermediate_size=48, num_hidden_layers=L,
                         num_attention_heads=H, num_key_value_heads=1, head_dim=D_HEAD, query_pre_attn_scalar=SCALAR,
                         sliding_window=WINDOW, max_position_embeddings=64, pad_token_id=0, bos_token_id=2,
                         eos_token_id=1)
    c._attn_implementation = impl
    return c


def tiny_gemma3(impl="eager", seed=0):
    """The random tiny model, with its q/k norm weights (zero at init: gain 1) made to matter."""
    torch.manual_seed(seed)
    model = Gemma3ForCausalLM(config(impl)).eval()
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "q_norm" in name or "k_norm" in name:
                param.copy_(torch.rand(param.shape, generator=g) - 0.5)
    return model


def random_constants(seed=1):
    return torch.rand(L, H, T, T, generator=torch.Generator().manual_seed(seed))


def band(layer):
    """Where query i may attend key j: j ≤ i, and i − j < WINDOW in a sliding layer."""
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    return ((j <= i) & ((i - j < WINDOW) if layer != GLOBAL else True)).astype(float)


@pytest.fixture
def float64_norms(monkeypatch):
    """Gemma3RMSNorm in the model's own dtype. The stock norm computes in float32 whatever the model's dtype
    (`x.float()`), which leaves ~1e-7 of float32 rounding in a float64 model's q/k norms; computed in float64, the
    layer can be checked against float64 numpy to 1e-9. PAPA calls the stock norm modules, so this changes stock and
    PAPA alike."""
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight.to(x.dtype))

    monkeypatch.setattr(Gemma3RMSNorm, "forward", forward)

def reference_layer(a, x, valid, rotary, layer):
    """Stock probabilities (H, T, T) and per-query-head values (T, H, d) of one example's layer from the unpruned
    weights, written from Gemma 3's definition: q/k/v projections, RMS norm over each head's d with gain 1 + w
    (eps 1e-6) on Q and K, rotate-half rotary, every query head reading the one K/V head, scale
    query_pre_attn_scalar^-1/2, softmax over the causal band (∩ window) of real keys."""
    q = (x @ np_(a.q_proj.weight).T).reshape(T, H, D_HEAD)
    k, v = x @ np_(a.k_proj.weight).T, x @ np_(a.v_proj.weight).T  # (T, d): one K/V head
    rms = lambda z, w: z / np.sqrt((z ** 2).mean(-1, keepdims=True) + 1e-6) * (1 + w)
    q, k = rms(q, np_(a.q_norm.weight)), rms(k, np_(a.k_norm.weight))
    cos, sin = (np_(t)[0] for t in rotary)  # (T, d)
    rotate = lambda z, c, s: z * c + np.concatenate([-z[..., D_HEAD // 2:], z[..., :D_HEAD // 2]], -1) * s
    q, k = rotate(q, cos[:, None], sin[:, None]), rotate(k, cos, sin)
    allowed = (band(layer) * valid[None, :]) > 0
    probs = np.stack([softmax_rows(q[:, h] @ k.T * SCALAR ** -0.5, allowed) for h in range(H)])
    return probs, np.repeat(v[:, None], H, axis=1)


def test_the_tiny_model_is_laid_out_as_gemma3_270m():
    c = tiny_gemma3().config
    assert c.model_type == "gemma3_text" and c.num_key_value_heads == 1
    assert c.layer_types == ["sliding_attention"] * 5 + ["full_attention"]
    thetas = {kind: c.rope_parameters[kind]["rope_theta"] for kind in ("sliding_attention", "full_attention")}
    assert thetas == {"sliding_attention": 10_000.0, "full_attention": 1_000_000.0}


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_zero_constant_heads_equal_stock(impl):
    """k = 0: the stock logits and attentions, padded and unpadded. In float64 the real tokens' logits equal stock
    SDPA's to 1e-12 (stock eager runs its softmax in float32, docs/precision.md; float32 to 1e-6)."""
    for lengths in [(T, 7, 3), (T, T)]:
        ids, mask = right_padded_batch(lengths=lengths)
        stock = tiny_gemma3(impl)
        patched = papa.patch_model(copy.deepcopy(stock), random_constants())
        assert_close(run(patched, ids, mask).logits, run(stock, ids, mask, use_cache=False).logits,
                     rtol=1e-6, atol=1e-6)
        got = run(patched, ids, mask, output_attentions=True).attentions
        want = run(tiny_gemma3("eager"), ids, mask, output_attentions=True, use_cache=False).attentions
        for g, w in zip(got, want, strict=True):
            assert_close(g, w, rtol=1e-6, atol=1e-6)
        stock64 = tiny_gemma3("sdpa").double()
        patched64 = papa.patch_model(copy.deepcopy(tiny_gemma3(impl)).double(), random_constants().double())
        real = mask.bool()  # a padded query whose window holds only padding attends nowhere: eager and SDPA differ
        assert_close(run(patched64, ids, mask).logits[real], run(stock64, ids, mask, use_cache=False).logits[real],
                     rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layer", [1, GLOBAL])
@pytest.mark.parametrize("mode, static", [("replace", [0, 1, 3]), ("replace", [0, 1, 2, 3]), ("mix", None)])
def test_a_layer_against_independent_numpy_in_float64(layer, mode, static, float64_norms):
    """One sliding and the global layer: heads 0, 1 and 3 constant (the K/V head stays for head 2), all four
    (its keys pruned), and mix mode; probabilities and output against the numpy definition, to 1e-9."""
    model = tiny_gemma3().model.double()
    stock_attention = copy.deepcopy(attention_modules(model)[layer])
    constants = random_constants().double()
    lam = np.array([0.5, -1.0, 2.0, 0.0])
    captured = patch_and_capture(model, constants, mode, layer, {layer: static or []}, lam)
    ids, mask = right_padded_batch()
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask, output_attentions=True)
    output, probs = captured["output"]
    for b in range(ids.shape[0]):
        valid = mask[b].numpy().astype(np.float64)
        real = valid > 0
        stock_probs, v = reference_layer(stock_attention, np_(captured["x"][b]), valid,
                                         captured["position_embeddings"], layer)
        expected = expected_probs(stock_probs, constants[layer], valid, band(layer), mode, static or [], lam)
        np.testing.assert_allclose(probs[b][:, real].numpy(), expected[:, real], rtol=1e-9, atol=1e-12)
        context = np.einsum("hij,jhd->ihd", expected, v).reshape(T, H * D_HEAD)
        want = context @ np_(stock_attention.o_proj.weight).T
        np.testing.assert_allclose(output[b].numpy()[real], want[real], rtol=1e-9, atol=1e-11)


def test_the_layers_rotary_bases_are_what_the_reference_reads():
    """The cos/sin a sliding layer receives are those of base 10 000, the global layer's of base 10⁶ (computed
    here in float64; transformers computes them in float32): the reference above reads each layer's own."""
    cos = {}
    for layer in (0, GLOBAL):
        model = tiny_gemma3()
        captured = capture_layer(model, layer)
        run(model, *right_padded_batch())
        cos[layer] = np_(captured["position_embeddings"][0])[0]  # (T, d)
    for layer, theta in ((0, 1e4), (GLOBAL, 1e6)):
        inv_freq = 1.0 / theta ** (np.arange(0, D_HEAD, 2) / D_HEAD)
        angles = np.arange(T)[:, None] * inv_freq[None, :]
        np.testing.assert_allclose(cos[layer], np.cos(np.concatenate([angles, angles], -1)), atol=1e-6)
    assert np.abs(cos[0] - cos[GLOBAL]).max() > 0.1


def test_constant_heads_attend_inside_the_window():
    """All-ones constants, every head constant: in each layer a head's attention is nonzero exactly where the stock
    softmax is — a WINDOW-wide band in the sliding layers, the whole causal triangle in the global one — and
    uniform there. And with the first layer's heads constant, its output at position i does not move when a token
    outside i's window changes."""
    stock = tiny_gemma3()
    ids, mask = right_padded_batch(lengths=(T,))
    want = run(stock, ids, mask, output_attentions=True, use_cache=False).attentions
    every = [[layer, h] for layer in range(L) for h in range(H)]
    model = papa.patch_model(copy.deepcopy(stock), torch.ones(L, H, T, T), static_heads=every)
    got = run(model, ids, mask, output_attentions=True).attentions
    for layer in range(L):
        support = want[layer][0] > 0  # (H, T, T)
        assert torch.equal(got[layer][0] > 0, support)
        assert torch.equal(support[0], torch.tensor(band(layer) > 0))
        assert_close(got[layer][0], support / support.sum(-1, keepdim=True))
    first = papa.patch_model(copy.deepcopy(stock), torch.ones(L, H, T, T), static_heads=[[0, h] for h in range(H)])
    captured = {}
    attention_modules(first)[0].register_forward_hook(lambda m, a, o: captured.setdefault("out", []).append(o[0]))
    changed = ids.clone()
    changed[0, 0] = 7 if ids[0, 0] != 7 else 8
    run(first, ids, mask)
    run(first, changed, mask)
    before, after = captured["out"]
    assert torch.equal(before[0, WINDOW:], after[0, WINDOW:])
    assert not torch.equal(before[0, :WINDOW], after[0, :WINDOW])


def test_the_one_key_value_head_goes_only_with_all_four_query_heads():
    """Three constant heads of a layer prune their Q rows; all four also the layer's only K rows."""
    stock = tiny_gemma3()
    count = lambda m: sum(p.numel() for n, p in m.named_parameters() if "constant_matrices" not in n)
    for static, pruned in (({1: [0, 1, 3]}, 3 * D_HEAD * HIDDEN), ({1: [0, 1, 2, 3]}, 5 * D_HEAD * HIDDEN),
                           ({1: [0, 1, 3], GLOBAL: [0, 1, 2, 3]}, 8 * D_HEAD * HIDDEN)):
        patched = papa.patch_model(copy.deepcopy(stock), random_constants(), static_heads=static)
        assert count(stock) - count(patched) == pruned
        for layer, heads in static.items():
            a = attention_modules(patched)[layer]
            assert a.k_proj.weight.shape[0] == (0 if len(heads) == H else D_HEAD)
