"""Generation with a key/value cache in patched decoders (papa/families/generation.py): every decoding step's
logits against the patched model's full (no-cache) forward at that position, greedy `generate` against an argmax
loop over full forwards, the cache's bytes against the arithmetic, and the refusals."""

import copy

import pytest
import torch
from torch.testing import assert_close
from transformers import DynamicCache, StaticCache

from papa.errors import PapaError
from papa.families import attention_modules, block_triangle
from papa.families.generation import cache_bytes
from papa.method.attention import patch_model
from papa.method.structured_averaging import sink_window
from tiny_decoders import D_HEAD, H, KV, L, T, tiny_decoder

# heads 2, 3 are K/V group 1 (H = 4 query heads read KV = 2 groups): layer 0 replaces a whole group, layer 1 every
# head, layer 2 one head of group 0 (its group keeps K)
SOME = {0: [2, 3], 1: [0, 1, 2, 3], 2: [1]}
STATIC = {"none": {}, "some": SOME, "all": {layer: list(range(H)) for layer in range(L)}}


def constants(kind, seed=0):
    """Keyword arguments of patch_model for each kind of constant, float64."""
    g = torch.Generator().manual_seed(seed)
    if kind.startswith("full"):  # T × T, lower triangular (a decoder's averages are), zero rows included
        C = torch.rand(L, H, T, T, generator=g, dtype=torch.float64).tril()
        C[0, 2, 4] = 0
        return {"constant_matrices": C}
    if kind == "toeplitz":  # sink s = 1, a profile over every distance of T
        return {"structured": (torch.rand(L, H, 1, generator=g, dtype=torch.float64),
                               torch.rand(L, H, T, generator=g, dtype=torch.float64))}
    sink, profile = sink_window(L, H, sinks=2, window=3)
    return {"structured": (sink.double() * torch.rand(L, H, 2, generator=g, dtype=torch.float64), profile.double())}


def patched(name, kind, static, seed=0):
    stock = tiny_decoder(name).double()
    if not static:
        return patch_model(stock, constants("full")["constant_matrices"], static_heads={})
    return patch_model(stock, static_heads=static, **constants(kind, seed))


def left_padded(seed=3, pad=3, vocab_size=120):
    """ids (2, T) and mask: example 1 starts with `pad` pad tokens, as a left-padding tokenizer makes them."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab_size, (2, T), generator=g)
    mask = torch.ones(2, T, dtype=torch.long)
    mask[1, :pad] = 0
    ids[1, :pad] = 0
    return ids, mask


def stepped_logits(model, ids, mask, prompt, chunks):
    """Logits (B, T, V) from a prompt of `prompt` tokens then steps of `chunks` tokens each, over one cache."""
    cache = DynamicCache(config=model.config)
    out, start = [], 0
    for size in [prompt, *chunks]:
        stop = start + size
        with torch.no_grad():
            step = model(input_ids=ids[:, start:stop], attention_mask=mask[:, :stop], cache=cache, use_cache=True)
        out.append(step.logits)
        start = stop
    assert start == ids.shape[1]
    return torch.cat(out, dim=1), cache


@pytest.mark.parametrize("fft", [False, True])
@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("static", ["none", "some", "all"])
@pytest.mark.parametrize("kind", ["full", "full_strips", "toeplitz", "sink_window"])
@pytest.mark.parametrize("name", ["llama", "mistral", "gemma3_text", "gpt2"])
def test_each_step_equals_the_full_forward(name, kind, static, impl, fft, monkeypatch):
    """Prompt of 5, one step of 3 tokens, then single tokens to T: every real position's logits equal the full
    forward's, in a left-padded batch (Mistral and Gemma 3: sliding windows of 4, shorter than T; full_strips: the
    constants held as block-row strips; GPT-2: each head its own K/V head, learned positions). `fft`: structured
    constants by their FFT product at every length, the prompt's (prefill) and the full forward's alike."""
    if static == "none" and kind != "full":
        pytest.skip("no constant head: the kind plays no part")
    if fft and kind not in ("toeplitz", "sink_window"):
        pytest.skip("the FFT product is structured constants'")
    if fft:
        from papa.families import structured

        monkeypatch.setattr(structured, "FFT_MIN_LENGTH", 1)
    if kind == "full_strips":
        monkeypatch.setattr(block_triangle, "BLOCK", 4)  # T = 12 ≥ 2·4: held as strips of 4 rows
    model = patched(name, kind, STATIC[static])
    model.config._attn_implementation = impl
    if kind == "full_strips":
        assert attention_modules(model)[1].papa_block == 4
    ids, mask = left_padded()
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    steps, _ = stepped_logits(model, ids, mask, 5, [3] + [1] * (T - 8))
    real = mask.bool()
    assert torch.isfinite(steps[real]).all()
    assert_close(steps[real], full[real], rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("padded", [True, False])
def test_float32_steps_equal_the_full_forward(impl, padded):
    """float32, and without padding: under sdpa the layers then get no mask at all (single-token steps attend to every
    cached key; a multi-token step gets the causal band of its last keys)."""
    model = patch_model(tiny_decoder("llama", impl), static_heads=SOME, structured=sink_window(L, H, sinks=2, window=3))
    ids, mask = left_padded() if padded else (torch.randint(5, 120, (1, T), generator=torch.Generator().manual_seed(9)),
                                              torch.ones(1, T, dtype=torch.long))
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    steps, _ = stepped_logits(model, ids, mask, 4, [3] + [1] * (T - 7))
    assert_close(steps[mask.bool()], full[mask.bool()], rtol=1e-4, atol=1e-5)


def argmax_loop(model, ids, steps, pad_to=None):
    """Greedy decoding by full forwards over the whole sequence, no cache; `pad_to`: right-padded to that length
    (full constants run at their own T only; a causal row never reads the padding after it)."""
    for _ in range(steps):
        n = ids.shape[1]
        padded, mask = ids, torch.ones_like(ids)
        if pad_to is not None:
            padded = torch.cat([ids, ids.new_zeros(1, pad_to - n)], dim=1)
            mask = torch.cat([mask, mask.new_zeros(1, pad_to - n)], dim=1)
        with torch.no_grad():
            logits = model(input_ids=padded, attention_mask=mask, use_cache=False).logits[:, n - 1]
        ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
    return ids


@pytest.mark.parametrize("kind", ["full", "sink_window", "toeplitz"])
def test_greedy_generate_equals_an_argmax_loop(kind):
    model = patched("llama", kind, SOME)
    prompt = torch.randint(5, 120, (1, 4), generator=torch.Generator().manual_seed(4))
    new = T - 5 if kind == "full" else 16  # full constants stop at T (the last token is not fed back); structured ones go past it
    got = model.generate(prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False, use_cache=True,
                         pad_token_id=0, return_dict_in_generate=True)
    assert sum(layer["constant_values"] for layer in cache_bytes(got.past_key_values)) > 0
    assert got.sequences.shape == (1, 4 + new)
    assert torch.equal(got.sequences, argmax_loop(model, prompt, new, pad_to=T if kind == "full" else None))


def test_batched_left_padded_generate_equals_an_argmax_loop():
    """Two prompts, one left-padded: generate's tokens against full forwards with generate's position ids (the
    mask's running count) and mask, example by example."""
    model = patched("llama", "sink_window", SOME)
    ids, mask = left_padded(pad=2)
    ids, mask = ids[:, :6], mask[:, :6]
    new = 9
    got = model.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                         use_cache=True, pad_token_id=0)
    want = ids
    for _ in range(new):
        full_mask = torch.cat([mask, mask.new_ones(2, want.shape[1] - 6)], dim=1)
        positions = (full_mask.cumsum(-1) - 1).masked_fill(full_mask == 0, 1)
        with torch.no_grad():
            logits = model(input_ids=want, attention_mask=full_mask, position_ids=positions, use_cache=False).logits
        want = torch.cat([want, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(got, want)


def test_full_constants_refuse_rows_they_do_not_have():
    model = patched("llama", "full", SOME)
    ids = torch.randint(5, 120, (1, T + 1), generator=torch.Generator().manual_seed(5))
    with pytest.raises(PapaError, match=f"{T}x{T}: they hold no row for position {T}.*structured constants"):
        stepped_logits(model, ids, torch.ones_like(ids), T, [1])


def expected_bytes(batch, total, retained, element=4):
    """Per layer (keys, values, constant values, positions) of SOME with sink_window, from the arithmetic: a group
    with a dynamic head keeps K and V at every position, a group of constant heads only V at `retained` positions
    (plus their validity, 1 byte per example: the eager model passes a mask)."""
    per_position = batch * D_HEAD * element  # one K/V head, one position
    side = batch * retained
    return [
        {"keys": per_position * total, "values": per_position * total,  # group 0 dynamic, group 1 constant
         "constant_values": per_position * retained, "validity": side},
        {"keys": 0, "values": 0, "constant_values": 2 * per_position * retained, "validity": side},  # all constant
        {"keys": 2 * per_position * total, "values": 2 * per_position * total,  # head 1 constant, both groups kept
         "constant_values": 0, "validity": side},
    ]


@pytest.mark.parametrize("sinks, window", [(2, 3), (1, 6), (4, 1)])
def test_cache_bytes_follow_the_arithmetic(sinks, window):
    """sink_window keeps s + w − 1 positions of a constant-only group's V between steps, and no K; the stock model's
    cache keeps K and V of both groups at every position."""
    stock = tiny_decoder("llama")
    model = patch_model(copy.deepcopy(stock), static_heads=SOME, structured=sink_window(L, H, sinks, window))
    ids = torch.randint(5, 120, (2, T), generator=torch.Generator().manual_seed(6))
    mask = torch.ones_like(ids)
    _, cache = stepped_logits(model, ids, mask, 5, [1] * (T - 5))
    assert cache_bytes(cache) == expected_bytes(2, T, sinks + window - 1)
    stock_cache = DynamicCache(config=stock.config)
    with torch.no_grad():
        stock(input_ids=ids, cache=stock_cache, use_cache=True)
    per_layer = 2 * KV * 2 * T * D_HEAD * 4  # K and V, 2 examples, 2 groups, T positions, float32
    assert [b["keys"] + b["values"] for b in cache_bytes(stock_cache)] == [per_layer] * L


def test_toeplitz_keeps_its_profile_extent():
    g = torch.Generator().manual_seed(7)
    profile_len = 5
    model = patch_model(tiny_decoder("llama"), static_heads=SOME,
                        structured=(torch.rand(L, H, 1, generator=g), torch.rand(L, H, profile_len, generator=g)))
    ids = torch.randint(5, 120, (1, T), generator=g)
    _, cache = stepped_logits(model, ids, torch.ones_like(ids), 3, [1] * (T - 3))
    assert cache_bytes(cache)[1]["constant_values"] == 2 * D_HEAD * 4 * (1 + profile_len - 1)


def test_refusals():
    ids = torch.randint(5, 120, (1, 6), generator=torch.Generator().manual_seed(8))
    model = patched("llama", "sink_window", SOME)
    with pytest.raises(PapaError, match="no attention probabilities"):
        model(input_ids=ids, use_cache=True, output_attentions=True)
    model.train()
    with pytest.raises(PapaError, match="model.eval"):
        model(input_ids=ids, use_cache=True)
    model.eval()
    stock = tiny_decoder("llama").double()
    cache = DynamicCache(config=stock.config)
    with torch.no_grad():
        stock(input_ids=ids, cache=cache, use_cache=True)
    with pytest.raises(PapaError, match="filled by another model"):
        model(input_ids=ids[:, :1], cache=cache, use_cache=True)
    static = StaticCache(config=model.config, max_cache_len=16)
    with pytest.raises(PapaError, match="not with a StaticLayer"):
        model(input_ids=ids, cache=static, use_cache=True)
    mixed = patch_model(tiny_decoder("llama"), constants("full")["constant_matrices"].float(), mix_all_heads=True)
    with pytest.raises(PapaError, match="mix mode"):
        mixed(input_ids=ids, use_cache=True)
    with torch.no_grad():
        model(input_ids=ids, cache=(cache := DynamicCache(config=model.config)), use_cache=True)
    with pytest.raises(PapaError, match="cannot be edited with crop.*beam search work"):
        cache.crop(2)


@pytest.mark.parametrize("name, kind", [("llama", "sink_window"), ("gpt2", "toeplitz"), ("gemma3_text", "toeplitz")])
def test_beam_search_equals_beam_search_without_a_cache(name, kind):
    """Beam search reorders the cache after every step; the constant heads' side state must follow it. Against the
    same beam search with use_cache=False (every step a full forward over the whole sequence), on a left-padded
    batch of two prompts: the same sequences and the same scores."""
    model = patched(name, kind, SOME)
    ids, mask = left_padded(pad=2)
    ids, mask = ids[:, :5], mask[:, :5]
    new = 10  # past T: structured constants (use_cache=False runs the full forward at every length)
    common = dict(attention_mask=mask, max_new_tokens=new, min_new_tokens=new, num_beams=3, num_return_sequences=2,
                  do_sample=False, pad_token_id=0, return_dict_in_generate=True, output_scores=True)
    cached = model.generate(ids, use_cache=True, **common)
    full = model.generate(ids, use_cache=False, **common)
    assert sum(layer["constant_values"] for layer in cache_bytes(cached.past_key_values)) > 0
    assert torch.equal(cached.sequences, full.sequences)
    assert_close(cached.sequences_scores, full.sequences_scores, rtol=1e-9, atol=1e-10)


def test_reused_rows_past_the_window_equal_the_full_forward():
    """Without padding (sdpa: no mask) a structured layer reuses its normalised rows once the retained positions
    repeat relative to the query; 30 single-token steps past T against the full forward at length 34."""
    model = patched("llama", "sink_window", SOME)
    model.config._attn_implementation = "sdpa"
    ids = torch.randint(5, 120, (1, 34), generator=torch.Generator().manual_seed(10))
    with torch.no_grad():
        full = model(input_ids=ids, use_cache=False).logits
    steps, _ = stepped_logits(model, ids, torch.ones_like(ids), 4, [1] * 30)
    assert_close(steps, full, rtol=1e-9, atol=1e-10)
    rows = model.model.layers[1].self_attn.__dict__["_papa_rows"]
    assert 0 < len(rows) < 10  # reused: far fewer entries than steps


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_gpt2_scaled_and_upcast_steps(impl):
    """GPT-2 with scale_attn_by_inverse_layer_idx and reorder_and_upcast_attn (float32 logits, so float32 throughout:
    stock's upcast path refuses float64): with no head replaced, every cached step equals stock GPT-2's own cached
    steps; with some replaced, the patched full forward."""
    import transformers

    from tiny_decoders import tiny_decoder_config

    config = tiny_decoder_config("gpt2", impl)
    config.scale_attn_by_inverse_layer_idx = config.reorder_and_upcast_attn = True
    torch.manual_seed(0)
    stock = transformers.GPT2LMHeadModel(config).eval()
    ids, mask = left_padded()
    stock_steps, _ = stepped_logits(stock, ids, mask, 5, [3] + [1] * (T - 8))
    none = patch_model(copy.deepcopy(stock), constants("full")["constant_matrices"].float(), static_heads={})
    steps, _ = stepped_logits(none, ids, mask, 5, [3] + [1] * (T - 8))
    real = mask.bool()
    assert_close(steps[real], stock_steps[real], rtol=1e-4, atol=1e-5)
    sink, profile = constants("toeplitz")["structured"]
    some = patch_model(copy.deepcopy(stock), static_heads=SOME, structured=(sink.float(), profile.float()))
    with torch.no_grad():
        full = some(input_ids=ids, attention_mask=mask, use_cache=False).logits
    steps, _ = stepped_logits(some, ids, mask, 5, [3] + [1] * (T - 8))
    assert_close(steps[real], full[real], rtol=1e-4, atol=1e-5)
