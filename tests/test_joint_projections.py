"""The pruned query/key projections of a layer with replaced heads run as one GEMM (`joint_linear`).

Checked against each Linear called on its own (outputs and gradients), and in patched models: a mixed layer makes
one GEMM fewer than with the projections called apart, and computes the same; anything that is not a plain
nn.Linear, or is watched by a hook, runs its own forward.
"""

import copy

import pytest
import torch
from torch import nn
from torch.testing import assert_close
from torch.utils._python_dispatch import TorchDispatchMode

import papa
from papa.families import PapaAttention, attention_modules
from papa.families.pruning import joint_linear
from tiny_decoders import DECODER_NAMES, family_batch, tiny_family_model
from tiny_encoders import FAMILY_NAMES, H, random_constants

FUSED_QKV = {"modernbert", "deberta", "gpt2"}  # one projection computes q|k|v already
SEPARATE_QK = [n for n in FAMILY_NAMES + DECODER_NAMES if n not in FUSED_QKV]
MIXED = {0: [1, 3], 1: [0], 2: [2]}  # every layer mixes dynamic and constant heads


def linears(widths, bias=True, seed=0):
    torch.manual_seed(seed)
    return [nn.Linear(8, width, bias=bias) for width in widths]


@pytest.mark.parametrize("bias", [True, False])
def test_joint_linear_equals_each_projection_with_gradients(bias):
    layers = linears([6, 4, 2], bias=bias)
    x = torch.randn(3, 5, 8, requires_grad=True)
    joint = joint_linear(x, *layers)
    for out, layer in zip(joint, layers):  # x·Wᵀ + b, written out
        expected = x @ layer.weight.T + (layer.bias if bias else 0)
        assert_close(out, expected)
    upstream = [torch.randn_like(out) for out in joint]
    grads = torch.autograd.grad(joint, [x, *(l.weight for l in layers)], upstream)
    separate = [layer(x) for layer in layers]
    expected_grads = torch.autograd.grad(separate, [x, *(l.weight for l in layers)], upstream)
    for got, expected in zip(grads, expected_grads):
        assert_close(got, expected)


class Shifted(nn.Linear):
    """A Linear subclass whose forward is not F.linear's (as a LoRA or quantised layer's is not)."""

    def forward(self, x):
        return super().forward(x) + 1.0


def test_joint_linear_leaves_other_layers_their_own_forward():
    x = torch.randn(2, 8)
    plain, other = linears([4, 4])
    shifted = Shifted(8, 4)
    assert_close(joint_linear(x, plain, shifted)[1], shifted(x))
    mismatched = nn.Linear(8, 4, bias=False)
    assert_close(joint_linear(x, plain, mismatched)[1], x @ mismatched.weight.T)
    offloaded = nn.Linear(8, 4)
    offloaded.forward = lambda inputs: torch.zeros(2, 4)  # as accelerate's hooks replace an instance's forward
    assert joint_linear(x, plain, offloaded)[1].eq(0).all()
    calls = []
    other.register_forward_hook(lambda *args: calls.append(1))
    joint_linear(x, plain, other)
    assert calls == [1]
    handle = nn.modules.module.register_module_forward_hook(lambda *args: calls.append(2))
    try:
        joint_linear(x, plain, plain)
    finally:
        handle.remove()
    assert calls == [1, 2, 2]


class GemmCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (torch.ops.aten.addmm.default, torch.ops.aten.mm.default):
            self.count += 1
        return func(*args, **(kwargs or {}))


def separate_projections(self, x, *layers):
    return tuple(layer(x) for layer in layers)


@pytest.mark.parametrize("name", SEPARATE_QK)
def test_a_mixed_layer_runs_its_queries_and_keys_as_one_gemm(name, monkeypatch):
    model = papa.patch_model(tiny_family_model(name), random_constants(), static_heads=MIXED)
    ids, mask = family_batch(name)
    layer = attention_modules(model)[1]
    counts = []
    layer.register_forward_pre_hook(lambda *args: counts.append(GemmCounter().__enter__()))
    layer.register_forward_hook(lambda *args: counts[-1].__exit__(None, None, None))
    with torch.no_grad():
        joint = model(input_ids=ids, attention_mask=mask).logits
        monkeypatch.setattr(PapaAttention, "papa_projections", separate_projections)
        separate = model(input_ids=ids, attention_mask=mask).logits
    assert counts[0].count == counts[1].count - 1
    assert_close(joint, separate)


@pytest.mark.parametrize("name", ["bert", "llama"])
def test_an_all_dynamic_layer_calls_the_stock_projections(name):
    """Zero replaced heads run exactly the stock computation: each projection's own forward, hooks included."""
    model = papa.patch_model(tiny_family_model(name), random_constants(), static_heads={1: list(range(H))})
    calls = []
    projections = [m for m in attention_modules(model)[0].modules() if isinstance(m, nn.Linear)]
    for module in projections:
        module.register_forward_hook(lambda module, *args: calls.append(module))
    ids, mask = family_batch(name)
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
    # Q, K, V (and Llama's output projection), each its own call
    assert sorted(map(id, calls)) == sorted(map(id, projections))


def test_a_trained_mixed_layer_gets_the_gradients_of_separate_projections(monkeypatch):
    model = papa.patch_model(tiny_family_model("bert").train(), random_constants(), static_heads=MIXED)
    twin = copy.deepcopy(model)
    ids, mask = family_batch("bert")
    torch.manual_seed(5)
    model(input_ids=ids, attention_mask=mask).logits.square().sum().backward()
    monkeypatch.setattr(PapaAttention, "papa_projections", separate_projections)
    torch.manual_seed(5)
    twin(input_ids=ids, attention_mask=mask).logits.square().sum().backward()
    for (name, param), twin_param in zip(model.named_parameters(), twin.parameters()):
        if param.grad is not None or twin_param.grad is not None:
            assert_close(param.grad, twin_param.grad, msg=name)
