"""ModernBERT attention: fused `Wqkv`, rotary Q/K, global and sliding-window layers.

The stock module projects q|k|v with one `Wqkv` (rows: all heads' Q, then K, then V), rotates Q
and K, attends through HF's attention interface with a 4-D mask (additive under eager, boolean
under sdpa; in sliding-window layers it also hides keys further than `config.sliding_window`),
and applies the output projection `Wo` itself.

PAPA: replaced heads skip Q, K and the rotation (their rows of `Wqkv` are pruned: the layout
becomes [Q dynamic | K dynamic | V all]); dynamic heads keep them. In a sliding-window layer a
constant head attends inside the window only: its matrix is multiplied by the window band
|i − j| ≤ sliding_window before the padding pattern, the same restriction the mask puts on every
stock head (and the averaged attention is zero outside the window anyway).
"""

import torch
import torch.nn.functional as F

from .base import Call, PapaAttention, additive_mask, attentions_requested, diagonal_validity
from .fused import fused_queries_keys, fused_units, fused_values
from .pruning import keep_rows


class PapaModernBertAttention(PapaAttention):
    """Adapter for `ModernBertAttention` (`forward(hidden_states, position_embeddings, attention_mask, **kwargs)`)."""

    def papa_call(self, hidden_states, position_embeddings=None, attention_mask=None, **kwargs):
        return Call(hidden_states, attention_mask, attentions_requested(kwargs), {"rotary": position_embeddings})

    @property
    def papa_dropout_p(self):
        return self.attention_dropout

    def papa_values(self, call):
        qkv = self.Wqkv(call.hidden_states)  # (B, T, 2·D·d + H·d): [Q dynamic | K dynamic | V all]
        return fused_values(call, qkv, self.config.num_attention_heads, self.head_dim, len(self.dynamic_heads))

    def papa_validity(self, call):
        B, T, _ = call.hidden_states.shape
        return diagonal_validity(call.attention_mask, B, T, call.hidden_states.dtype)

    def _queries_keys(self, call):
        """Rotated queries and keys of the dynamic heads: (B, D, T, d) each."""
        query, key = fused_queries_keys(call, len(self.dynamic_heads), self.head_dim)
        cos, sin = call.extra["rotary"]
        from transformers.models.modernbert.modeling_modernbert import apply_rotary_pos_emb  # loaded with the model

        return apply_rotary_pos_emb(query, key, cos, sin, unsqueeze_dim=1)

    def papa_scores(self, call):
        query, key = self._queries_keys(call)
        scores = torch.matmul(query, key.transpose(-1, -2)) * self.head_dim**-0.5
        mask = additive_mask(call.attention_mask, scores.dtype)
        scores = scores if mask is None else scores + mask
        return scores.float()  # the stock eager softmax runs in float32

    def papa_dynamic_context(self, call, values):
        query, key = self._queries_keys(call)
        context = F.scaled_dot_product_attention(
            query, key, values.transpose(1, 2), attn_mask=call.attention_mask, scale=self.head_dim**-0.5
        )
        return context.transpose(1, 2)  # (B, T, D, d)

    def papa_return(self, call, context, probs):
        B, T, H, d = context.shape
        return self.out_drop(self.Wo(context.reshape(B, T, H * d))), probs

    def papa_prune(self, dynamic_heads):
        self.Wqkv = keep_rows(self.Wqkv, fused_units(dynamic_heads, self.config.num_attention_heads, self.head_dim))

    def papa_value_rows(self):  # Wqkv after pruning: [Q dynamic | K dynamic | V all]
        offset = 2 * len(self.dynamic_heads) * self.head_dim
        return [(self.Wqkv, "weight", offset), (self.Wqkv, "bias", offset)]

    def papa_band(self, seq_len):
        if self.sliding_window is None:
            return None
        positions = torch.arange(seq_len)
        return (positions[:, None] - positions[None, :]).abs() <= self.config.sliding_window  # (T, T)
