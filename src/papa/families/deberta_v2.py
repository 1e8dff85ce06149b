"""DeBERTa-v2 / v3 disentangled self-attention (`deberta-v2` model type; v3 checkpoints use it too).

Same semantics as v1 (papa/families/deberta.py), other projections: separate `query_proj`,
`key_proj`, `value_proj` (with biases); the position terms reuse `query_proj`/`key_proj` when
`share_att_key`, otherwise they have `pos_query_proj` (p2c) and `pos_key_proj` (c2p). Relative
positions may be log-bucketed (`position_buckets`); the stock module works in a (B·H, T, d)
layout, which this adapter computes as (B, D, T, d) for the dynamic heads only.
"""

from .deberta import PapaDebertaAttentionBase, relative_scores
from .pruning import keep_head_rows


class PapaDebertaV2Attention(PapaDebertaAttentionBase):
    """Adapter for DeBERTa-v2's `DisentangledSelfAttention`."""

    def papa_values(self, call):
        B, T, _ = call.hidden_states.shape
        return self.value_proj(call.hidden_states).view(B, T, self.num_attention_heads, self.attention_head_size)

    def _query_key_bias(self, call):
        """Queries, keys scaled so that q·kᵀ is the content score (B, D, T, d), and the position terms."""
        if "scores_inputs" in call.extra:
            return call.extra["scores_inputs"]
        hidden = call.hidden_states
        B, T, _ = hidden.shape
        D, d = len(self.dynamic_heads), self.attention_head_size
        scale_factor = 1 + ("c2p" in self.pos_att_type) + ("p2c" in self.pos_att_type)
        scale = (d * scale_factor) ** 0.5
        query, key = self.papa_projections(hidden, self.query_proj, self.key_proj)
        query, key = query.view(B, T, D, d).transpose(1, 2), key.view(B, T, D, d).transpose(1, 2)
        bias = 0
        if self.relative_attention and call.extra["rel_embeddings"] is not None:
            span = self.pos_ebd_size
            rel = self.pos_dropout(call.extra["rel_embeddings"])[: 2 * span]  # (2span, hidden)
            by_head = lambda linear: linear(rel).view(-1, D, d).transpose(0, 1)  # (D, 2span, d)
            pos_key = pos_query = None
            if "c2p" in self.pos_att_type:
                pos_key = by_head(self.key_proj if self.share_att_key else self.pos_key_proj)
            if "p2c" in self.pos_att_type:
                pos_query = by_head(self.query_proj if self.share_att_key else self.pos_query_proj)
            relative_pos = call.extra["relative_pos"]
            if relative_pos is None:  # the stock encoder always passes it; build it as the stock module would
                from transformers.models.deberta_v2.modeling_deberta_v2 import build_relative_position

                relative_pos = build_relative_position(query, key, self.position_buckets, self.max_relative_positions)
            bias = relative_scores(query, key, pos_key, pos_query, relative_pos, span) / scale
        query = query / scale
        call.extra["scores_inputs"] = (query, key, bias)
        return query, key, bias

    def papa_prune(self, dynamic_heads):
        if len(dynamic_heads) == self.num_attention_heads:
            return  # nothing to prune: keep the stock projections
        d = self.attention_head_size
        self.query_proj = keep_head_rows(self.query_proj, dynamic_heads, d)
        self.key_proj = keep_head_rows(self.key_proj, dynamic_heads, d)
        if self.relative_attention and not self.share_att_key:
            if "c2p" in self.pos_att_type:
                self.pos_key_proj = keep_head_rows(self.pos_key_proj, dynamic_heads, d)
            if "p2c" in self.pos_att_type:
                self.pos_query_proj = keep_head_rows(self.pos_query_proj, dynamic_heads, d)

    def papa_value_rows(self):
        return [(self.value_proj, "weight", 0), (self.value_proj, "bias", 0)]
