"""The field's head ablations beside PAPA (papa.method.ablations, the sweep's zero_output / first_token /
trained_constant controls), each against an independent computation on the stock model:

- zero_output: the stock model with the replaced heads' slice of the output projection's input set to 0 (a hook);
- first_token: the stock model with that slice set to the value vector of token 0 of the head's K/V group;
- trained_constant: the gradient the constant matrices train with is a central finite difference of the loss, and
  0 outside a decoder's causal band;
in an encoder (BERT), a grouped-K/V decoder (Llama: 4 query heads on 2 K/V heads) and GPT-2's fused projection,
with padding, in float32 and float64; and in every family, the attention they report.
"""

import pytest
import torch
from tiny_decoders import DECODER_NAMES, right_padded_batch, tiny_decoder
from tiny_encoders import FAMILY_NAMES, H, L, T, padded_batch, tiny_model
from torch.testing import assert_close

import papa
from papa.method.ablations import first_token_matrices, zero_outputs
from papa.method.attention import attention_modules

STATIC = {0: [1], 1: [0, 2, 3], 2: [0, 1, 2, 3]}  # a partly, a mostly and a wholly replaced layer
D = 8  # the tiny models' head width (hidden 32 / 4 heads)


def projections(model, name):
    """[(value projection, output projection, heads per K/V head)] per layer of a stock model."""
    if name == "bert":
        return [(layer.attention.self.value, layer.attention.output.dense, 1) for layer in model.bert.encoder.layer]
    if name == "llama":
        return [(layer.self_attn.v_proj, layer.self_attn.o_proj, 2) for layer in model.model.layers]
    return [(block.attn.c_attn, block.attn.c_proj, 1) for block in model.transformer.h]  # gpt2: [q | k | v]


def ablated_stock(model, name, ids, mask, first_token):
    """The stock model's output with each replaced head's context replaced (hooks): by 0, or by its value of token
    0. Padded queries get the same, so only real positions are compared."""
    handles, values = [], {}
    for layer, (value, output, group) in enumerate(projections(model, name)):
        def keep_values(module, args, out, layer=layer):
            values[layer] = out[..., 2 * H * D:] if name == "gpt2" else out  # (B, T, K/V heads · d)

        def replace(module, args, layer=layer, group=group):
            context = args[0].clone()  # (B, T, H·d)
            for head in STATIC.get(layer, []):
                kv = head // group
                columns = slice(head * D, (head + 1) * D)
                context[..., columns] = values[layer][:, :1, kv * D:(kv + 1) * D] if first_token else 0
            return (context,)
        handles += [value.register_forward_hook(keep_values), output.register_forward_pre_hook(replace)]
    try:
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=mask).logits
    finally:
        for handle in handles:
            handle.remove()


def tiny(name, dtype):
    head = "causal" if name in ("llama", "gpt2") else "sequence"
    model = (tiny_decoder(name, "sdpa", head=head) if name in DECODER_NAMES else tiny_model(name, "sdpa", head="token"))
    return model.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", ["bert", "llama", "gpt2"])
@pytest.mark.parametrize("mode", ["zero_output", "first_token"])
def test_ablation_equals_the_stock_model_with_the_heads_output_replaced(name, mode, dtype):
    ids, mask = right_padded_batch() if name in DECODER_NAMES else padded_batch(name)
    stock = tiny(name, dtype)
    expected = ablated_stock(stock, name, ids, mask, first_token=mode == "first_token")
    patched = tiny(name, dtype)
    replacement = ({"mean_outputs": zero_outputs(L, H, T, D)} if mode == "zero_output"
                   else {"constant_matrices": first_token_matrices(L, H, T)})
    papa.patch_model(patched, static_heads=STATIC, **replacement)
    with torch.no_grad():
        got = patched(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    tolerance = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    assert_close(got[real], expected[real], **tolerance)
    # and the ablation is not a no-op: the stock model without hooks differs
    with torch.no_grad():
        plain = stock(input_ids=ids, attention_mask=mask).logits
    assert (plain[real] - expected[real]).abs().max() > 1e-3


@pytest.mark.parametrize("name", FAMILY_NAMES + DECODER_NAMES)
def test_first_token_heads_attend_to_key_0_and_zero_heads_to_nothing(name):
    """In every family the replaced heads' reported attention: a first-token head's real query rows are one-hot on
    key 0 (a padded query's row 0); a zero-output head's rows are all 0 (it attends nowhere)."""
    decoder = name in DECODER_NAMES
    ids, mask = right_padded_batch() if decoder else padded_batch(name)
    for mode in ("first_token", "zero_output"):
        model = tiny_decoder(name, "eager", head="base") if decoder else tiny_model(name, "eager", head="base")
        replacement = ({"mean_outputs": zero_outputs(L, H, T, D)} if mode == "zero_output"
                       else {"constant_matrices": first_token_matrices(L, H, T)})
        papa.patch_model(model, static_heads=STATIC, **replacement)
        with torch.no_grad():
            attentions = model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
        modules = attention_modules(model)
        for layer, heads in STATIC.items():
            rows = attentions[layer][:, heads]  # (B, S, T, T)
            expected = torch.zeros_like(rows)
            if mode == "first_token":  # real queries that may see key 0 (a sliding window's band may not)
                band = modules[layer].papa_band_mask
                sees_first = torch.ones(T) if band is None else band[:, 0].float()  # (T,)
                expected[..., 0] = (mask[:, None, :] * sees_first).to(rows.dtype)
            assert_close(rows, expected, rtol=0, atol=1e-6)


def test_ablation_builders_are_views_of_the_right_values():
    ones = first_token_matrices(2, 3, 5)
    assert ones.shape == (2, 3, 5, 5) and ones.stride()[:2] == (0, 0)  # one matrix, not L·H copies
    expected = torch.zeros(5, 5)
    expected[:, 0] = 1
    assert torch.equal(ones[1, 2], expected)
    zeros = zero_outputs(2, 3, 5, 4)
    assert zeros.shape == (2, 3, 5, 4) and not zeros.any()


def test_trained_constants_gradient_is_the_finite_difference_and_stays_in_the_band():
    """What --grad_for_classifier_and_static_only trains: ∂loss/∂C of a replaced head, against a central difference
    in float64, and exactly 0 above a decoder's diagonal (its constants stay causal). GPT-2: a Llama's RMSNorm
    computes in float32 even in a float64 model, which drowns a finite difference."""
    model = tiny_decoder("gpt2", "sdpa").double()
    constants = torch.rand(L, H, T, T, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    papa.patch_model(model, constants, static_heads=STATIC)
    ids, mask = right_padded_batch()
    labels = ids.masked_fill(mask == 0, -100)

    def loss():  # the next-token loss in float64 (transformers' own upcasts the logits to float32 only)
        logits = model(input_ids=ids, attention_mask=mask).logits  # (B, T, V)
        return torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), labels[:, 1:])

    loss().backward()
    parameter = attention_modules(model)[1].constant_matrices  # layer 1's three replaced heads, (3, T, T)
    grad = parameter.grad
    upper = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    assert torch.equal(grad[:, upper], torch.zeros_like(grad[:, upper]))
    assert grad[:, ~upper].abs().max() > 0
    step = 1e-6
    for head, i, j in ((0, 5, 2), (2, 11, 0), (1, 3, 3)):
        with torch.no_grad():
            parameter[head, i, j] += step
            up = loss().item()
            parameter[head, i, j] -= 2 * step
            down = loss().item()
            parameter[head, i, j] += step
        assert grad[head, i, j].item() == pytest.approx((up - down) / (2 * step), rel=1e-5, abs=1e-9)
