"""What every decoder (causal) adapter shares: the causal band and the masks it may receive.

A decoder layer lets query i attend key j when j ≤ i (and, in a sliding-window layer, i − j < window, as
transformers' `sliding_window_overlay` does: kv_idx > q_idx − window), and the key is a real token. The
model hands each layer a 4-D mask holding all of that (additive under eager, boolean under sdpa), except
under sdpa without padding and without a window shorter than T, where it passes None and the kernel's
`is_causal` applies the band. A constant head attends inside the same band: its matrix is multiplied by
`causal_band` before the padding pattern, so it never attends to the future.

PAPA is a full-sequence forward (training, evaluation, averaging), as in the original. Every decoder adapter also
generates with a key/value cache (papa/families/generation.py).
"""

import torch
import torch.nn.functional as F

from .base import additive_mask


def causal_band(seq_len, sliding_window=None):
    """(T, T) bool: j ≤ i, and i − j < sliding_window when a window is given."""
    positions = torch.arange(seq_len)
    distance = positions[:, None] - positions[None, :]  # i − j
    band = distance >= 0
    return band if sliding_window is None else band & (distance < sliding_window)


def masked_scores(scores, attention_mask):
    """Attention logits (B, D, T, T) with the layer's mask added; without a mask (sdpa, no padding) the causal one."""
    if attention_mask is None:
        T = scores.shape[-1]
        future = ~causal_band(T).to(scores.device)
        return scores.masked_fill(future, torch.finfo(scores.dtype).min)
    return scores + additive_mask(attention_mask, scores.dtype)


def causal_sdpa(query, key, value, attention_mask, scale):
    """`scaled_dot_product_attention` of (B, D, T, d) tensors under the layer's mask (None: causal) → (B, T, D, d)."""
    context = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                             is_causal=attention_mask is None, scale=scale)
    return context.transpose(1, 2)
