"""Helpers of the per-layer reference tests (tests/test_encoders.py, tests/test_decoders.py): running a model,
recording one attention layer, and the numpy definitions a layer's PAPA probabilities are checked against."""

import numpy as np
import torch

import papa
from numpy_attention import capture_layer, numpy_norm
from papa.families import attention_modules


def run(model, ids, mask, **kwargs):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, **kwargs)


def expected_probs(stock_probs, constants, valid, band, mode, static, lam):
    """One example's PAPA probabilities (H, T, T) of a layer, by definition from its stock ones: constant heads
    norm(C ⊙ band · P), dynamic heads norm(A · P) (padded query rows zeroed); mix mode σ(λ)·A + (1 − σ(λ))·norm(C)."""
    expected = np.zeros_like(stock_probs)
    for h in range(len(stock_probs)):
        const = numpy_norm(constants[h].numpy(), valid, band)
        if mode == "mix":
            weight = 1 / (1 + np.exp(-lam[h]))
            expected[h] = weight * stock_probs[h] + (1 - weight) * const
        elif h in static:
            expected[h] = const
        else:
            expected[h] = numpy_norm(stock_probs[h], valid)
    return expected


def patch_and_capture(model, constants, mode, layer_index, static, lam):
    """Patch `model` ("replace": the `static` heads; "mix": every head, layer `layer_index`'s λ = `lam`) and
    record that layer's forward (`capture_layer`)."""
    if mode == "mix":
        papa.patch_model(model, constants, mix_all_heads=True)
        with torch.no_grad():
            attention_modules(model)[layer_index].lambdas.copy_(torch.tensor(lam))
    else:
        papa.patch_model(model, constants, static_heads=static)
    return capture_layer(model, layer_index)


