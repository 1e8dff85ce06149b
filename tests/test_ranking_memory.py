"""A differentiating ranker's step (gates, taylor) on a decoder in O(T) memory, and the same numbers as before.

Checked on tiny random decoders: at T = 2 048 a gates step and a taylor batch, forward and backward, make no tensor of
T × T elements or more (no (B, H, T, T) probabilities, no (H, T, T) constants): the dynamic heads run the fused
kernel's causal path, the structured constants the FFT product. With the blocks recomputed in the backward pass
(papa.method.gates.recomputed_blocks) the autograd graph keeps a fraction of the activations it keeps without. In
float64 the loss and every gate's gradient equal the probabilities path's (the mix built as (B, H, T, T) matrices, as
attentions are returned), with and without recomputation, with padding, grouped K/V and sliding windows. The bundled
decoders' version of the last check is in tests/test_bundled_decoders.py.
"""

import copy

import pytest
import torch
from torch.testing import assert_close
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from transformers import LlamaConfig, LlamaForCausalLM

from papa.families import structured as structured_module
from papa.method.attention import patch_model
from papa.method.example_losses import task_losses
from papa.method.gates import gated
from papa.method.scorers import Objective, make_units, taylor_scores, train_gates
from tiny_decoders import L, H, KV, right_padded_batch, tiny_decoder


class LargestTensor(TorchDispatchMode):
    """Records the largest tensor any op makes inside the block (the autograd engine's backward ops included)."""

    def __init__(self):
        super().__init__()
        self.largest = (0, None, None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.numel() > self.largest[0]:
                self.largest = (t.numel(), tuple(t.shape), str(func))
        return out


def long_decoder(seq_len):
    """A tiny Llama (4 query heads on 2 K/V heads) whose rotary reaches `seq_len`, sdpa, with Toeplitz-like structured
    constants reaching every distance, patched in mix mode as the ranking run patches it."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=120, hidden_size=32, intermediate_size=48, num_hidden_layers=L, num_attention_heads=H,
                         num_key_value_heads=KV, head_dim=8, max_position_embeddings=seq_len, pad_token_id=0)
    config._attn_implementation = "sdpa"
    model = LlamaForCausalLM(config).eval()
    g = torch.Generator().manual_seed(1)
    structured = (torch.rand(L, H, 1, generator=g), torch.rand(L, H, seq_len, generator=g))
    return patch_model(model, structured=structured, mix_all_heads=True)


def answer_batch(seq_len, answer=5, seed=3):
    """One retrieval-like example of `seq_len` tokens, nothing padded, its last `answer` tokens labelled."""
    ids = torch.randint(5, 120, (1, seq_len), generator=torch.Generator().manual_seed(seed))
    labels = torch.full_like(ids, -100)
    labels[:, -answer:] = ids[:, -answer:]
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def test_a_gates_step_and_a_taylor_batch_at_2048_tokens_make_no_t_by_t_tensor():
    T = 2048
    assert T >= structured_module.FFT_MIN_LENGTH  # the constant share by FFT, as at every long length
    model = long_decoder(T)
    objective = Objective(model, [answer_batch(T)], "lm", scored_only=True)
    assert objective.recompute  # from RECOMPUTE_FROM tokens on
    units = make_units(L, H, KV)
    with LargestTensor() as gates_step:
        train_gates(objective, units, steps=1)
    with LargestTensor() as taylor_batch:
        taylor_scores(objective, units)
    for mode in (gates_step, taylor_batch):
        numel, shape, op = mode.largest
        assert numel < T * T, f"{op} made a {shape} tensor"


def saved_bytes(objective, units):
    """Bytes of the distinct tensors the autograd graph of one gates step keeps for its backward, parameters left
    out."""
    parameters = {p.untyped_storage().data_ptr() for p in objective.model.parameters()}
    seen = {}

    def pack(t):
        pointer = t.untyped_storage().data_ptr()
        if pointer not in parameters:
            seen[pointer] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        train_gates(objective, units, steps=1)
    return sum(seen.values())


def test_recomputed_blocks_keep_a_fraction_of_the_activations():
    T = 1024
    model = long_decoder(T)
    batches = [answer_batch(T)]
    units = make_units(L, H, KV)
    kept = saved_bytes(Objective(model, batches, "lm", scored_only=True, recompute=False), units)
    recomputed = saved_bytes(Objective(model, batches, "lm", scored_only=True, recompute=True), units)
    assert recomputed < kept / 4, (recomputed, kept)


def loss_and_gradients(model, batch, gates, recompute, probabilities):
    """The mean LM loss of `batch` and its gradient with respect to each layer's gate: through Objective (the fast
    path, recomputed or not), or through the probabilities path (attentions requested: the mix as matrices)."""
    gates = {layer: g.detach().clone().requires_grad_(True) for layer, g in gates.items()}
    objective = Objective(model, [batch], "lm", recompute=recompute)
    if probabilities:
        with gated(model, gates):
            out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_attentions=True)
            loss = task_losses("lm", out.logits, batch["labels"]).mean()
            loss.backward()
    else:
        with objective.differentiated(gates):
            loss = objective.losses(0, objective.logits(batch)).mean()
            loss.backward()
    return loss.detach(), {layer: g.grad for layer, g in gates.items()}


@pytest.mark.parametrize("fft_from", [1, 1 << 30])  # the constant share by FFT, or materialised
@pytest.mark.parametrize("name", ["llama", "gemma3_text", "gpt2"])
def test_recomputed_steps_equal_the_probabilities_path_in_float64(name, fft_from, monkeypatch):
    monkeypatch.setattr(structured_module, "FFT_MIN_LENGTH", fft_from)
    g = torch.Generator().manual_seed(4)
    structured = (torch.rand(L, H, 2, generator=g, dtype=torch.float64),
                  torch.rand(L, H, 9, generator=g, dtype=torch.float64))
    model = patch_model(copy.deepcopy(tiny_decoder(name)).double(), structured=structured, mix_all_heads=True)
    ids, mask = right_padded_batch(lengths=(12, 7, 3))
    batch = {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}
    gates = {layer: torch.rand(3, H, generator=g, dtype=torch.float64) for layer in range(L)}  # one row per example
    reference = loss_and_gradients(model, batch, gates, recompute=False, probabilities=True)
    for recompute in (False, True):
        loss, grads = loss_and_gradients(model, batch, gates, recompute, probabilities=False)
        assert_close(loss, reference[0], rtol=1e-12, atol=1e-12)
        for layer in range(L):
            assert_close(grads[layer], reference[1][layer], rtol=1e-9, atol=1e-11)
