"""torch.compile(fullgraph=True) on a patched model of every family: no graph break, equal to eager.

Every family is traced with the `aot_eager` backend (dynamo and AOTAutograd trace exactly what inductor would get, and
fullgraph=True turns any graph break into an error) for the fast path, the probabilities path and a training step;
one family also through inductor, which generates and runs C++ kernels (the slow part: ~20 s here).
The inputs are the hard case: mixed layers, constants with zero rows, a padded batch.
"""

import copy

import pytest
import torch
from torch.testing import assert_close

import papa
from tiny_decoders import DECODER_NAMES, tiny_family_model
from tiny_decoders import family_batch as padded_batch
from tiny_encoders import FAMILY_NAMES, H, L, T

MIXED = [[layer, head] for layer in range(L) for head in range(H) if (layer + head) % 2 == 0]
CASES = [(name, impl) for name in FAMILY_NAMES for impl in ("eager", "sdpa")
         if impl == "eager" or not name.startswith("deberta")]
CASES += [(name, "eager") for name in DECODER_NAMES]  # both paths; sdpa changes only the mask's dtype (~7 s a case)


def patched(name, impl, head="sequence", **kwargs):
    constants = torch.rand(L, H, T, T, generator=torch.Generator().manual_seed(1))
    constants[:, :, -4:] = 0
    options = {"mix_all_heads": True} if kwargs.pop("mix", False) else {"static_heads": MIXED}
    return papa.patch_model(tiny_family_model(name, impl, head=head), constants, **options, **kwargs)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name,impl", CASES)
def test_inference_compiles_without_graph_breaks(name, impl):
    ids, mask = padded_batch(name)
    model = patched(name, impl, head="base")
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask)
        got = compiled(input_ids=ids, attention_mask=mask)
    assert_close(got.last_hidden_state, want.last_hidden_state, atol=1e-5, rtol=1e-5)
    if impl == "eager":  # the probabilities path (HF returns attentions under eager only)
        with torch.no_grad():
            want = model(input_ids=ids, attention_mask=mask, output_attentions=True)
            got = compiled(input_ids=ids, attention_mask=mask, output_attentions=True)
        assert_close(got.last_hidden_state, want.last_hidden_state, atol=1e-5, rtol=1e-5)
        for a, b in zip(got.attentions, want.attentions, strict=True):
            assert_close(a, b, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("mode", ["zero_output", "first_token", "mean_output"])
@pytest.mark.parametrize("name", ["bert", "llama"])
def test_the_ablation_controls_compile_without_graph_breaks(name, mode):
    """The controls' head modes (papa.method.ablations; the mean outputs' path they share) under fullgraph=True."""
    from papa.method.ablations import first_token_matrices, zero_outputs

    ids, mask = padded_batch(name)
    replacement = {"zero_output": {"mean_outputs": zero_outputs(L, H, T, 8)},
                   "mean_output": {"mean_outputs": torch.randn(L, H, T, 8, generator=torch.Generator().manual_seed(2))},
                   "first_token": {"constant_matrices": first_token_matrices(L, H, T)}}[mode]
    model = papa.patch_model(tiny_family_model(name, "eager", head="base"), static_heads=MIXED, **replacement)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask).last_hidden_state
        got = compiled(input_ids=ids, attention_mask=mask).last_hidden_state
    assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["mean_corrected", "best_of"])
@pytest.mark.parametrize("name", FAMILY_NAMES + DECODER_NAMES)
def test_mean_corrected_and_best_of_compile_without_graph_breaks(name, mode):
    """The output corrections' path (norm(C·P)·V + c, papa.families.constant_math.add_corrections), alone and as
    best_of composes it (heads with zero C beside corrected and plain constant heads; tests/test_precision.py's
    pair), in every family: fast and probabilities paths under fullgraph=True, equal to eager."""
    from test_precision import CORRECTIONS, best_of_pair, constants_with_zero_rows

    ids, mask = padded_batch(name)
    constants, corrections = (best_of_pair() if mode == "best_of" else (constants_with_zero_rows(), CORRECTIONS))
    model = papa.patch_model(tiny_family_model(name, "eager", head="base"), constants, static_heads=MIXED,
                             output_corrections=corrections)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    for probs in (False, True):
        with torch.no_grad():
            want = model(input_ids=ids, attention_mask=mask, output_attentions=probs).last_hidden_state
            got = compiled(input_ids=ids, attention_mask=mask, output_attentions=probs).last_hidden_state
        assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_a_mean_output_training_step_compiles_and_matches_eager():
    """The optimal_output control's step (the mean outputs train, --grad_for_classifier_and_static_only): the
    compiled step's gradients equal eager's."""
    ids, mask = padded_batch("llama", lengths=(T - 4, 7, 3))
    labels = torch.tensor([0, 1, 2])
    means = torch.randn(L, H, T, 8, generator=torch.Generator().manual_seed(2))
    model = papa.patch_model(tiny_family_model("llama", "eager"), mean_outputs=means, static_heads=MIXED)
    from papa.models.modeling import set_trainable

    set_trainable(model, "grad_for_classifier_and_static_only")
    model = without_dropout(model.train())
    eager = copy.deepcopy(model)
    ranking_step(eager, ids, mask, labels)
    ranking_step(torch.compile(model, fullgraph=True, backend="aot_eager"), ids, mask, labels)
    want = {n: p.grad for n, p in eager.named_parameters() if p.grad is not None}
    got = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert want.keys() == got.keys() and any(n.endswith("mean_outputs") for n in got)
    for n in want:
        assert_close(got[n], want[n], atol=1e-6, rtol=1e-4, msg=n)


def without_dropout(model):
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        if isinstance(getattr(module, "attention_dropout", None), float):  # ModernBERT keeps a float
            module.attention_dropout = 0.0
    return model


def ranking_step(model, ids, mask, labels):
    loss = torch.nn.functional.cross_entropy(model(input_ids=ids, attention_mask=mask).logits, labels)
    loss.backward()
    return loss


@pytest.mark.parametrize("name", ["bert", "llama"])  # ~30 s each here; inference covers every family
def test_a_ranking_step_compiles_and_matches_eager(name):
    """Mix mode in training: without dropout (the fast path) the compiled step's gradients equal eager's; with
    attention dropout (the probabilities path) it compiles too (its masks come from the compiled graph's RNG, so
    only finiteness is compared)."""
    ids, mask = padded_batch(name, lengths=(T - 4, 7, 3))
    labels = torch.tensor([0, 1, 2])
    model = without_dropout(patched(name, "eager", mix=True).train())
    eager = copy.deepcopy(model)
    ranking_step(eager, ids, mask, labels)
    ranking_step(torch.compile(model, fullgraph=True, backend="aot_eager"), ids, mask, labels)
    want = {n: p.grad for n, p in eager.named_parameters() if p.grad is not None}
    got = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert want.keys() == got.keys() and sum(n.endswith("lambdas") for n in got) == L
    for n in want:
        assert_close(got[n], want[n], atol=1e-6, rtol=1e-4, msg=n)

    dropout = patched(name, "eager", mix=True).train()
    loss = ranking_step(torch.compile(dropout, fullgraph=True, backend="aot_eager"), ids, mask, labels)
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in dropout.parameters() if p.grad is not None)


def test_inductor_compiles_a_patched_bert_equal_to_eager():
    ids, mask = padded_batch("bert")
    model = patched("bert", "sdpa")
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        assert_close(compiled(input_ids=ids, attention_mask=mask).logits,
                     model(input_ids=ids, attention_mask=mask).logits, atol=1e-5, rtol=1e-5)
