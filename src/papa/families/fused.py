"""Adapters whose one projection computes q|k|v for every head (ModernBERT's `Wqkv`, GPT-2's `c_attn`).

Its output units are all heads' Q, then K, then V. Pruning keeps [Q dynamic | K dynamic | V all]: the
dynamic heads' Q and K, every head's V.
"""

import torch

from .pruning import head_rows


def fused_units(dynamic_heads, num_heads, head_dim):
    """Output units of the fused projection that remain: [Q dynamic | K dynamic | V all]."""
    hidden = num_heads * head_dim
    return torch.cat([head_rows(dynamic_heads, head_dim), head_rows(dynamic_heads, head_dim, hidden),
                      head_rows(range(num_heads), head_dim, 2 * hidden)])


def fused_values(call, qkv, num_heads, head_dim, num_dynamic):
    """(B, T, H, d) values from the pruned projection's output (B, T, 2·D·d + H·d); keeps its Q|K part in the call."""
    B, T, _ = qkv.shape
    call.extra["qk"] = qkv[..., : 2 * num_dynamic * head_dim]
    return qkv[..., 2 * num_dynamic * head_dim :].view(B, T, num_heads, head_dim)


def fused_queries_keys(call, num_dynamic, head_dim):
    """Queries and keys of the dynamic heads, (B, D, T, d) each, from the Q|K part `fused_values` kept."""
    qk = call.extra["qk"]
    B, T, _ = qk.shape
    query = qk[..., : num_dynamic * head_dim].view(B, T, num_dynamic, head_dim).transpose(1, 2)
    key = qk[..., num_dynamic * head_dim :].view(B, T, num_dynamic, head_dim).transpose(1, 2)
    return query, key
