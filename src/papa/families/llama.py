"""Llama-style decoder attention: Llama, Mistral, Qwen2, Qwen3 and Gemma3 (per-head q/k norms), Gemma2
(soft-capping), Granite (its own logit scale), SmolLM3 (no rotary on some layers).

transformers 5 gives these families one attention design: separate `q_proj`/`k_proj`/`v_proj`, grouped
keys/values (num_key_value_heads K/V heads, each read by num_key_value_groups query heads), rotary Q/K,
a causal 4-D mask (papa/families/causal.py), optionally a sliding window and (Gemma2) logit soft-capping,
and the output projection `o_proj` applied by the module itself.

PAPA's heads are the *query* heads (avgs.pt is [layers, query heads, T, T]):
- a replaced head's Q rows are pruned; a K/V group's K rows only when every query head of the group is
  replaced. V rows are always kept (a group's values feed its constant heads too; for mean-output heads
  of a fully replaced group they are dead weight, kept for simplicity). Rotary embeddings and the
  per-head q/k norms apply to the Q/K that remain.
- values are per query head: with grouped K/V, `papa_values` gathers each query head's K/V group
  (what `repeat_kv` does in the stock model), already in the layer's [dynamic | replaced] head layout, so
  the value projection is not permuted (its rows belong to K/V heads, not query heads); only `o_proj`'s
  input columns (which read query heads) are. Without grouping (num_key_value_groups == 1) the value rows
  are permuted at patch time instead, as for the encoders, and no gather runs.
- OLMo2 is not covered: its q/k norms run over all heads' concatenated Q/K, so pruning heads would change
  the dynamic heads' normalisation.
- soft-capping and the query scaling (Gemma2: query_pre_attn_scalar) apply to the dynamic heads as in
  the stock model. SDPA has no soft-capping, so with it the dynamic heads' fast path is an explicit
  softmax over their (B, D, T, T) logits, as the stock eager kernel computes (constant heads never
  build one).
"""

import torch
import torch.nn.functional as F

from ..errors import PapaError
from .base import Call, PapaAttention, attentions_requested, diagonal_validity
from .causal import causal_band, causal_sdpa, masked_scores
from .pruning import keep_head_rows


def layer_window(module):
    """An attention layer's sliding window, or None. Mistral-like modules read it from the config; Qwen2/Qwen3/Gemma2
    set it per layer (None: global)."""
    if hasattr(module, "sliding_window"):
        return module.sliding_window
    return getattr(module.config, "sliding_window", None)


class PapaLlamaAttention(PapaAttention):
    """Adapter for `LlamaAttention` and its copies (`forward(hidden_states, position_embeddings,
    attention_mask, cache=None, **kwargs)`)."""

    softcap = None  # attention-logit soft-capping of the dynamic heads (Gemma2)

    def papa_call(self, hidden_states, position_embeddings=None, attention_mask=None, cache=None, **kwargs):
        cache = cache if cache is not None else kwargs.get("past_key_values")  # generation (papa/families/generation.py)
        return Call(hidden_states, attention_mask, attentions_requested(kwargs),
                    {"rotary": position_embeddings, "cache": cache})

    @property
    def papa_dropout_p(self):
        return self.attention_dropout

    @property
    def _groups(self):
        return self.num_key_value_groups

    def papa_values(self, call):
        values = self.papa_unit_values(call)  # (B, T, G, d)
        if self._groups == 1:
            return values
        return values.index_select(2, self.papa_value_groups)  # (B, T, H, d): each query head's group, laid out

    def papa_unit_values(self, call):
        """The value projection's output per K/V head, (B, T, G, d) (with G = H: already in the layout)."""
        B, T, _ = call.hidden_states.shape
        return self.v_proj(call.hidden_states).view(B, T, -1, self.head_dim)

    @property
    def papa_value_units(self):
        """(H,): the entry of `papa_unit_values` each head of the layout reads."""
        if self._groups == 1:
            return torch.arange(len(self.papa_value_groups), device=self.papa_value_groups.device)
        return self.papa_value_groups

    def papa_validity(self, call):
        B, T, _ = call.hidden_states.shape
        return diagonal_validity(call.attention_mask, B, T, call.hidden_states.dtype)

    def _queries_keys(self, call):
        """Rotated queries (B, D, T, d) of the dynamic heads and keys (B, D, T, d) of their K/V groups."""
        query, key = self.papa_rotated(call)
        if self._groups > 1:
            key = key.index_select(1, self.papa_key_groups)  # (B, D, T, d): each dynamic head's group
        return query, key

    def papa_rotated(self, call):
        """Rotated queries (B, D, T, d) of the dynamic heads and keys (B, G', T, d) of the K/V heads they read."""
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb  # the same in every family here

        B, T, _ = call.hidden_states.shape
        query, key = self.papa_projections(call.hidden_states, self.q_proj, self.k_proj)
        query, key = query.view(B, T, -1, self.head_dim), key.view(B, T, -1, self.head_dim)
        if hasattr(self, "q_norm"):  # Qwen3, Gemma3: RMS norms over each head's d, before the rotation
            query, key = self.q_norm(query), self.k_norm(key)
        query, key = query.transpose(1, 2), key.transpose(1, 2)
        if getattr(self, "use_rope", True):  # SmolLM3 leaves out the rotation in some layers
            cos, sin = call.extra["rotary"]
            query, key = apply_rotary_pos_emb(query, key, cos, sin)
        return query, key

    def papa_cached_dynamic(self, call, query, key, value, mask):
        """The dynamic heads' output (B, q, D, d) for q new queries (B, D, q, d) over the cached keys and values
        (B, D or fewer K/V heads read in groups, kv, d) under `mask` (the layer's, or the causal band when the layer
        got None)."""
        if key.shape[1] != query.shape[1] and self.softcap is not None:
            repeat = query.shape[1] // key.shape[1]
            key, value = key.repeat_interleave(repeat, dim=1), value.repeat_interleave(repeat, dim=1)
        causal = mask is None and query.shape[-2] > 1  # a prompt with nothing cached before it
        if self.softcap is not None:
            scores = torch.tanh(torch.matmul(query, key.transpose(-1, -2)) * self.scaling / self.softcap) * self.softcap
            if mask is not None or causal:
                scores = masked_scores(scores, mask)
            probs = scores.to(torch.promote_types(scores.dtype, torch.float32)).softmax(dim=-1).to(value.dtype)
            return torch.matmul(probs, value).transpose(1, 2)
        context = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, is_causal=causal, scale=self.scaling,
                                                 enable_gqa=key.shape[1] != query.shape[1])
        return context.transpose(1, 2)

    def papa_scores(self, call):
        query, key = self._queries_keys(call)
        scores = torch.matmul(query, key.transpose(-1, -2)) * self.scaling
        if self.softcap is not None:
            scores = torch.tanh(scores / self.softcap) * self.softcap
        scores = masked_scores(scores, call.attention_mask)  # (B, D, T, T)
        # the stock eager softmax runs in float32; float64 stays (its finfo.min would become -inf, and a window
        # of padding only, a row of -inf, NaN, which the next layer's padded values spread to every position)
        return scores.to(torch.promote_types(scores.dtype, torch.float32))

    def papa_dynamic_context(self, call, values):
        if self.softcap is not None:  # no fused kernel soft-caps: the stock eager computation
            probs = self.papa_scores(call).softmax(dim=-1).to(values.dtype)  # (B, D, T, T)
            return torch.matmul(probs, values.transpose(1, 2)).transpose(1, 2)
        query, key = self._queries_keys(call)
        return causal_sdpa(query, key, values.transpose(1, 2), call.attention_mask, self.scaling)

    def papa_return(self, call, context, probs):
        B, T, H, d = context.shape
        return self.o_proj(context.reshape(B, T, H * d)), probs

    def papa_prune(self, dynamic_heads):
        if not getattr(self, "is_causal", True):
            raise PapaError(f"{type(self).__name__} is configured bidirectional (use_bidirectional_attention); "
                            "PAPA supports these families as causal decoders only")
        H, G = self.config.num_attention_heads, self.config.num_key_value_heads
        groups = self._groups
        # [dynamic | replaced], as papa_reorder_heads lays the heads out (mix mode: every head dynamic, in order)
        layout = list(dynamic_heads) + [h for h in range(H) if h not in dynamic_heads]
        kept_groups = sorted({h // groups for h in dynamic_heads})
        device = self.q_proj.weight.device
        value_groups = torch.tensor([h // groups for h in layout], dtype=torch.long, device=device)
        key_groups = torch.tensor([kept_groups.index(h // groups) for h in dynamic_heads], dtype=torch.long,
                                  device=device)
        self.register_buffer("papa_value_groups", value_groups, persistent=False)  # (H,) in layout order
        self.register_buffer("papa_key_groups", key_groups, persistent=False)  # (D,) into the kept K groups
        if len(dynamic_heads) == H:
            return  # nothing to prune: keep the stock projections (and any hooks on them)
        self.q_proj = keep_head_rows(self.q_proj, dynamic_heads, self.head_dim)
        if len(kept_groups) < G:
            self.k_proj = keep_head_rows(self.k_proj, kept_groups, self.head_dim)

    def papa_value_rows(self):
        if self._groups > 1:
            return []  # values are gathered per query head in layout order (module docstring)
        return [(self.v_proj, "weight", 0), (self.v_proj, "bias", 0)]

    @property
    def papa_window(self):
        return layer_window(self)

    def papa_band(self, seq_len):
        # `self` may be a stock attention module (papa.interop calls it unbound): read the window from it directly
        return causal_band(seq_len, layer_window(self))


class PapaGemma2Attention(PapaLlamaAttention):
    """Adapter for `Gemma2Attention`: Llama's, with attention-logit soft-capping on the dynamic heads."""

    @property
    def softcap(self):
        return self.attn_logit_softcapping
