"""Gradients in float16 and bfloat16 (autocast around a float32 model, and a cast model), every family, every mode.

One full training step of a patched model in each precision against the same step in float32, beside the same step of
the stock model: every gradient finite (float16 with loss scaling, as the Trainer's GradScaler), and each gradient of
the replaced heads' parameters (λ, C, the mean outputs) and of the attention weights judged against the stock model's
own errors in that step (`stock_errors`; how, in `check_backward_error`). The inputs are the hard case of
tests/test_precision.py: constants with all-zero rows, a padded batch, layers mixing constant and dynamic heads.

- the ranking run (mix mode, attention dropout on: the probabilities path);
- full fine-tuning with replaced heads (attention dropout on: the dropout path, and the probabilities path);
- the same without attention dropout (the fast path under autograd), where some sums cancel more (the test's
  docstring says which, and what is bounded there).
"""

import copy

import pytest
from torch.testing import assert_close

from papa.families import attention_modules
from precision_measures import (UNIT_ROUNDOFF, constant_gradient, lambda_and_value_cancellation, lambda_gradient,
                                per_example_cancellation, relative_error, training_step_grads)
from test_precision import PRECISIONS, RATIO, patched, precision_for_stock
from tiny_decoders import DECODER_NAMES, family_batch
from tiny_decoders import tiny_family_model as family_model
from tiny_encoders import FAMILY_NAMES, L, T

ATTENTION_WEIGHTS = ("value.weight", "value_proj.weight", "in_proj.weight", "Wqkv.weight", "v_proj.weight",
                     "c_attn.weight")  # per family, every layer
SCALED_PARAMETERS = ("lambdas", "mean_outputs")  # judged whole, by a cancellation-scaled yardstick
LAYER_INPUTS = ("g_out", "v", "out")  # the stock yardsticks: heads' outputs' gradient, values, heads' outputs
SPLIT_GRADIENTS = {  # parameter: its exact gradient, its inputs (kind, the stock's kind)
    "constant_matrices": (constant_gradient, (("g_out", "g_out"), ("v", "v"))),
    "lambdas": (lambda_gradient, (("g_out", "g_out"), ("v", "v"), ("A", "out"))),  # the fast path's
}


def stock_errors(base, name, precisions, ids, mask, device="cpu", train=True):
    """The yardsticks, from the same step of the stock model: {precision: {"values": its worst relative error over
    its value projections' weight gradients, (kind, layer): its relative error in that layer's heads' outputs'
    gradient ("g_out"), value projection's output ("v") and heads' outputs ("out")}}."""
    high = {}
    want = training_step_grads(base, "fp32", ids, mask, device=device, train=train, captured=high)
    chosen = [n for n in want if n.endswith(ATTENTION_WEIGHTS)]
    assert len(chosen) >= L
    errors = {}
    for precision in precisions:
        low = {}
        stock_precision = precision if device != "cpu" else precision_for_stock(name, precision)
        got = training_step_grads(base, stock_precision, ids, mask, device=device, train=train, captured=low)
        errors[precision] = {"values": max(relative_error(got[n], want[n]) for n in chosen)}
        errors[precision] |= {key: layer_input_error(low, high, key, mask) for key in high if key[0] in LAYER_INPUTS}
    return errors


def layer_input_error(low, high, key, mask):
    """The relative error of a layer's tensor (B, T, ...) that `record_layer_tensors` kept, on real tokens: what a
    padded position holds is read by nothing (nor is its gradient, 0), and differs between precisions."""
    real = mask.bool()
    return relative_error(low[key][real], high[key][real])


def cancellation_scales(model, base, ids, mask, train):
    """{parameter: how much more its gradient's sum cancels than the stock value weights'} for the mean outputs (over
    the batch, against the stock model `base`'s measured the same way) and λ (against the same layer's value
    weights'; without dropout, the fast path's A and C rounded apart), measured in float32, eval mode."""
    scales = {}
    if any(n.endswith("mean_outputs") for n, _ in model.named_parameters()):
        stock_cancels = max(per_example_cancellation(base, ids, mask, ATTENTION_WEIGHTS).values())
        scales = {n: c / stock_cancels for n, c in per_example_cancellation(model, ids, mask, ("mean_outputs",)).items()}
    names = [n for n, _ in model.named_parameters() if n.endswith("lambdas")]  # layer by layer
    if names:
        key = "lambda" if train else "lambda, A and C rounded"
        measured = lambda_and_value_cancellation(copy.deepcopy(model), ids, mask)
        scales |= {n: c[key] / c["values"] for n, c in zip(names, measured)}
    return scales


def check_split_gradients(model, parameters, precision, got, low, want, high, stock, mask):
    """`parameters`' gradients (C's, and without dropout λ's) in `precision` (`got`, the step's tensors `low`)
    against float32's (`want`, `high`), each split in two and each part judged by what makes it:
    - its own rounding: against the exact (float64) gradient for the run's own inputs (`constant_gradient`,
      `lambda_gradient`), within RATIO x the unit roundoff times its terms' magnitudes over it (a backward-stable
      computation rounds each term a few times);
    - what its inputs carry in: their relative errors, the heads' outputs' gradient, the values and (λ's) the
      dynamic heads' outputs, within RATIO x the stock model's own in the same layer (`stock`; its heads' outputs
      for the dynamic heads').
    A gradient that cancels amplifies its inputs' errors, so their sum, the error against `want`, has no yardstick of
    its own (see test_backward_without_attention_dropout_is_finite_and_close_to_fp32). In float32 the exact gradient
    must equal autograd's."""
    layers = attention_modules(model)
    for parameter in parameters:
        exact_gradient, inputs = SPLIT_GRADIENTS[parameter]
        names = [n for n in want if n.endswith(parameter)]  # layer by layer
        assert len(names) in (0, len(layers))
        for i, (layer, n) in enumerate(zip(layers, names)):
            reference, _ = exact_gradient(layer, high, i, mask)
            assert_close(reference.float(), want[n], rtol=1e-4, atol=1e-6 * reference.abs().max().item())
            exact, magnitudes = exact_gradient(layer, low, i, mask)
            allowed = RATIO * UNIT_ROUNDOFF[precision[-4:]] * (magnitudes.norm() / exact.norm()).item()
            error = relative_error(got[n].double(), exact)
            assert error <= allowed, f"{precision}, {n}: own rounding {error:.2e} > {allowed:.2e}"
            for kind, stock_kind in inputs:
                error = layer_input_error(low, high, (kind, i), mask)
                allowed = RATIO * stock[(stock_kind, i)]
                assert error <= allowed, f"{precision}, layer {i}'s {kind}: relative error {error:.2e} > {allowed:.2e}"


def check_backward_error(name, modes, lengths, precisions=PRECISIONS, device="cpu", train=True):
    """One training step of a patched `name` model in each of `modes` ("mix", or "replace" / "mean_output" with
    mixed layers, each through the probabilities path and, in training, the dropout path, else the fast path) and
    each precision: every gradient finite (`training_step_grads` raises otherwise), and
    - the attention weights' within RATIO x the stock value weights' worst relative error;
    - λ's and the mean outputs' within that times how much more their sums cancel than the stock's
      (`cancellation_scales`);
    - C's (and without dropout λ's too) in two parts (`check_split_gradients`): its own rounding, and its inputs'
      errors against the stock model's (λ's split is the fast path's, the only one mix mode takes without dropout
      unless attentions are requested, which no test here does).
    See test_backward_without_attention_dropout_is_finite_and_close_to_fp32 for the measured sizes and why."""
    ids, mask = family_batch(name, lengths=lengths)
    base = family_model(name, "eager")
    stock = stock_errors(base, name, precisions, ids, mask, device, train)
    split = ["constant_matrices"] if train else ["constant_matrices", "lambdas"]
    for mode in modes:
        model = patched(base, mode)
        cancels = cancellation_scales(model, base, ids, mask, train)
        for attentions in ((False,) if mode == "mix" else (False, True)):
            high = {}
            want = training_step_grads(model, "fp32", ids, mask, attentions, device, train, captured=high)
            bounded = [n for n in want if n.endswith(SCALED_PARAMETERS + ATTENTION_WEIGHTS)]  # C's: split below
            for precision in precisions:
                low = {}
                got = training_step_grads(model, precision, ids, mask, attentions, device, train, captured=low)
                for n in bounded:
                    allowed = RATIO * stock[precision]["values"] * max(1.0, cancels.get(n, 1.0))
                    error = relative_error(got[n], want[n])
                    assert error <= allowed, (f"{precision}, {mode}, attentions={attentions}, {n}: relative error "
                                              f"{error:.2e} > {allowed:.2e}")
                check_split_gradients(model, split, precision, got, low, want, high, stock[precision], mask)


@pytest.mark.parametrize("name", FAMILY_NAMES + DECODER_NAMES)
def test_ranking_run_backward_is_finite_and_close_to_fp32(name):
    """Mix mode in training (the ranking run; attention dropout on, so the probabilities path), every precision: the
    PAPA parameters' gradients (λ, C in every layer) and the attention weights' (their layers' gradients pass through
    as much of the network as λ's do), judged as `check_backward_error` says. λ's sum cancels most in Gemma2's last
    layer: ~5x more than the value weights' gradient there, where its error is 4-6x the unscaled yardstick.

    As in a real ranking run, no example reaches the constants' zero rows (they are zero because no training
    example does).
    """
    check_backward_error(name, ["mix"], lengths=(T - 4, 7, 3))


@pytest.mark.parametrize("name", FAMILY_NAMES + DECODER_NAMES)
def test_training_backward_with_replaced_heads_is_finite_and_close_to_fp32(name):
    """Full fine-tuning with replaced heads in layers that mix both kinds (constant heads, and mean-output heads),
    every precision, through the dropout path (the probing runs' forward, here under autograd, as
    `--grad_for_classifier_and_static_only` and full fine-tuning run it) and the probabilities path (attentions
    requested). The full-length example reaches the constants' zero rows: their gradient is 0 in every precision."""
    check_backward_error(name, ["replace", "mean_output"], lengths=(T, 7, 3))


@pytest.mark.parametrize("name", FAMILY_NAMES + DECODER_NAMES)
def test_backward_without_attention_dropout_is_finite_and_close_to_fp32(name):
    """The gradients when no attention dropout is drawn (eval mode here; in training, every config whose attention
    dropout is 0, as the Llama family's and ModernBERT's are by default): the fast path under autograd in every
    mode, and the probabilities path for replaced heads. Every gradient finite; the attention weights' within the
    yardstick; the mean outputs' within it times how much more their sum over the batch cancels than the stock
    attention weights' gradients do (`per_example_cancellation`: position 0, which the classifier reads, sums the
    three examples' gradients for different labels, 9–11x more cancelling than the value weights' in BERT); λ's
    within it times how much more its sum Σ dL/dout · A − Σ dL/dout · C cancels than the same layer's value
    weights' (`lambda_and_value_cancellation`, "A and C rounded": 4–32x here, since A and C are rounded before
    their difference). That is a loose bound: in fp16 autocast the errors measured 0.05–0.48 of the scaled
    yardstick, so it allows about 6x more error than measured.

    C's gradient in two parts (`check_split_gradients`, as with dropout): its own rounding within RATIO x the unit
    roundoff times its terms' magnitudes (measured: at most 0.16 of that, with dropout or without), and its inputs,
    the heads' outputs' gradient and the values, within RATIO x the stock model's errors in the same layer (at most
    0.72 of that). Their sum is not bounded by a yardstick of its own: where C's gradient cancels it amplifies its
    inputs' errors (Gemma3's 4-token windows in bf16 autocast, layer 1: the exact gradient for that run's own inputs
    is 9% off float32's, from inputs 1.4% and 0.7% off, while its own rounding adds 0.2%). That amplification is the
    gradient's own condition, which float32 shares; lower precision only feeds it larger input errors, no larger
    than the stock model's. (Judged whole against the stock value weights' error scaled by its cancellation, it
    reached 3.3x on one machine and stayed under 3x on another.) λ's gradient gets the same split besides its scaled
    yardstick, the dynamic heads' outputs among its inputs (against the stock heads' outputs); its own rounding
    measured at most 0.05 of its bound, a worst case that adds up the rounding of all its terms (B·T·d per head),
    whose errors of both signs mostly cancel."""
    check_backward_error(name, ["mix"], lengths=(T - 4, 7, 3), train=False)
    check_backward_error(name, ["replace", "mean_output"], lengths=(T, 7, 3), train=False)
