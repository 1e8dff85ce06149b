"""The FLOP model: what making heads constant removes from a model's work, hence the best speed-up to expect.

Pure arithmetic on the config (tested against hand calculations); it ignores activations, norms,
softmax, gathers and masking, so measured speed-ups can exceed the bound (DeBERTa's eager
attention spends much of its time in exactly those).
"""

FLOP_NOTE = (
    "FLOPs per layer per token: Q,K,V,O projections 4·2·h² (grouped K/V, Llama: K and V 2·h·G·d each, G K/V "
    "heads of width d), FFN 2·2·h·ffn (GLU, ModernBERT and Llama: 2·3·h·ffn), QKᵀ 2·T·h, AV 2·T·h (a causal "
    "decoder counted as the full T × T its masked kernel computes); DeBERTa also c2p and p2c scores 2·(2s)·h each "
    "and, once per layer and batch, their position projections 2·(2s)·h² each (s = the relative span), spread "
    "over the batch's B·T tokens (embeddings, pooler, LM head, softmax, layer norms, biases and activations "
    "ignored). A constant head removes its Q projection (2·h·d), its QKᵀ (2·T·d) and its share of the position "
    "terms, and its K projection (2·h·d) with it, or with grouped K/V a group's K projection once every query "
    "head of the group is constant; bound speedup = 1/(1 − removed share)."
)


def flop_counts(hidden_size, intermediate_size, num_layers, num_heads, seq_len, num_constant_heads,
                position_terms=0, relative_span=0, batch_tokens=1, glu=False, num_key_value_heads=None,
                constant_key_groups=None):
    """FLOPs per token of the encoder (or decoder) layers, and what making `num_constant_heads` heads constant removes.

    position_terms: DeBERTa's c2p/p2c terms (0, 1 or 2), over 2·relative_span relative positions;
    their projections cost once per layer and batch, so they are divided by `batch_tokens` (B·T).
    num_key_value_heads: G < num_heads for grouped K/V; constant_key_groups: how many K/V groups (over all
    layers) have every query head constant, so their K rows are pruned (default: one per constant head, which
    is exact without grouping). Returns dict(total, removed, removed_share, bound_speedup); see FLOP_NOTE.
    """
    h, ffn, T = hidden_size, intermediate_size, seq_len
    d = h // num_heads
    G = num_heads if num_key_value_heads is None else num_key_value_heads
    groups = num_constant_heads if constant_key_groups is None else constant_key_groups
    positions = 2 * relative_span
    per_layer = (2 * 2 * h * h + 2 * 2 * h * G * d + (3 if glu else 2) * 2 * h * ffn + 2 * T * h + 2 * T * h
                 + position_terms * (2 * positions * h + 2 * positions * h * h / batch_tokens))
    total = num_layers * per_layer
    per_head = 2 * h * d + 2 * T * d + position_terms * (2 * positions * d + 2 * positions * h * d / batch_tokens)
    removed = num_constant_heads * per_head + groups * 2 * h * d
    share = removed / total
    return {"total": total, "removed": removed, "removed_share": share, "bound_speedup": 1.0 / (1.0 - share)}


def constant_key_groups(static_heads, num_heads, num_key_value_heads):
    """How many K/V groups of {layer: [constant heads]} have every query head constant (query head q reads
    group q // (num_heads / num_key_value_heads), as transformers' repeat_kv lays them out)."""
    size = num_heads // num_key_value_heads
    return sum(set(range(g * size, (g + 1) * size)) <= set(heads)
               for heads in static_heads.values() for g in range(num_key_value_heads))


def relative_span(config, seq_len):
    """(position terms, relative span) of a DeBERTa config at length T; (0, 0) for other families."""
    if config.model_type not in ("deberta", "deberta-v2") or not getattr(config, "relative_attention", False):
        return 0, 0
    terms = sum(term in (config.pos_att_type or []) for term in ("c2p", "p2c"))
    max_relative = getattr(config, "max_relative_positions", -1)
    max_relative = config.max_position_embeddings if max_relative < 1 else max_relative
    if config.model_type == "deberta":  # v1 slices the embeddings to min(T, max_relative) on each side
        return terms, min(seq_len, max_relative)
    buckets = getattr(config, "position_buckets", -1)
    return terms, buckets if buckets > 0 else max_relative  # v2 always uses the whole table


def flop_bound(config, seq_len, num_constant_heads, batch_size=1, static_heads=None):
    """`flop_counts` for an HF config of any supported family; `static_heads` ({layer: [heads]}, the constant
    ones) counts the K/V groups left without a dynamic head when the model groups K/V."""
    terms, span = relative_span(config, seq_len)
    H = config.num_attention_heads
    G = getattr(config, "num_key_value_heads", None) or H
    groups = None if G == H or static_heads is None else constant_key_groups(static_heads, H, G)
    if G != H and static_heads is None and num_constant_heads:
        raise ValueError("with grouped K/V the FLOP bound needs the constant heads themselves (static_heads)")
    return flop_counts(config.hidden_size, config.intermediate_size, config.num_hidden_layers,
                       H, seq_len, num_constant_heads, position_terms=terms,
                       relative_span=span, batch_tokens=batch_size * seq_len,
                       glu=config.model_type in ("modernbert", "llama"), num_key_value_heads=G,
                       constant_key_groups=groups)


def percent_of_bound(ratio, bound):
    """(ratio − 1) / (bound − 1) in percent; None when the bound is 1 (nothing removed)."""
    if bound <= 1.0 + 1e-12:
        return None
    return 100.0 * (ratio - 1.0) / (bound - 1.0)


def time_weighted_bound(removed_share, modelled_time_share):
    """The FLOP bound with the removed FLOPs weighted by the time the stock forward spends on modelled
    work: 1/(1 − removed share · modelled time share). The time outside matrix products and attention
    kernels (activations, norms, copies) stays, so this is the speed-up that removing exactly those
    FLOPs, at the stock's rate, would give."""
    return 1.0 / (1.0 - removed_share * modelled_time_share)
