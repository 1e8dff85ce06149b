"""Every decoder family against stock transformers and against an independent numpy computation.

For GPT-2, Llama, Mistral, Qwen2, Qwen3, Gemma2, Gemma3 (text), Granite and SmolLM3 on tiny random models
(grouped K/V, rotary, sliding windows, q/k norms, soft-capping; tests/tiny_decoders.py) and right-padded
batches: 0 replaced heads = stock (eager and sdpa); one layer's probabilities and output recomputed head by
head in numpy from the unpruned stock weights (replace and mix mode); a constant head attends exactly where
the stock heads may (causal band × window); pruned parameter counts (a K/V group's keys only when all its
query heads are constant); save/reload; mean-output heads; the clear errors. The family-independent checks
(fast path = probabilities path with gradients, λ → ±∞ limits, the exact attention of an example as
constants reproducing it, padding content) and averaging run the decoders in tests/test_encoders.py and
tests/test_averaging.py.
"""

import copy

import numpy as np
import pytest
import torch
from torch.testing import assert_close

import papa
from papa.families import PapaAttention, attention_modules
from papa.errors import PapaError
from layer_reference import expected_probs, patch_and_capture, run
from numpy_attention import capture_layer, np_, softmax_rows
from tiny_decoders import (D_HEAD, DECODER_NAMES, HIDDEN, KV, SDPA_DECODERS, H, L, T, decoder_class_name,
                           right_padded_batch, tiny_decoder, tiny_decoder_config)

GROUP = H // KV  # query heads per K/V head (GPT-2: no grouping)
WINDOWS = {"mistral": {0: 4, 1: 4, 2: 4}, "qwen2": {1: 5, 2: 5}, "gemma2": {0: 4, 2: 4},
           "gemma3_text": {0: 4, 2: 4}}  # from the configs
SCALE = {"gemma2": 12 ** -0.5, "gemma3_text": 12 ** -0.5, "granite": 0.3}  # query_pre_attn_scalar, attention_multiplier


def random_constants(seed=1):
    return torch.rand(L, H, T, T, generator=torch.Generator().manual_seed(seed))


def all_heads():
    return [[layer, head] for layer in range(L) for head in range(H)]


def band_of(name, layer):
    """Where query i may attend key j: j ≤ i, and i − j < window in a sliding-window layer."""
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    window = WINDOWS.get(name, {}).get(layer)
    return ((j <= i) & ((i - j) < window if window else True)).astype(float)


def reference_layer(name, a, x, valid, rotary, layer):
    """Stock probabilities (H, T, T) and per-query-head values (T, H, d) of one example's layer, from the
    unpruned weights: GQA by h // GROUP, rotary as rotate-half, q/k RMS norms, scaling, soft-capping, window."""
    if name == "gpt2":
        qkv = x @ np_(a.c_attn.weight) + np_(a.c_attn.bias)  # Conv1D: (in, out)
        q, k, v = (qkv[:, i * HIDDEN:(i + 1) * HIDDEN].reshape(T, H, D_HEAD) for i in range(3))
        group, scale = 1, D_HEAD ** -0.5
    else:
        lin = lambda m: x @ np_(m.weight).T + (np_(m.bias) if m.bias is not None else 0)
        q, k, v = lin(a.q_proj).reshape(T, H, D_HEAD), lin(a.k_proj).reshape(T, KV, D_HEAD), lin(a.v_proj)
        v = v.reshape(T, KV, D_HEAD)
        if name in ("qwen3", "gemma3_text"):  # RMS norms over each head's d: weight w (Qwen3), 1 + w (Gemma3)
            gain = lambda norm: np_(norm.weight) + (1.0 if name == "gemma3_text" else 0.0)
            eps = lambda norm: getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
            rms = lambda z, norm: z / np.sqrt((z ** 2).mean(-1, keepdims=True) + eps(norm)) * gain(norm)
            q, k = rms(q, a.q_norm), rms(k, a.k_norm)
        if not (name == "smollm3" and layer == 1):  # SmolLM3's layer 1 has no rotary embeddings (no_rope_layers)
            cos, sin = (np_(t)[0][:, None, :] for t in rotary)  # (T, 1, d)
            rotate = lambda z: z * cos + np.concatenate([-z[..., D_HEAD // 2:], z[..., :D_HEAD // 2]], -1) * sin
            q, k = rotate(q), rotate(k)
        group, scale = GROUP, SCALE.get(name, D_HEAD ** -0.5)
    band = band_of(name, layer)
    allowed = (band * valid[None, :]) > 0
    probs = []
    for h in range(H):
        scores = q[:, h] @ k[:, h // group].T * scale
        if name == "gemma2":
            scores = np.tanh(scores / 2.0) * 2.0  # attn_logit_softcapping=2
        probs.append(softmax_rows(scores, allowed))
    values = np.stack([v[:, h // group] for h in range(H)], axis=1)  # (T, H, d)
    return np.stack(probs), values, band


def output_projection(name, a, context):
    """The stock module's output from the heads' concatenated outputs (T, H·d), in the stock head order."""
    if name == "gpt2":
        return context @ np_(a.c_proj.weight) + np_(a.c_proj.bias)
    return context @ np_(a.o_proj.weight).T + (np_(a.o_proj.bias) if a.o_proj.bias is not None else 0)


def randomise_norms(model):
    """Qwen3's and Gemma3's q/k norm weights start at 1 and 0; make them matter."""
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "q_norm" in name or "k_norm" in name:
                param.copy_(0.5 + torch.rand(param.shape, generator=g))


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("name", DECODER_NAMES)
def test_zero_replaced_heads_equals_stock(name):
    for lengths in [(T, 7, 3), (T, T)]:  # padded, and unpadded (sdpa then gets no mask: is_causal)
        ids, mask = right_padded_batch(lengths=lengths)
        for impl in ["eager"] + (["sdpa"] if name in SDPA_DECODERS else []):
            stock = tiny_decoder(name, impl)
            patched = papa.patch_model(copy.deepcopy(stock), random_constants())
            assert_close(run(patched, ids, mask).logits, run(stock, ids, mask, use_cache=False).logits,
                         rtol=1e-5, atol=1e-6)
            got = run(patched, ids, mask, output_attentions=True).attentions
            want = run(tiny_decoder(name, "eager"), ids, mask, output_attentions=True, use_cache=False).attentions
            assert len(got) == L
            for g, w in zip(got, want):
                assert_close(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", DECODER_NAMES)
@pytest.mark.parametrize("mode", ["replace", "mix"])
@pytest.mark.parametrize("layer_index", [1, 2])
def test_layer_against_independent_numpy(name, mode, layer_index):
    """One layer's attentions and output, recomputed head by head from the unpruned stock weights."""
    model = tiny_decoder(name, "eager", head="base")
    randomise_norms(model)
    stock_attention = copy.deepcopy(attention_modules(model)[layer_index])
    constants = random_constants()
    static = {layer_index: [0, 1, 3]}  # heads 0 and 1 form K/V group 0: its keys are pruned
    lam = np.array([0.5, -1.0, 2.0, 0.0])
    captured = patch_and_capture(model, constants, mode, layer_index, static, lam)
    ids, mask = right_padded_batch()
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask, output_attentions=True)
    output, probs = captured["output"]
    for b in range(ids.shape[0]):
        valid = mask[b].numpy().astype(np.float64)
        stock_probs, v, band = reference_layer(name, stock_attention, np_(captured["x"][b]), valid,
                                               captured.get("position_embeddings"), layer_index)
        expected = expected_probs(stock_probs, constants[layer_index], valid, band, mode, static[layer_index], lam)
        real = valid > 0
        assert np.triu(probs[b][:, real].numpy(), 1).max() == 0  # real queries never attend to the future
        if mode == "mix":  # padded query rows keep the stock softmax: compare real rows only
            np.testing.assert_allclose(probs[b][:, real].numpy(), expected[:, real], rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_allclose(probs[b].numpy(), expected, rtol=1e-5, atol=1e-6)
        context = np.einsum("hij,jhd->ihd", expected, v).reshape(T, H * D_HEAD)  # stock head order
        want = output_projection(name, stock_attention, context)
        np.testing.assert_allclose(output[b].numpy()[real], want[real], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", DECODER_NAMES)
def test_constant_heads_attend_where_the_stock_heads_may(name):
    """All-ones constants: each layer's constant attention is nonzero exactly where the stock model's
    softmax is (the causal band × the layer's window) on a full-length example, and uniform there."""
    stock = tiny_decoder(name)
    ids, mask = right_padded_batch(lengths=(T,))
    want = run(stock, ids, mask, output_attentions=True, use_cache=False).attentions
    model = papa.patch_model(copy.deepcopy(stock), torch.ones(L, H, T, T), static_heads=all_heads())
    got = run(model, ids, mask, output_attentions=True).attentions
    for layer in range(L):
        support = want[layer][0] > 0  # (H, T, T)
        assert torch.equal(got[layer][0] > 0, support)
        assert torch.equal(support[0], torch.tensor(band_of(name, layer) > 0))
        assert_close(got[layer][0], support / support.sum(-1, keepdim=True))


def expected_pruned(name, model, static):
    """Parameters that replacing `static` ({layer: heads}) must remove: each constant head's Q rows, and the K
    rows of a K/V group whose query heads are all constant (GPT-2: each head its own group), with biases."""
    total = 0
    for layer, heads in static.items():
        a = attention_modules(model)[layer]
        if name == "gpt2":
            total += len(heads) * 2 * D_HEAD * (HIDDEN + 1)
            continue
        q_bias, k_bias = (int(m.bias is not None) for m in (a.q_proj, a.k_proj))
        full_groups = sum(all(h in heads for h in range(g * GROUP, (g + 1) * GROUP)) for g in range(KV))
        total += len(heads) * D_HEAD * (HIDDEN + q_bias) + full_groups * D_HEAD * (HIDDEN + k_bias)
    return total


@pytest.mark.parametrize("name", DECODER_NAMES)
def test_pruned_parameter_counts_and_all_constant_layers_skip_qk(name):
    stock = tiny_decoder(name)
    static = {0: [0, 1, 3], 1: [1, 2], 2: [0, 1, 2, 3]}
    patched = papa.patch_model(copy.deepcopy(stock), random_constants(), static_heads=static)
    count = lambda m: sum(p.numel() for n, p in m.named_parameters() if "constant_matrices" not in n)
    assert count(stock) - count(patched) == expected_pruned(name, stock, static) > 0
    assert attention_modules(patched)[2].constant_matrices.shape == (H, T, T)
    if name != "gpt2":  # GPT-2's c_attn also computes the values
        calls = []
        for sub in (attention_modules(patched)[2].q_proj, attention_modules(patched)[2].k_proj):
            sub.register_forward_hook(lambda *a: calls.append(1))
        ids, mask = right_padded_batch()
        run(patched, ids, mask)
        run(patched, ids, mask, output_attentions=True)
        assert calls == []


@pytest.mark.parametrize("name,head", [(name, head) for name in DECODER_NAMES for head in ("sequence", "causal")
                                       if decoder_class_name(name, head)])
def test_save_and_reload_give_identical_logits(tmp_path, name, head):
    from papa.models.modeling import build_model, load_papa_model, save_papa_model

    model_class = decoder_class_name(name, head)
    torch.manual_seed(0)
    model = build_model(model_class, tiny_decoder_config(name), None, random_constants(),
                        [[0, 1], [2, 0], [2, 1], [2, 3]]).eval()
    save_papa_model(model, tmp_path)
    reloaded = load_papa_model(str(tmp_path))
    assert reloaded.config.use_cache is False
    ids, mask = right_padded_batch()
    got, want = run(reloaded, ids, mask).logits, run(model, ids, mask).logits
    if head == "causal":  # padded queries with no real key in their window: eager (saved) and sdpa (reloaded) differ
        got, want = got[mask == 1], want[mask == 1]
    assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_sequence_classifier_reads_the_last_real_token():
    """Right padding with pad_token_id set: the patched classifier's logits for a padded example are the
    stock model's on that example alone, unpadded (it pools the last real token)."""
    stock = tiny_decoder("llama", head="sequence")
    patched = papa.patch_model(copy.deepcopy(stock), random_constants())
    ids, mask = right_padded_batch(lengths=(T, 7, 3))
    logits = run(patched, ids, mask).logits
    for b, n in enumerate((T, 7, 3)):
        want = run(stock, ids[b:b + 1, :n], mask[b:b + 1, :n], use_cache=False).logits
        assert_close(logits[b:b + 1], want, rtol=1e-5, atol=1e-5)


def test_float64_windows_of_padding_only_stay_finite():
    """In float64 a padded query whose sliding window holds padding only (Mistral's window 4; the 3-token example
    from position 7 on) is a fully masked row: the probabilities path keeps it finite (the stock eager softmax,
    cast to float32, turns finfo(float64).min into -inf and gives NaN) and equals the fast path where it counts."""
    patched = papa.patch_model(tiny_decoder("mistral").double(), random_constants().double(),
                               static_heads=[[0, 1], [1, 2]])
    ids, mask = right_padded_batch(lengths=(T, 7, 3))
    fast = run(patched, ids, mask).logits
    probabilities_path = run(patched, ids, mask, output_attentions=True).logits
    real = mask.bool()
    assert torch.isfinite(probabilities_path[real]).all()
    assert_close(probabilities_path[real], fast[real], rtol=1e-10, atol=1e-10)


def test_patched_decoders_default_to_no_cache_and_gpt2_takes_one_when_asked():
    """Patched decoders run full-sequence forwards unless asked (config.use_cache False); asked, GPT-2 fills a cache
    and gives the same logits (the steps themselves: tests/test_generation.py)."""
    model = papa.patch_model(tiny_decoder("llama"), random_constants(), static_heads=[[0, 1]])
    assert model.config.use_cache is False
    ids, mask = right_padded_batch()
    gpt2 = papa.patch_model(tiny_decoder("gpt2"), random_constants(), static_heads=[[0, 1]])
    assert gpt2.config.use_cache is False
    cached = run(gpt2, ids, mask, use_cache=True)
    assert cached.past_key_values is not None and cached.past_key_values.get_seq_length() == ids.shape[1]
    real = mask.bool()
    assert_close(cached.logits[real], run(gpt2, ids, mask).logits[real], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("implementation", ["flash_attention_2", "flex_attention"])
def test_attention_kernels_that_drop_the_window_are_a_clear_error(implementation):
    # flash and flex kernels receive no 4-D mask: a patched Mistral would lose its sliding window silently
    model = tiny_decoder("mistral", impl="sdpa")
    model.config._attn_implementation = implementation  # as loaded with it (flash-attn is not installed here)
    with pytest.raises(PapaError, match=f"attn_implementation='{implementation}'.*'sdpa'"):
        papa.patch_model(model, random_constants(), static_heads=[[0, 1]])
    assert not any(isinstance(m, PapaAttention) for m in attention_modules(model))  # nothing half-patched


def test_averages_per_key_value_head_are_a_clear_error():
    per_kv_head = torch.rand(L, KV, T, T)
    with pytest.raises(PapaError, match="key/value heads.*query heads"):
        papa.patch_model(tiny_decoder("qwen3"), per_kv_head, static_heads=[[0, 1]])
    with pytest.raises(PapaError, match="key/value heads.*query heads"):
        papa.patch_model(tiny_decoder("qwen3"), mean_outputs=torch.rand(L, KV, T, D_HEAD), static_heads=[[0, 1]])


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_mean_output_heads(name):
    """Mean-output heads output their mean vector at real positions; the rest of the layer is unchanged."""
    means = torch.rand(L, H, T, D_HEAD, generator=torch.Generator().manual_seed(4))
    model = papa.patch_model(tiny_decoder(name, head="base"), mean_outputs=means, static_heads=[[1, 0], [1, 1]])
    captured = capture_layer(model, 1)
    ids, mask = right_padded_batch()
    fast = run(model, ids, mask).last_hidden_state
    slow = run(model, ids, mask, output_attentions=True).last_hidden_state
    real = mask > 0
    assert_close(fast[real], slow[real], rtol=1e-5, atol=1e-5)
    assert captured["output"][1][:, :2].abs().max() == 0  # mean-output heads do not attend


def batches(ids, mask, size):
    for start in range(0, len(ids), size):
        yield {"input_ids": ids[start:start + size], "attention_mask": mask[start:start + size]}


@pytest.mark.parametrize("name", DECODER_NAMES)
def test_mean_outputs_of_one_example_reproduce_it(name):
    from papa.method.averaging import accumulate_attention

    stock = tiny_decoder(name)
    ids, mask = right_padded_batch(lengths=(8,))
    means = accumulate_attention(stock, batches(ids, mask, 1), T, mean_outputs=True).mean_outputs()
    assert means.shape == (L, H, T, D_HEAD)
    ablated = papa.patch_model(copy.deepcopy(stock), static_heads=all_heads(), mean_outputs=means)
    real = mask == 1
    assert_close(run(ablated, ids, mask).logits[real], run(stock, ids, mask, use_cache=False).logits[real],
                 rtol=1e-5, atol=1e-5)


def test_gpt2_layer_scaled_and_upcast_attention():
    """GPT-2's options scale_attn_by_inverse_layer_idx (logits / (layer + 1)) and reorder_and_upcast_attn
    (float32 logits): 0 replaced = stock, and the exact attention of an example as constants reproduces it."""
    import transformers

    config = tiny_decoder_config("gpt2")
    config.scale_attn_by_inverse_layer_idx = config.reorder_and_upcast_attn = True
    torch.manual_seed(0)
    stock = transformers.GPT2LMHeadModel(config).eval()
    ids, mask = right_padded_batch()
    reference = run(stock, ids, mask, output_attentions=True, use_cache=False)
    patched = papa.patch_model(copy.deepcopy(stock), random_constants())
    got = run(patched, ids, mask, output_attentions=True)
    assert_close(got.logits, reference.logits, rtol=1e-5, atol=1e-6)
    for g, w in zip(got.attentions, reference.attentions):
        assert_close(g, w, rtol=1e-5, atol=1e-6)
    assert mask[0].all()
    exact = torch.stack([a[0] for a in reference.attentions])  # example 0's: it has no padding
    constant = papa.patch_model(copy.deepcopy(stock), exact, static_heads=all_heads())
    assert_close(run(constant, ids, mask).logits[0], reference.logits[0], rtol=1e-5, atol=1e-5)
