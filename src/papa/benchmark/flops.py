"""The FLOP model: what making heads constant removes from an encoder's work, hence the best speed-up to expect.

Pure arithmetic on the config (tested against a hand calculation); it ignores activations and
norms, so measured speed-ups can exceed the bound.
"""

FLOP_NOTE = (
    "FLOPs per layer per token: Q,K,V,O projections 4·2·h², FFN 2·2·h·ffn, QKᵀ 2·T·h, AV 2·T·h "
    "(embeddings, pooler, softmax, layer norms, biases and activations ignored). A constant head "
    "removes its Q and K projections (2·2·h·d) and its QKᵀ (2·T·d); bound speedup = 1/(1 − removed share)."
)


def flop_counts(hidden_size, intermediate_size, num_layers, num_heads, seq_len, num_constant_heads):
    """FLOPs per token of the encoder layers, and what making `num_constant_heads` heads constant removes.

    Returns dict(total, removed, removed_share, bound_speedup); see FLOP_NOTE for the model.
    """
    h, ffn, T = hidden_size, intermediate_size, seq_len
    d = h // num_heads
    per_layer = 4 * 2 * h * h + 2 * 2 * h * ffn + 2 * T * h + 2 * T * h
    total = num_layers * per_layer
    removed = num_constant_heads * (2 * 2 * h * d + 2 * T * d)
    share = removed / total
    return {"total": total, "removed": removed, "removed_share": share, "bound_speedup": 1.0 / (1.0 - share)}


def flop_bound(config, seq_len, num_constant_heads):
    """`flop_counts` for an HF BERT/RoBERTa config."""
    return flop_counts(config.hidden_size, config.intermediate_size, config.num_hidden_layers,
                       config.num_attention_heads, seq_len, num_constant_heads)


def percent_of_bound(ratio, bound):
    """(ratio − 1) / (bound − 1) in percent; None when the bound is 1 (nothing removed)."""
    if bound <= 1.0 + 1e-12:
        return None
    return 100.0 * (ratio - 1.0) / (bound - 1.0)
