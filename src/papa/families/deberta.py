"""DeBERTa (v1) disentangled self-attention, as the original PAPA code patched it.

The stock module (transformers 5) takes `(hidden_states, attention_mask, output_attentions,
query_states, relative_pos, rel_embeddings)`, fuses q|k|v per head in `in_proj` (rows of head h:
q, k, v, each d rows, at h·3d), adds `q_bias`/`v_bias`, scores every head with content and
relative-position terms (c2p through `pos_proj`, p2c through `pos_q_proj`) and gets a
*multiplicative* 0/1 mask m_i·m_j of shape (B, 1, T, T).

PAPA (original `models/deberta/modeling_deberta.py`): replaced heads get neither the content score
nor the position terms, so their query/key rows of `in_proj`, their slice of `q_bias` and their
rows of `pos_proj`/`pos_q_proj` are pruned; V rows and `v_bias` stay. At patch time `in_proj` is
laid out as [Q of dynamic heads | K of dynamic heads | V of all heads], so a layer whose heads are
all replaced computes no Q, K or position projection at all.
"""

import torch
import torch.nn.functional as F

from ..errors import PapaError
from .base import Call, PapaAttention, diagonal_validity
from .pruning import head_rows, keep_bias, keep_rows


def relative_scores(query, key, pos_key, pos_query, relative_pos, span):
    """DeBERTa's position terms c2p + p2c for the heads in `query`/`key`: (B, D, T, T).

    query, key: (B, D, T, d); pos_key, pos_query: (D, 2·span, d) projections of the relative
    position embeddings (None when the model lacks that term); relative_pos: (1, T, T) or (T, T).
    With δ(i, j) = clamp(relative_pos[i, j] + span, 0, 2·span − 1), as the stock gathers compute:
    c2p[i, j] = q_i · pos_key[δ(i, j)] and p2c[i, j] = k_j · pos_query[clamp(−relative_pos[j, i] + span)].
    """
    B, D, T, _ = query.shape
    relative_pos = relative_pos.reshape(T, T).long()
    score = 0
    if pos_key is not None:
        c2p_pos = torch.clamp(relative_pos + span, 0, 2 * span - 1)
        c2p = torch.matmul(query, pos_key.transpose(-1, -2))  # (B, D, T, 2span)
        score = score + torch.gather(c2p, -1, c2p_pos.expand(B, D, T, T))
    if pos_query is not None:
        p2c_pos = torch.clamp(-relative_pos + span, 0, 2 * span - 1)
        p2c = torch.matmul(key, pos_query.transpose(-1, -2))  # (B, D, T, 2span), rows are keys
        score = score + torch.gather(p2c, -1, p2c_pos.expand(B, D, T, T)).transpose(-1, -2)
    return score


def masked_logits(scores, multiplicative_mask):
    """Stock DeBERTa masking: logits of disallowed pairs become finfo.min (padded query rows end uniform)."""
    return scores.masked_fill(~multiplicative_mask.bool(), torch.finfo(scores.dtype).min)


class PapaDebertaAttentionBase(PapaAttention):
    """What DeBERTa v1 and v2 share: the call signature, the mask, the two paths' kernels."""

    def papa_call(self, hidden_states, attention_mask, output_attentions=False, query_states=None,
                  relative_pos=None, rel_embeddings=None):
        if query_states is not None:
            raise PapaError("PAPA-patched DeBERTa attention supports plain encoder layers only (no query_states)")
        return Call(hidden_states, attention_mask, bool(output_attentions),
                    {"relative_pos": relative_pos, "rel_embeddings": rel_embeddings})

    @property
    def papa_dropout_p(self):
        return self.dropout.p

    def papa_validity(self, call):
        B, T, _ = call.hidden_states.shape
        return diagonal_validity(call.attention_mask, B, T, call.hidden_states.dtype, multiplicative=True)

    def papa_scores(self, call):
        query, key, bias = self._query_key_bias(call)
        return masked_logits(torch.matmul(query, key.transpose(-1, -2)) + bias, call.attention_mask)

    def papa_dynamic_context(self, call, values):
        query, key, bias = self._query_key_bias(call)
        if torch.is_tensor(bias):
            bias = bias.expand(query.shape[0], query.shape[1], -1, -1)
        else:  # no position terms: the mask alone
            bias = query.new_zeros(query.shape[0], 1, query.shape[2], query.shape[2])
        context = F.scaled_dot_product_attention(
            query, key, values.transpose(1, 2), attn_mask=masked_logits(bias, call.attention_mask), scale=1.0
        )
        return context.transpose(1, 2)  # (B, T, D, d)

    def papa_return(self, call, context, probs):
        B, T, H, d = context.shape
        return context.reshape(B, T, H * d), probs

    def _use_relative(self, call):
        return self.relative_attention and call.extra["rel_embeddings"] is not None and call.extra["relative_pos"] is not None


class PapaDebertaAttention(PapaDebertaAttentionBase):
    """Adapter for DeBERTa v1's `DisentangledSelfAttention`."""

    def papa_values(self, call):
        B, T, _ = call.hidden_states.shape
        H, d, D = self.num_attention_heads, self.attention_head_size, len(self.dynamic_heads)
        qkv = self.in_proj(call.hidden_states)  # (B, T, 2·D·d + H·d): [Q dynamic | K dynamic | V all]
        call.extra["qk"] = qkv[..., : 2 * D * d]
        return qkv[..., 2 * D * d :].view(B, T, H, d) + self.v_bias.view(H, d)

    def _query_key_bias(self, call):
        """Scaled queries, keys (B, D, T, d) and the position terms of the dynamic heads."""
        if "scores_inputs" in call.extra:  # both paths may ask within one call
            return call.extra["scores_inputs"]
        B, T, _ = call.hidden_states.shape
        D, d = len(self.dynamic_heads), self.attention_head_size
        qk = call.extra["qk"]
        scale_factor = 1 + len(self.pos_att_type)
        scale = (d * scale_factor) ** 0.5
        query = ((qk[..., : D * d].view(B, T, D, d) + self.q_bias.view(D, d)) / scale).transpose(1, 2)
        key = qk[..., D * d :].view(B, T, D, d).transpose(1, 2)
        bias = 0
        if self._use_relative(call):
            rel = self.pos_dropout(call.extra["rel_embeddings"])
            span = min(T, self.max_relative_positions)
            rel = rel[self.max_relative_positions - span : self.max_relative_positions + span]  # (2span, hidden)
            pos_key = self.pos_proj(rel).view(-1, D, d).transpose(0, 1) if "c2p" in self.pos_att_type else None
            pos_query = (self.pos_q_proj(rel).view(-1, D, d).transpose(0, 1) / scale
                         if "p2c" in self.pos_att_type else None)
            bias = relative_scores(query, key, pos_key, pos_query, call.extra["relative_pos"], span)
        call.extra["scores_inputs"] = (query, key, bias)
        return query, key, bias

    def papa_prune(self, dynamic_heads):
        if self.talking_head:
            raise PapaError("PAPA does not support DeBERTa models with talking_head=True (neither did the original)")
        H, d = self.num_attention_heads, self.attention_head_size
        rows = torch.cat([head_rows(dynamic_heads, d, 0, 3 * d), head_rows(dynamic_heads, d, d, 3 * d),
                          head_rows(range(H), d, 2 * d, 3 * d)])
        self.in_proj = keep_rows(self.in_proj, rows)
        self.q_bias = keep_bias(self.q_bias, head_rows(dynamic_heads, d))
        if self.relative_attention:
            if "c2p" in self.pos_att_type:
                self.pos_proj = keep_rows(self.pos_proj, head_rows(dynamic_heads, d))
            if "p2c" in self.pos_att_type:
                self.pos_q_proj = keep_rows(self.pos_q_proj, head_rows(dynamic_heads, d))

    def papa_value_rows(self):  # in_proj after pruning: [Q dynamic | K dynamic | V all]
        offset = 2 * len(self.dynamic_heads) * self.attention_head_size
        return [(self.in_proj, "weight", offset), (self.in_proj, "bias", offset), (self, "v_bias", 0)]
