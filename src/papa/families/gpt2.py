"""GPT-2 attention: one fused `c_attn` Conv1D for q|k|v, learned positions, a causal mask.

The stock `GPT2Attention` projects q|k|v with `c_attn` (a Conv1D: weight stored (in, out), its output
units all heads' Q, then K, then V), scales the logits by `scaling` (1/√d, optionally also 1/(layer+1)),
attends under the causal 4-D mask (papa/families/causal.py), and applies `c_proj` (another Conv1D) and
the residual dropout itself.

PAPA: replaced heads' Q and K output units of `c_attn` are pruned (its outputs become
[Q dynamic | K dynamic | V all]); their value units and `c_proj`'s input rows are laid out
[dynamic | replaced] at patch time, as for the encoders. Cross-attention (`add_cross_attention`) is not
patched: only each block's self-attention `attn` is. Generation with a key/value cache: papa/families/generation.py
(each head is its own K/V head: a constant head keeps no key, and its values only where its constant reaches).
"""

import torch
import torch.nn.functional as F

from ..errors import PapaError
from .base import Call, PapaAttention, attentions_requested, diagonal_validity
from .causal import causal_band, causal_sdpa, masked_scores
from .fused import fused_queries_keys, fused_units, fused_values
from .pruning import keep_conv1d_outputs


class PapaGPT2Attention(PapaAttention):
    """Adapter for `GPT2Attention` (`forward(hidden_states, cache, attention_mask, encoder_hidden_states, ...)`)."""

    papa_window = None  # GPT-2 attends over the whole causal triangle

    def papa_call(self, hidden_states, cache=None, attention_mask=None, encoder_hidden_states=None,
                  encoder_attention_mask=None, output_attentions=False, **kwargs):
        if encoder_hidden_states is not None:
            raise PapaError("PAPA patches GPT-2's self-attention only, not cross-attention")
        cache = cache if cache is not None else kwargs.get("past_key_values")
        cache = getattr(cache, "self_attention_cache", cache)  # an EncoderDecoderCache: its self-attention part
        want = bool(output_attentions) or attentions_requested(kwargs)
        return Call(hidden_states, attention_mask, want, {"cache": cache})

    @property
    def papa_dropout_p(self):
        return self.attn_dropout.p

    def papa_values(self, call):
        qkv = self.c_attn(call.hidden_states)  # (B, T, 2·D·d + H·d): [Q dynamic | K dynamic | V all]
        return fused_values(call, qkv, self.num_heads, self.head_dim, len(self.dynamic_heads))

    def papa_unit_values(self, call):
        """(B, T, H, d): every head's values, in the layout (generation: each head is its own K/V head)."""
        return self.papa_values(call)

    @property
    def papa_value_units(self):
        return torch.arange(self.num_heads, device=self.c_attn.weight.device)

    def papa_rotated(self, call):
        """Queries and keys of the dynamic heads, (B, D, T, d) each (GPT-2 has no rotation: positions are learned)."""
        return self._queries_keys(call)

    def papa_cached_dynamic(self, call, query, key, value, mask):
        """The dynamic heads' output (B, q, D, d) for q new queries over the cached keys and values (B, D, kv, d)."""
        causal = mask is None and query.shape[-2] > 1  # a prompt with nothing cached before it
        if self.reorder_and_upcast_attn:  # the stock module's float32 logits and softmax
            scores = torch.matmul(query.float(), key.float().transpose(-1, -2)) * self.scaling
            if mask is not None or causal:
                scores = masked_scores(scores, mask)
            return torch.matmul(scores.softmax(dim=-1).to(value.dtype), value).transpose(1, 2)
        context = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, is_causal=causal, scale=self.scaling)
        return context.transpose(1, 2)

    def papa_validity(self, call):
        B, T, _ = call.hidden_states.shape
        return diagonal_validity(call.attention_mask, B, T, call.hidden_states.dtype)

    def _queries_keys(self, call):
        """Queries and keys of the dynamic heads: (B, D, T, d) each."""
        return fused_queries_keys(call, len(self.dynamic_heads), self.head_dim)

    def papa_scores(self, call):
        query, key = self._queries_keys(call)
        if self.reorder_and_upcast_attn:  # the stock module's float32 logits
            query, key = query.float(), key.float()
        scores = torch.matmul(query, key.transpose(-1, -2)) * self.scaling
        return masked_scores(scores, call.attention_mask)  # the stock eager softmax runs in the logits' dtype

    def papa_dynamic_context(self, call, values):
        query, key = self._queries_keys(call)
        return causal_sdpa(query, key, values.transpose(1, 2), call.attention_mask, self.scaling)

    def papa_return(self, call, context, probs):
        B, T, H, d = context.shape
        # contiguous, as the stock forward makes it: Conv1D views its input (structured heads' output is permuted)
        return self.resid_dropout(self.c_proj(context.reshape(B, T, H * d).contiguous())), probs

    def papa_prune(self, dynamic_heads):
        if self.is_cross_attention:
            raise PapaError("PAPA patches GPT-2's self-attention only, not cross-attention")
        if len(dynamic_heads) == self.num_heads:
            return  # nothing to prune: keep the stock projection (and any hooks on it)
        self.c_attn = keep_conv1d_outputs(self.c_attn, fused_units(dynamic_heads, self.num_heads, self.head_dim))

    def papa_value_rows(self):  # c_attn after pruning: [Q dynamic | K dynamic | V all], units along weight dim 1
        offset = 2 * len(self.dynamic_heads) * self.head_dim
        return [(self.c_attn, "weight", offset, 1), (self.c_attn, "bias", offset)]

    def papa_band(self, seq_len):
        return causal_band(seq_len)
