"""Generation with a key/value cache in a PAPA-patched decoder (the Llama-family and GPT-2 adapters).

`model.generate(..., use_cache=True)` (or any forward given `past_key_values`) hands each layer the new tokens'
hidden states and a transformers cache. A patched layer keeps in it only what its heads still read:

- dynamic heads attend as the stock model does: the cache's own layer (transformers' DynamicLayer, or its
  sliding-window layer) holds the keys and values of the K/V heads they read, and no others;
- a constant head's output at query position i is Σ_j norm(C·P)[i, j] V_j: no key, only the values its row reaches:
  - full constants (T₀ × T₀, averaged at T₀): every earlier position, and only rows i < T₀ exist (later ones are
    refused);
  - structured constants (papa/families/structured.py: a sink over the first s positions, a profile over distances
    d < D): the sink's positions and the last D − 1, at any i. `sink_window` (D = w) keeps s + w − 1 positions
    between steps (s + w while a step attends); toeplitz (D = T₀) the last T₀ − 1 and the sink;
  - in a sliding-window layer, never more than the last window − 1;
- so a K/V head that only constant heads read keeps no key at all, and its values live in the layer's side state
  (`ConstantState`, in `cache.papa_constant_states`), trimmed to those positions after every step.

Beside the retained positions the side state keeps their padding validity m ((B, n) bool, once a mask has come): a
new token's is the diagonal of the 4-D mask the layer receives (None: no padding). Without padding, a structured
layer's normalised rows depend only on the retained positions relative to the query, and are reused across steps. Positions count the cached sequence, left padding
included, as the full forward indexes its constants. Each step's output equals the patched model's full (no-cache)
forward at those positions, up to the order of float sums (tests/test_generation.py).

Beam search works: the cache's `reorder_cache`, which generate calls after every step, reorders the side state with
the transformers layers. Refused with one clear error: editing the cache otherwise (`crop`, `batch_select_indices`,
`batch_repeat_interleave`: assisted decoding, contrastive search), mean-output heads, mix mode, attention
probabilities, training with attention dropout.
"""

import functools
from dataclasses import dataclass

import torch

from ..errors import PapaError
from .block_triangle import BlockTriangle
from .constant_math import reduction_dtype, row_divisor
from .structured import structured_output, uses_fft


@dataclass
class ConstantState:
    """What a layer's constant heads keep between steps, beside the transformers cache layer."""

    valid: torch.Tensor | None  # (B, n) bool: the retained positions' padding validity (None: all real)
    values: torch.Tensor  # (B, U, n, d): values of the K/V heads that only constant heads read
    seen: int  # positions cached so far
    ranges: tuple = ()  # the retained positions, ascending, as ((lo, hi), ...)


def constant_states(cache):
    """{layer index: ConstantState} kept on the cache object (made on first use)."""
    states = getattr(cache, "papa_constant_states", None)
    if states is None:
        states = {}
        cache.papa_constant_states = states
        _follow_the_batch(cache)
    return states


def _follow_the_batch(cache):
    """Make the cache's own batch edits reach the side state: `reorder_cache(beam_idx)` (beam search, after every
    step) reorders it with the transformers layers, `reset` empties it; the edits that cut positions or examples
    (assisted decoding, contrastive search) are refused."""
    reorder, reset = cache.reorder_cache, cache.reset

    def reorder_cache(beam_idx):
        reorder(beam_idx)
        for state in cache.papa_constant_states.values():
            index = beam_idx.to(state.values.device)
            state.values = state.values.index_select(0, index)  # (B, U, n, d)
            if state.valid is not None:
                state.valid = state.valid.index_select(0, index)  # (B, n)

    def reset_all():
        reset()
        cache.papa_constant_states.clear()

    def refuse(name, *args, **kwargs):
        raise PapaError(f"a patched decoder's cache cannot be edited with {name} (assisted decoding, contrastive "
                        "search): its constant heads keep values of their own. Greedy, sampling and beam search work")

    cache.reorder_cache, cache.reset = reorder_cache, reset_all
    for name in ("crop", "batch_repeat_interleave", "batch_select_indices"):
        setattr(cache, name, functools.partial(refuse, name))


def _plan(layer, device):
    """(dynamic units, each dynamic head's index into them, constant-only units, each constant head's index into
    dynamic + constant-only units) as long tensors. A unit is an entry of `papa_unit_values`: a K/V head."""
    plans = layer.__dict__.setdefault("_papa_generation_plan", {})
    if device not in plans:
        units = layer.papa_value_units.tolist()  # (H,) in the layout [dynamic | replaced]
        D = len(layer.dynamic_heads)
        dynamic = sorted(set(units[:D]))  # the K rows the pruned k_proj keeps are these, in this order
        constant = sorted(set(units[D:]) - set(dynamic))
        stored = dynamic + constant
        plan = (dynamic, [dynamic.index(u) for u in units[:D]], constant, [stored.index(u) for u in units[D:]])
        plan = tuple(torch.tensor(p, dtype=torch.long, device=device) for p in plan)
        plans[device] = plan + (_grouped(plan[1]),)
    return plans[device]


def _grouped(dynamic_index):
    """Whether the dynamic heads read their K/V heads as grouped attention does (each kept K/V head by the same
    number of consecutive query heads): then the kernel reads the cached K/V as they are, with no per-step copy."""
    kept = int(dynamic_index.max()) + 1 if len(dynamic_index) else 0
    if kept == 0 or len(dynamic_index) % kept:
        return False
    size = len(dynamic_index) // kept
    return bool((dynamic_index == torch.arange(len(dynamic_index), device=dynamic_index.device) // size).all())


def _refuse(layer, call, cache):
    if not hasattr(cache, "update") or not hasattr(cache, "get_seq_length"):
        raise PapaError(f"past_key_values must be a transformers Cache (e.g. DynamicCache), not {type(cache).__name__}")
    if layer.mix_all_heads:
        raise PapaError("a model in mix mode (every head mixing attention and its constant: the ranking run) has no "
                        "key/value cache: pass use_cache=False")
    if layer.static_heads and layer.head_mode == "mean_output":
        raise PapaError("generation with a key/value cache covers constant heads (full or structured), not "
                        "mean-output heads: pass use_cache=False")
    if call.want_probs or layer.papa_return_probs:
        raise PapaError("a patched decoder returns no attention probabilities while generating with a key/value "
                        "cache: pass output_attentions=False, or use_cache=False")
    if layer.training and layer.papa_dropout_p > 0:
        raise PapaError("generation with a key/value cache runs without attention dropout: call model.eval() first")


@functools.cache
def _counted_layer():
    """transformers' DynamicLayer, counting its positions itself: its own count reads keys.numel(), 0 when the layer
    keeps no K/V head (every head constant), and the model would then place the next tokens at position 0."""
    from transformers.cache_utils import DynamicLayer

    class CountedLayer(DynamicLayer):
        papa_seen = 0

        def get_seq_length(self):
            return self.papa_seen if self.is_initialized else 0

        def reset(self):
            super().reset()
            self.papa_seen = 0

    return DynamicLayer, CountedLayer


def _refuse_layer(cache_layer):
    from transformers.cache_utils import DynamicSlidingWindowLayer

    plain, counted = _counted_layer()
    if type(cache_layer) not in (plain, counted, DynamicSlidingWindowLayer):
        raise PapaError(f"a patched decoder generates with transformers' DynamicCache (DynamicLayer and its sliding-"
                        f"window layer), not with a {type(cache_layer).__name__}: pass no past_key_values, or a "
                        "DynamicCache")


def _count_positions(cache_layer, seen):
    plain, counted = _counted_layer()
    if type(cache_layer) is plain:
        cache_layer.__class__ = counted
    if isinstance(cache_layer, counted):
        cache_layer.papa_seen = seen


def _new_validity(mask, B, q, kv):
    """(B, q) bool validity of the q new tokens (the last q keys): the diagonal of the (B, 1, q, kv) mask."""
    if mask is None:
        return None
    if mask.shape[-1] != kv or mask.shape[-2] != q:
        raise PapaError(f"the attention mask covers {tuple(mask.shape[-2:])} query x key positions, the cache "
                        f"{q} x {kv}: a patched decoder generates with transformers' DynamicCache only")
    rows = torch.arange(q, device=mask.device)
    diagonal = mask[:, 0, rows, kv - q + rows]  # (B or 1, q)
    valid = diagonal if diagonal.dtype == torch.bool else diagonal == 0
    return valid.expand(B, q)


def cached_context(layer, call, cache):
    """(B, q, H, d): the layer's heads' output, in its layout, for the q new tokens of `call`; the cache updated."""
    _refuse(layer, call, cache)
    B, q, _ = call.hidden_states.shape
    device = call.hidden_states.device
    dynamic_units, dynamic_index, constant_units, constant_index, grouped = _plan(layer, device)
    states = constant_states(cache)
    state = states.get(layer.layer_idx)
    if state is None and cache.get_seq_length(layer.layer_idx) > 0:
        raise PapaError("this key/value cache was filled by another model: a patched decoder keeps its own values "
                        "for constant heads; start generation from an empty cache")
    start = 0 if state is None else state.seen
    if layer.layer_idx < len(getattr(cache, "layers", ())):
        _refuse_layer(cache.layers[layer.layer_idx])
    units = layer.papa_unit_values(call).transpose(1, 2)  # (B, U, q, d)
    query, keys = layer.papa_rotated(call)  # (B, D, q, d), (B, G', q, d)
    keys, values = cache.update(keys, units.index_select(1, dynamic_units), layer.layer_idx)  # (B, G', kv, d)
    _count_positions(cache.layers[layer.layer_idx], start + q)
    kv = values.shape[-2]
    new_valid = _new_validity(call.attention_mask, B, q, kv)  # (B, q) or None
    if state is None:
        state = ConstantState(None, units.new_zeros(B, len(constant_units), 0, units.shape[-1]), 0)
    parts = []
    if layer.dynamic_heads:
        mask = call.attention_mask
        if mask is None and q > 1 and q != kv:  # the causal band of the last q keys (the fused kernel's is_causal is
            mask = torch.ones(q, kv, dtype=torch.bool, device=device).tril(kv - q)  # top-left: right when q = kv)
        if not grouped:  # each dynamic head's K/V, gathered (B, D, kv, d)
            keys, values = keys.index_select(1, dynamic_index), values.index_select(1, dynamic_index)
        dynamic = layer.papa_cached_dynamic(call, query, keys, values, mask)  # (B, q, D, d)
        if layer.static_heads and new_valid is not None:  # as the full forward: padded query rows are 0
            dynamic = dynamic * new_valid[:, :, None, None].to(dynamic.dtype)
        parts.append(dynamic)
    if layer.static_heads:
        state, constant = _constant_context(layer, state, start, units, values, constant_units, constant_index,
                                            new_valid)
        parts.append(constant)
    else:
        state.seen = start + q
    states[layer.layer_idx] = state
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)


def _constant_context(layer, state, start, units, values, constant_units, constant_index, new_valid):
    """(the state after this step, (B, q, S, d) the constant heads' output for positions [start, start + q)).
    values: (B, G', kv, d) the cache layer's values of the dynamic units, positions [start + q − kv, start + q)."""
    B, _, q, d = units.shape
    total = start + q
    held = state.ranges + ((start, total),)  # the positions of `kept` and `valid`, ascending
    kept = torch.cat([state.values, units.index_select(1, constant_units)], dim=2)  # (B, U_c, n, d)
    valid = None
    if state.valid is not None or new_valid is not None:  # None: every position so far real (no mask)
        ones = torch.ones(B, q, dtype=torch.bool, device=units.device)
        before = state.valid if state.valid is not None else ones.new_ones(B, kept.shape[2] - q)
        valid = torch.cat([before, new_valid if new_valid is not None else ones], dim=1)  # (B, n)
    dtype = reduction_dtype(units.dtype)
    U_d = values.shape[1]
    own = constant_index - U_d  # each constant head's index into `kept`, when it reads no dynamic unit
    if start == 0 and layer.head_mode == "structured" and uses_fft(layer, q):
        # a long prompt: the no-cache forward's FFT product, no (S, q, q) weights (each head reads its own unit)
        stored = torch.cat([_plan(layer, units.device)[0], constant_units])  # dynamic units, then constant-only
        per_head = units.index_select(1, stored.index_select(0, constant_index))  # (B, S, q, d)
        out = structured_output(layer.structured_sink, layer.structured_profile, per_head.transpose(1, 2), new_valid,
                                layer.papa_window).transpose(1, 2).to(dtype)  # (B, S, q, d)
    elif U_d == 0 or bool((own >= 0).all()):
        probs = _probabilities(layer, held, start, q, valid, dtype)  # (S, q, n) or (B, S, q, n)
        heads_per_unit = len(own) // max(kept.shape[1], 1)
        if kept.shape[1] and len(own) == heads_per_unit * kept.shape[1] and bool(
                (own == torch.arange(len(own), device=own.device) // heads_per_unit).all()):
            # each K/V head read by consecutive constant heads: (B, U_c, size, q, n) @ (B, U_c, 1, n, d), no gather
            grouped = probs.reshape(-1, kept.shape[1], heads_per_unit, q, probs.shape[-1])
            out = torch.matmul(grouped, kept.to(dtype)[:, :, None]).reshape(B, -1, q, d)  # (B, S, q, d)
        else:
            out = torch.matmul(probs, kept.index_select(1, own).to(dtype))
    else:  # some constant heads read a K/V head the dynamic heads also read: its values from the cache layer
        probs = _probabilities(layer, held, start, q, valid, dtype)
        positions = torch.cat([torch.arange(lo, hi, device=units.device) for lo, hi in held])  # (n,)
        offset = total - values.shape[-2]  # the cache layer holds positions [offset, total)
        reach = torch.cat([values.index_select(2, positions - offset), kept], dim=1)  # (B, U, n, d)
        out = torch.matmul(probs, reach.index_select(1, constant_index).to(dtype))  # (B, S, q, d)
    out = out.transpose(1, 2)  # (B, q, S, d)
    if new_valid is not None:  # padded query rows are 0, as norm(C·P) makes them
        out = out * new_valid[:, :, None, None].to(dtype)
    if layer.output_corrections is not None:  # mean_corrected: + c at each real position
        bias = layer.output_corrections[:, start:total].transpose(0, 1).to(dtype)[None]  # (1, q, S, d)
        out = out + (bias if new_valid is None else bias * new_valid[:, :, None, None].to(dtype))
    ranges = tuple(needed_ranges(layer, total))
    keep = _slices(held, ranges)  # where the positions still needed lie, by slices
    state = ConstantState(None if valid is None else _take(valid, keep, 1), _take(kept, keep, 2), total, ranges)
    return state, out.to(units.dtype)


def _probabilities(layer, held, start, q, valid, dtype):
    """norm(C·P) rows for queries [start, start + q) over the positions of the ranges `held`: (S, q, n) without
    padding, else (B, S, q, n). Without padding a structured layer's rows depend only on where the held positions
    lie relative to the queries (and on the sink's absolute positions), so they are kept per layer and reused: a
    decoding step past s + w reads the same rows every time."""
    key = None
    if valid is None and layer.head_mode == "structured":
        s, window = layer.structured_sink.shape[1], layer.papa_window
        relative = window is None and start >= s  # then every sink key is before the queries and in the band
        key = (q, dtype, layer.structured_sink.device, layer.structured_sink._version, layer.structured_profile._version,
               tuple((lo, hi) if hi <= s and relative else (lo - start, hi - start) if lo >= s else (lo, hi, start)
                     for lo, hi in held))
        memo = layer.__dict__.setdefault("_papa_rows", {})
        if key in memo:
            return memo[key]
    device = layer.papa_value_units.device
    positions = torch.cat([torch.arange(lo, hi, device=device) for lo, hi in held])  # (n,)
    weights = constant_weights(layer, torch.arange(start, start + q, device=device), positions).to(dtype)  # (S, q, n)
    if valid is not None:
        weights = weights[None] * valid[:, None, None, :].to(dtype)  # (B, S, q, n): C·P on the real keys
    probs = weights / row_divisor(weights.abs().sum(-1, keepdim=True))  # norm(C·P): an all-zero row stays 0
    if key is not None:
        if len(memo) > 64:
            memo.clear()
        memo[key] = probs
    return probs


def constant_weights(layer, queries, keys):
    """(S, q, n): C[h, i, j] of the layer's constant heads (its layout order) at query positions `queries` (q,) and
    key positions `keys` (n,), zero above the diagonal and outside the layer's sliding window."""
    distance = queries[:, None] - keys[None, :]  # (q, n): i − j
    if layer.head_mode == "structured":
        sink, profile = layer.structured_sink, layer.structured_profile  # (S, s), (S, D)
        s, D = sink.shape[1], profile.shape[1]
        in_profile = (distance >= 0) & (distance < D) & (keys[None, :] >= s)
        weights = torch.where(in_profile, profile[:, distance.clamp(0, D - 1)], profile.new_zeros(()))
        in_sink = (distance >= 0) & (keys[None, :] < s)
        weights = torch.where(in_sink, sink[:, keys.clamp(max=s - 1)][:, None, :], weights)
    else:
        rows = constant_rows(layer, int(queries[0]), int(queries[-1]) + 1)  # (S, q, i_max + 1)
        weights = rows.index_select(2, keys) * (distance >= 0).to(rows.dtype)
    window = layer.papa_window
    if window is not None:
        weights = weights * (distance < window).to(weights.dtype)
    return weights


def constant_rows(layer, first, last):
    """(S, last − first, last): rows [first, last) of a layer's full constants, columns [0, last) (a causal row has
    nothing beyond its own position), read from the (S, T, T) matrices or their block-row strips."""
    T0 = layer.papa_seq_len
    if last > T0:
        raise PapaError(f"this model's constant matrices are {T0}x{T0}: they hold no row for position {last - 1}. "
                        f"Generate at most {T0} positions in all (prompt and new tokens), or use structured constants "
                        "(--constants toeplitz or sink_window), which apply at any length")
    constants = layer.constant_matrices
    if layer.papa_block is None:
        return constants[:, first:last, :last]
    parts = []
    for start, end, strip in BlockTriangle(constants, T0, layer.papa_block).strips():  # (S, rows, cols)
        lo, hi = max(start, first), min(end, last)
        if lo < hi:
            part = strip[:, lo - start:hi - start, :last]
            parts.append(torch.nn.functional.pad(part, (0, last - part.shape[-1])))
    return torch.cat(parts, dim=1)


def needed_ranges(layer, seen):
    """[(lo, hi), ...]: the positions a constant head may still read from a query at a position ≥ `seen`, ascending:
    a structured constant's sink and its last D − 1 positions, every position for full constants, within the
    layer's sliding window."""
    if layer.head_mode == "structured":
        s, D = layer.structured_sink.shape[1], layer.structured_profile.shape[1]
        ranges = [(0, min(s, seen)), (max(s, seen - D + 1), seen)]
    else:
        ranges = [(0, seen)]
    window = layer.papa_window
    if window is not None:
        ranges = [(max(lo, seen - window + 1), hi) for lo, hi in ranges]
    return [(lo, hi) for lo, hi in ranges if lo < hi]


def _slices(held, wanted):
    """[(a, b), ...]: where the positions of the ranges `wanted` lie in the array of the positions of `held` (both
    ascending ranges; every wanted position held)."""
    out, offset = [], 0
    for lo, hi in held:
        for a, b in wanted:
            a, b = max(a, lo), min(b, hi)
            if a < b:
                out.append((offset + a - lo, offset + b - lo))
        offset += hi - lo
    return out


def _take(x, slices, dim):
    """x's entries along `dim` at the slices, concatenated (a view when there is one slice)."""
    parts = [x.narrow(dim, a, b - a) for a, b in slices]
    if not parts:
        return x.narrow(dim, 0, 0)
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim)


def _nbytes(tensor):
    return tensor.numel() * tensor.element_size() if isinstance(tensor, torch.Tensor) else 0


def cache_bytes(cache):
    """Per layer, the bytes a generation cache holds: {"keys", "values"} in the transformers cache layer (the
    dynamic heads' K/V heads), "constant_values" (the side state's values of K/V heads only constant heads read) and
    "validity" (the retained positions' padding validity, kept once a mask has come). A stock model's cache has only the first two."""
    states = getattr(cache, "papa_constant_states", None) or {}
    report = []
    for index, layer in enumerate(cache.layers):
        state = states.get(index)
        report.append({"keys": _nbytes(getattr(layer, "keys", None)), "values": _nbytes(getattr(layer, "values", None)),
                       "constant_values": _nbytes(state.values) if state else 0,
                       "validity": _nbytes(state.valid) if state else 0})
    return report
