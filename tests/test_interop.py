"""papa.interop: PAPA's averages and ranking as attention-pattern hooks (TransformerLens's hook_pattern).

- the hook against a plain per-row numpy computation of norm(X·P) (tests/numpy_attention.py), padded rows, an
  all-zero row and a band included, in float64 and float32;
- the hooks on tiny stock decoders (Llama, Mistral and Qwen2 with sliding windows, Gemma3) against papa's patched
  models, through an eager attention that hands its probabilities to the hooks (no TransformerLens needed);
- TransformerLens's TransformerBridge on the bundled SmolLM2 with the hooks against papa's patched SmolLM2, k = 0
  and k = 135 (skipped with the reason where transformer-lens or the weights are missing);
- the errors: a pattern of another length, a mask of another batch, k beyond the ranking.
"""

import json

import numpy as np
import pytest
import torch
from torch.testing import assert_close

import papa
from papa.errors import PapaError
from papa.interop import layer_bands, pattern_hooks, replace_pattern
from papa.method.layouts import pack, packed_record
from numpy_attention import np_, numpy_norm
from tiny_decoders import H, L, T, right_padded_batch, tiny_decoder


def causal_softmax(B, heads, T_, valid, seed=0, dtype=torch.float64):
    """Random attention probabilities (B, heads, T, T) under the causal band and the padding (stock-like)."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(B, heads, T_, T_, generator=g, dtype=dtype)
    allowed = torch.tril(torch.ones(T_, T_, dtype=torch.bool)) & valid.bool()[:, None, None, :]
    return scores.masked_fill(~allowed, float("-inf")).softmax(-1).nan_to_num()


def random_constants(layers, heads, T_, seed=0):
    """Nonnegative [L, H, T, T] averages with all-zero rows (positions no example reached), as in avgs.pt."""
    g = torch.Generator().manual_seed(seed)
    constants = torch.rand(layers, heads, T_, T_, generator=g)
    constants[..., T_ - 2:, :] = 0  # the last two query positions: never reached
    return constants


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_hook_matches_a_per_row_numpy_computation(dtype):
    B, heads, T_ = 3, 4, 7
    valid = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 2 + [0] * 5])
    pattern = causal_softmax(B, heads, T_, valid, dtype=dtype)
    band = np.tril(np.ones((T_, T_)))
    constants = random_constants(1, 2, T_)[0] * torch.from_numpy(band).float()  # heads 1 and 3, band applied
    got = replace_pattern(pattern, None, heads=[1, 3], constants=constants, valid=valid)
    assert got.dtype == dtype and got.shape == pattern.shape
    for b in range(B):
        m = valid[b].numpy().astype(float)
        for h in range(heads):
            source = np_(constants[[1, 3].index(h)]) if h in (1, 3) else np_(pattern[b, h])
            expected = numpy_norm(source, m)
            assert np.allclose(np_(got[b, h]), expected, atol=1e-12 if dtype == torch.float64 else 1e-6), (b, h)
    assert (got[:, [1, 3], T_ - 2:] == 0).all()  # all-zero rows stay zero, no NaN
    assert (got[2, :, 2:] == 0).all()  # padded query rows of every head in the layer


def test_hook_without_padding_only_replaces_the_heads():
    pattern = causal_softmax(2, 3, 5, torch.ones(2, 5))
    constants = torch.tril(torch.rand(1, 5, 5))
    got = replace_pattern(pattern, None, heads=[2], constants=constants)
    assert_close(got[:, :2], pattern[:, :2], rtol=0, atol=1e-15)  # rows summing to 1 are kept
    assert_close(got[:, 2], (constants[0] / constants[0].sum(-1, keepdim=True)).double().expand(2, 5, 5))


def write_artifacts(folder, constants, ranking, packed=False):
    folder.mkdir(parents=True, exist_ok=True)
    record = packed_record(pack(constants), constants.shape[-1]) if packed else constants
    torch.save(record, folder / "avgs.pt")
    (folder / "sorted_heads.json").write_text(json.dumps(ranking))
    return folder


@pytest.mark.parametrize("packed", [False, True])
def test_hooks_from_files_name_the_layers_of_the_first_k_heads(tmp_path, packed):
    constants = torch.tril(random_constants(3, 4, 6))
    ranking = [[2, 1], [0, 3], [2, 0]] + [[layer, h] for layer in range(3) for h in range(4)
                                          if [layer, h] not in ([2, 1], [0, 3], [2, 0])]
    folder = write_artifacts(tmp_path / "run", constants, ranking, packed)
    assert pattern_hooks(folder, folder, 0) == []
    hooks = dict(pattern_hooks(folder / "avgs.pt", folder / "sorted_heads.json", 3))
    assert sorted(hooks) == ["blocks.0.attn.hook_pattern", "blocks.2.attn.hook_pattern"]
    pattern = causal_softmax(1, 4, 6, torch.ones(1, 6))
    got = hooks["blocks.2.attn.hook_pattern"](pattern, None)
    for h, expected in ((0, constants[2, 0]), (1, constants[2, 1])):
        assert np.allclose(np_(got[0, h]), numpy_norm(np_(expected), np.ones(6)), atol=1e-12)
    assert_close(got[0, 2:], pattern[0, 2:])


def test_bands_follow_the_models_sliding_windows():
    bands = layer_bands(tiny_decoder("gemma3_text"), L, T)  # layers: sliding (4), full, sliding
    distance = torch.arange(T)[:, None] - torch.arange(T)[None, :]
    assert torch.equal(bands[1], distance >= 0)
    assert torch.equal(bands[0], (distance >= 0) & (distance < 4)) and torch.equal(bands[2], bands[0])
    assert all(torch.equal(b, distance >= 0) for b in layer_bands(None, 2, T))


def test_errors_name_the_problem(tmp_path):
    constants = torch.tril(random_constants(1, 2, 6))
    folder = write_artifacts(tmp_path / "run", constants, [[0, 1], [0, 0]])
    (name, hook), = pattern_hooks(folder, folder, 1)
    with pytest.raises(PapaError, match="6x6 but the attention pattern is 5x5"):
        hook(torch.ones(1, 2, 5, 5), None)
    (_, masked), = pattern_hooks(folder, folder, 1, attention_mask=torch.ones(3, 6))
    with pytest.raises(PapaError, match="this batch's attention_mask"):
        masked(torch.ones(2, 2, 6, 6), None)
    with pytest.raises(PapaError, match="between 0 and 2"):
        pattern_hooks(folder, folder, 3)
    with pytest.raises(PapaError, match="does not exist"):
        pattern_hooks(folder, [[0, 1], [5, 0]], 2)
    with pytest.raises(PapaError, match="constant matrices not found"):
        pattern_hooks(tmp_path / "nothing", folder, 1)


# ------------------------------------------------------------------ the hooks on a model, without TransformerLens

def hooked_eager_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """transformers' eager attention (Llama's) with its probabilities passed through this layer's hook, as
    TransformerLens's hook_pattern passes them."""
    from transformers.models.llama.modeling_llama import repeat_kv

    key, value = repeat_kv(key, module.num_key_value_groups), repeat_kv(value, module.num_key_value_groups)
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask
    probs = scores.softmax(-1, dtype=torch.float32).to(query.dtype)
    hook = HOOKS.get(f"layer{module.layer_idx}")
    probs = probs if hook is None else hook(probs, None)
    return torch.matmul(probs, value).transpose(1, 2).contiguous(), probs


HOOKS = {}


@pytest.fixture
def hooked_implementation():
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register("papa_test_hooked", hooked_eager_attention)
    AttentionMaskInterface.register("papa_test_hooked", eager_mask)
    yield "papa_test_hooked"
    HOOKS.clear()


def left_padded(ids, mask):
    """The right-padded batch with each row's padding moved to its front."""
    shifts = (mask == 0).sum(1)
    return (torch.stack([row.roll(int(n)) for row, n in zip(ids, shifts)]),
            torch.stack([row.roll(int(n)) for row, n in zip(mask, shifts)]))


@pytest.mark.parametrize("padding", ["right", "left"])
@pytest.mark.parametrize("name", ["llama", "mistral", "qwen2", "gemma3_text"])
def test_hooks_on_a_stock_decoder_match_papas_patched_decoder(name, padding, hooked_implementation):
    """Left padding puts padded keys inside real rows' causal band, where the renormalisation to P matters."""
    ids, mask = right_padded_batch() if padding == "right" else left_padded(*right_padded_batch())
    constants = random_constants(L, H, T, seed=3)
    ranking = [[layer, h] for layer in range(L) for h in range(H)]
    ranking = [ranking[i] for i in torch.randperm(len(ranking), generator=torch.Generator().manual_seed(4))]
    k = len(ranking) // 2
    patched = papa.patch_model(tiny_decoder(name), constants, static_heads=ranking[:k])
    stock = tiny_decoder(name)
    stock.set_attn_implementation(hooked_implementation)
    HOOKS.update({hook_name: hook for hook_name, hook in pattern_hooks(constants, ranking, k, model=stock,
                                                                        attention_mask=mask, hook_name="layer{layer}")})
    assert len(HOOKS) == L
    with torch.no_grad():
        expected = patched(input_ids=ids, attention_mask=mask).logits
        got = stock(input_ids=ids, attention_mask=mask, use_cache=False).logits
        plain = tiny_decoder(name)(input_ids=ids, attention_mask=mask, use_cache=False).logits
    real = mask.bool()
    assert_close(got[real], expected[real], rtol=1e-5, atol=1e-5)
    assert (plain[real] - expected[real]).abs().max() > 100 * 1e-5  # the constant heads change the logits


# ------------------------------------------------------------------ TransformerLens on the bundled SmolLM2

SMOL_T = 20


@pytest.fixture(scope="module")
def smollm2_folder():
    pytest.importorskip("transformer_lens", reason="transformer-lens is not installed (pip install "
                        "'papa-attention[transformer-lens]')")
    from papa.models.bundled import local_model_path

    try:
        return local_model_path("smollm2")
    except PapaError as err:
        pytest.skip(f"the bundled SmolLM2 cannot be had here: {err}")


@pytest.fixture(scope="module")
def bridge(smollm2_folder):
    from transformer_lens.model_bridge import TransformerBridge

    return TransformerBridge.boot_transformers(str(smollm2_folder), device="cpu", dtype=torch.float32)


@pytest.mark.parametrize("k", [0, 135])
def test_transformer_lens_bridge_with_the_hooks_matches_papas_smollm2(smollm2_folder, bridge, k):
    """float32 throughout; a full row and a left-padded one (its padded keys inside the causal band). Papa's own two
    paths (fused kernels; probabilities, with output_attentions) differ by float32 rounding; the bridge with the
    hooks must agree with papa within a few times that, and within 2e-5 of the logits' scale."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_folder)
    full = tokenizer("The capital of France is Paris, and the capital of Italy is Rome. The capital of Spain is",
                     return_tensors="pt", max_length=SMOL_T, truncation=True)["input_ids"][0]
    short = tokenizer("A dog barked at the mailman.", return_tensors="pt")["input_ids"][0]
    assert len(full) == SMOL_T and len(short) < SMOL_T - 4
    ids, mask = torch.full((2, SMOL_T), tokenizer.pad_token_id), torch.zeros(2, SMOL_T, dtype=torch.long)
    ids[0], mask[0] = full, 1
    ids[1, SMOL_T - len(short):], mask[1, SMOL_T - len(short):] = short, 1
    model = AutoModelForCausalLM.from_pretrained(smollm2_folder, dtype=torch.float32).eval()
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    constants = torch.tril(random_constants(layers, heads, SMOL_T, seed=5))
    ranking = [[i // heads, i % heads] for i in torch.randperm(layers * heads,
                                                                generator=torch.Generator().manual_seed(6)).tolist()]
    papa.patch_model(model, constants, static_heads=ranking[:k])
    hooks = pattern_hooks(constants, ranking, k, model=bridge, attention_mask=mask)
    assert len(hooks) == len({layer for layer, _ in ranking[:k]})
    real = mask.bool()
    with torch.no_grad():
        fast = model(input_ids=ids, attention_mask=mask).logits[real]
        probabilities = model(input_ids=ids, attention_mask=mask, output_attentions=True).logits[real]
        got = bridge.run_with_hooks(ids, fwd_hooks=hooks, attention_mask=mask)[real]
        stock = bridge(ids, attention_mask=mask)[real]
    papas_rounding = (fast - probabilities).abs().max()
    for expected in (fast, probabilities):
        assert_close(got, expected, rtol=0, atol=2e-5 * float(expected.abs().max()))
        assert (got - expected).abs().max() <= 4 * papas_rounding + 1e-6
    if k:
        assert (stock - fast).abs().max() > 1.0  # half the heads constant: far from the stock logits
