"""PAPA's constant heads as attention-pattern hooks, for TransformerLens users.

TransformerLens (4.x, `TransformerBridge`) exposes each layer's attention probabilities at
`blocks.{l}.attn.hook_pattern`, (B, H, T, T) in the stock head order, and uses what a hook returns in their
place. `pattern_hooks` turns PAPA's averages (`avgs.pt`) and a ranking (`sorted_heads.json`) into such hooks, so
that the first k ranked heads attend as papa's patched model makes them attend (papa/families/base.py, the
probabilities path). In a layer with replaced heads:

    A'[b, h] = norm((C_h ⊙ band) · P_b)    a replaced head h: C_h its average, band where the layer may attend
    A'[b, h] = norm(A[b, h] · P_b)          the layer's other heads: only padded query rows change (to 0)

P_b[i, j] = m_bi · m_bj is example b's padding pattern (m = the attention mask, 1 for real tokens) and norm(·) the
L1 row normalisation of papa.families.constant_math (row sums in float32, float64 for float64; an all-zero row,
a position no training example reached, stays 0). The band is a decoder's causal band (and its sliding window,
where the layer has one); an encoder has none. Layers without replaced heads get no hook, as papa leaves them
stock. As in papa, the constants are T × T for one T: a pattern of another length is refused.

No nnsight counterpart is built: nnsight intervenes on modules' inputs and outputs, and transformers computes
the probabilities inside its attention function, not as any module's output (reaching them through nnsight's
`.source` would depend on each family's code layout). Papa's patched model is an ordinary HF model, which nnsight
can wrap as it is (untested here: nnsight is not installed).
"""

from functools import partial

import torch

from .errors import PapaError
from .families import family_for
from .families.causal import causal_band
from .families.constant_math import constants_in, normalize_rows
from .method.attention import load_constant_matrices, static_heads_by_layer
from .method.ranking import first_k_heads, load_sorted_heads

HOOK = "blocks.{layer}.attn.hook_pattern"  # TransformerLens's name of a layer's attention probabilities


def layer_bands(model, num_layers, seq_len):
    """Per layer, the (T, T) bool band where a constant head may attend, or None (an encoder: everywhere).

    model: the HF model the hooks serve, or its TransformerBridge (its `original_model`), read for its family
    and sliding windows as `patch_model` reads them (the family adapter's `papa_band`); None: a causal decoder
    without windows (SmolLM2, Llama, GPT-2)."""
    if model is None:
        return [causal_band(seq_len)] * num_layers
    model = getattr(model, "original_model", model)
    family = family_for(model)
    # a TransformerBridge swaps each attention module for its own component, which holds the stock one
    modules = [getattr(m, "_original_component", m) for m in family.attention_modules(model.base_model)]
    if not all(isinstance(m, family.stock_class) for m in modules):
        raise PapaError(f"the {family.model_type} model's attention modules are not {family.stock_class.__name__}: "
                        "pass the stock HF model (or its TransformerBridge) as model")
    if len(modules) != num_layers:
        raise PapaError(f"the averages have {num_layers} layers but the model has {len(modules)}: they were "
                        "computed for another model")
    return [family.adapter.papa_band(module, seq_len) for module in modules]


def replace_pattern(pattern, hook=None, *, heads, constants, valid=None):
    """The hook: `pattern` (B, H, T, T) with `heads` (S of them) replaced by `constants` (S, T, T, band applied),
    then every row renormalised to the padding `valid` ((B, T), 1 for real tokens; None: no padding). `hook` is
    the HookPoint TransformerLens passes; unused."""
    B, H, T, _ = pattern.shape
    if constants.shape[-1] != T:
        S = constants.shape[-1]
        raise PapaError(f"the constant matrices are {S}x{S} but the attention pattern is {T}x{T}: pad inputs to "
                        f"{S} tokens, or recompute avgs.pt at length {T}")
    if valid is not None and tuple(valid.shape) != (B, T):
        raise PapaError(f"the attention mask given to pattern_hooks is {list(valid.shape)}, but the pattern is of "
                        f"{B} examples x {T} tokens: make the hooks with this batch's attention_mask")
    replaced = pattern.clone()
    replaced[:, heads] = constants_in(constants.to(pattern.device), pattern.dtype)  # (S, T, T) over the batch
    return normalize_rows(replaced, None if valid is None else valid.to(pattern.device, pattern.dtype))


def pattern_hooks(static_heads_dir, sorting_heads_dir, k, model=None, attention_mask=None, hook_name=HOOK):
    """[(hook name, hook function)] that make the first k heads of a ranking constant, for
    `bridge.run_with_hooks(tokens, fwd_hooks=...)` or `with bridge.hooks(fwd_hooks=...)`.

    static_heads_dir: `avgs.pt`, its folder, or an [L, H, T, T] tensor. sorting_heads_dir: `sorted_heads.json`,
    its folder, or its rows [[layer, head], ...]. model: the HF model (or the bridge) for its bands
    (`layer_bands`). attention_mask: (B, T), 1 for real tokens, the batch the hooks will see; None: no padding
    (make new hooks for each padded batch). hook_name: the hook point, `{layer}` in it."""
    constants = load_constant_matrices(static_heads_dir)
    num_layers, num_heads, seq_len = constants.shape[0], constants.shape[1], constants.shape[-1]
    if isinstance(sorting_heads_dir, (list, tuple)):
        ranking = [list(row) for row in sorting_heads_dir]
    else:
        ranking = load_sorted_heads(sorting_heads_dir, num_layers, num_heads)
    by_layer = static_heads_by_layer(first_k_heads(ranking, k, num_layers, num_heads), num_layers, num_heads)
    bands = layer_bands(model, num_layers, seq_len)
    valid = None if attention_mask is None else torch.as_tensor(attention_mask)
    hooks = []
    for layer, heads in by_layer.items():  # sorted layers, each with its sorted heads
        matrices = constants[layer][heads]  # (S, T, T), float32
        if bands[layer] is not None:
            matrices = matrices * bands[layer].to(matrices.dtype)
        hooks.append((hook_name.format(layer=layer),
                      partial(replace_pattern, heads=heads, constants=matrices, valid=valid)))
    return hooks
