"""What a PAPA layer computes once and reuses across calls: the padding's validity per forward, and the facts
of frozen constant matrices.

A mixed layer (dynamic and constant heads) runs more small operators than the stock one; at short T their fixed
cost weighs as much as the FLOPs its constant heads save (benchmarks/README.md, SmolLM2). Two kinds of work
repeat needlessly:

- the (B, T) validity of the padding, read off the 4-D mask the model hands every layer of a forward: computed by
  the first layer with replaced heads and kept on the mask tensor for the others (`shared_validity`);
- facts of the constant matrices of a frozen layer (not training, not under torch.compile): whether they are ≥ 0
  (every average of probabilities is, so norm(·)'s |C| is C), and 1 / their row sums, which are norm(C·P)'s own
  row sums without padding or, for a decoder's lower-triangular C, with right padding (`constant_facts`): a
  frozen model then reads its constants once per call, in the product, instead of twice.

Both are keyed so that a change invalidates them: the mask by its version counter, the constants by their storage
and version counter.
"""

import torch

from .block_triangle import stored_values
from .constant_math import inverse_row_sums


def shared_validity(mask, hidden_states, compute, family):
    """`compute()`'s (B, T) validity, kept on `mask` for the other layers of the forward (keyed by the family's
    validity function, dtype, (B, T) and the mask's version); computed afresh without a mask tensor or while
    torch.compile traces."""
    if not isinstance(mask, torch.Tensor) or torch.compiler.is_compiling():
        return compute()
    version = None if mask.is_inference() else mask._version  # inference tensors keep no version counter
    key = (family, hidden_states.dtype, tuple(hidden_states.shape[:2]), version)
    cached = getattr(mask, "_papa_validity", None)
    if cached is None or cached[0] != key:
        cached = (key, compute())
        mask._papa_validity = cached
    return cached[1]


def right_padded(valid):
    """Whether every row of a (B, T) validity is real tokens then padding (never real after padded); kept on the
    tensor, which `shared_validity` shares between the layers of a forward."""
    known = getattr(valid, "_papa_right_padded", None)
    if known is None:
        known = bool((valid[:, 1:] <= valid[:, :-1]).all())
        valid._papa_right_padded = known
    return known


def frozen(layer):
    """Whether facts about `layer`'s constant matrices may be cached: not while they train, and not while
    torch.compile traces (the checks read tensor values)."""
    constants = layer.constant_matrices
    return not (constants is None or torch.compiler.is_compiling()
                or (constants.requires_grad and torch.is_grad_enabled()))


def constant_facts(layer, constants, valid):
    """What `row_scale` may use of this call's `constants` (the layer's `_constants(dtype)`):
    dict(nonnegative=, inverse_rows=), or {} while the constants train (the abs's gradient at 0 is not the
    identity's).

    nonnegative: C ≥ 0, so |C| is C. inverse_rows: 1 / Σ_j |C_ij| (S, T, 1), given when Σ_j |C_ij| is this call's
    Σ_j |C_ij| m_j for every real query: without padding, or in a decoder (C zero above the diagonal) whose
    padding is on the right. Computed once per change of the parameter (storage, version counter) and dtype.
    """
    if not frozen(layer):
        return {}
    parameter = layer.constant_matrices
    stamp = (parameter.data_ptr(), parameter._version, constants.dtype)
    if getattr(layer, "_papa_facts_stamp", None) != stamp:
        values = stored_values(constants)
        nonnegative = bool(values.min() >= 0) if values.numel() else True
        layer._papa_facts = (nonnegative, inverse_row_sums(constants, nonnegative))
        layer._papa_facts_stamp = stamp
    nonnegative, inverse_rows = layer._papa_facts
    whole_rows = valid is None or (layer.papa_lower_triangular and right_padded(valid))
    return {"nonnegative": nonnegative, "inverse_rows": inverse_rows if whole_rows else None}
