"""Generation with constant K/V groups on the two bundled decoders' real weights: greedy `generate` with the key/value
cache equals an argmax loop over full forwards of the same patched model without a cache, token by token, and each
step's logits equal the full forward's. A prompt past Gemma-3's 512-token sliding window; structured constants
(toeplitz, sink_window) on whole K/V groups, their prefill by the FFT product."""

import copy

import pytest
import torch
from torch.testing import assert_close

from papa.errors import PapaError
from papa.families import structured
from papa.method.attention import patch_model
from papa.method.structured_averaging import sink_window

pytestmark = pytest.mark.slow
PROMPT, NEW = 600, 6


def groups_constant(config, groups):
    """{layer: heads}: every query head of K/V groups `groups` ({layer: [group, ...]})."""
    size = config.num_attention_heads // config.num_key_value_heads
    return {layer: [g * size + h for g in gs for h in range(size)] for layer, gs in groups.items()}


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def bundled(request):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from papa.models.bundled import local_model_path

    try:
        path = local_model_path(request.param)
    except PapaError as err:
        pytest.skip(f"the bundled {request.param} cannot be had here: {err}")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    text = " ".join(["The grass is green. The sky is blue. The sun is yellow. Here we go."] * 60)
    ids = torch.tensor([AutoTokenizer.from_pretrained(path)(text)["input_ids"][:PROMPT]])
    return request.param, model, ids


@pytest.mark.parametrize("kind", ["toeplitz", "sink_window"])
def test_cached_generation_equals_full_forwards_token_by_token(bundled, kind, monkeypatch):
    name, stock, ids = bundled
    monkeypatch.setattr(structured, "FFT_MIN_LENGTH", 256)  # the prompt's constant heads by FFT, as from 1 024 on
    config = stock.config
    L, H, G = config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads
    g = torch.Generator().manual_seed(0)
    if kind == "toeplitz":  # a sink and a profile over 300 distances, positive
        constants = (torch.rand(L, H, 1, generator=g) + 0.1, torch.rand(L, H, 300, generator=g) + 0.01)
    else:
        constants = sink_window(L, H, sinks=4, window=64)
    # half of the layers lose a whole K/V group (Gemma: its only one, so every head of those layers)
    static = groups_constant(config, {layer: [layer % G] for layer in range(0, L, 2)})
    model = patch_model(copy.deepcopy(stock), static_heads=static, structured=constants).eval()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False,
                             use_cache=True, return_dict_in_generate=True, output_logits=True, pad_token_id=0)
        sequence = ids
        for step in range(NEW):
            logits = model(input_ids=sequence, use_cache=False).logits[:, -1]
            assert_close(out.logits[step], logits, rtol=1e-4, atol=2e-4, msg=lambda m: f"{name} step {step}: {m}")
            sequence = torch.cat([sequence, logits.argmax(-1, keepdim=True)], dim=1)
    assert out.sequences.tolist() == sequence.tolist()
    assert any(m.static_heads for m in model.model.layers[0].modules() if hasattr(m, "static_heads"))
