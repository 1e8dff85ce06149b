"""BERT-like self-attention: BERT, RoBERTa, XLM-RoBERTa, CamemBERT, ELECTRA.

transformers 5 gives these families one self-attention design: separate `query`/`key`/`value`
projections, a 4-D mask (additive under eager, boolean under sdpa) and HF's attention interface.
The adapter prunes the Q/K rows of replaced heads and runs the dynamic heads through
`scaled_dot_product_attention` (fast path) or an explicit softmax (probabilities path).
"""

import torch
import torch.nn.functional as F

from ..errors import PapaError
from .base import Call, PapaAttention, additive_mask, attentions_requested, diagonal_validity
from .pruning import keep_head_rows


class PapaBertLikeAttention(PapaAttention):
    """Adapter for `BertSelfAttention` and its copies (`forward(hidden_states, attention_mask, cache, **kwargs)`)."""

    def papa_call(self, hidden_states, attention_mask=None, cache=None, **kwargs):
        if cache is not None:
            raise PapaError("PAPA-patched attention supports encoders only (no key/value cache)")
        return Call(hidden_states, attention_mask, attentions_requested(kwargs))

    @property
    def papa_dropout_p(self):
        return self.dropout.p

    def papa_values(self, call):
        B, T, _ = call.hidden_states.shape
        return self.value(call.hidden_states).view(B, T, self.num_attention_heads, self.attention_head_size)

    def papa_validity(self, call):
        B, T, _ = call.hidden_states.shape
        return diagonal_validity(call.attention_mask, B, T, call.hidden_states.dtype)

    def _queries_keys(self, call):
        """Queries and keys of the dynamic heads: (B, D, T, d) each."""
        B, T, _ = call.hidden_states.shape
        shape = (B, T, len(self.dynamic_heads), self.attention_head_size)
        query, key = self.papa_projections(call.hidden_states, self.query, self.key)
        return query.view(shape).transpose(1, 2), key.view(shape).transpose(1, 2)

    def papa_scores(self, call):
        query, key = self._queries_keys(call)
        scores = torch.matmul(query, key.transpose(-1, -2)) * self.scaling
        mask = additive_mask(call.attention_mask, scores.dtype)
        return scores if mask is None else scores + mask

    def papa_dynamic_context(self, call, values):
        query, key = self._queries_keys(call)
        context = F.scaled_dot_product_attention(
            query, key, values.transpose(1, 2), attn_mask=call.attention_mask, scale=self.scaling
        )
        return context.transpose(1, 2)  # (B, T, D, d)

    def papa_return(self, call, context, probs):
        B, T, H, d = context.shape
        return context.reshape(B, T, H * d), probs

    def papa_prune(self, dynamic_heads):
        if len(dynamic_heads) == self.num_attention_heads:
            return  # nothing to prune: keep the stock projections (and any hooks on them)
        self.query = keep_head_rows(self.query, dynamic_heads, self.attention_head_size)
        self.key = keep_head_rows(self.key, dynamic_heads, self.attention_head_size)

    def papa_value_rows(self):
        return [(self.value, "weight", 0), (self.value, "bias", 0)]
