"""The family adapter's contract: the `papa_*` hooks a family adapter (papa/families/<family>.py) gives
`PapaAttention` (papa/families/base.py), as `typing.Protocol`s.

`PapaAttention` knows what PAPA does with heads; it asks the adapter, through these hooks, for everything that
depends on the family's stock module: its signature, projections, masks, position terms and return values.

    FamilyAdapter   every family: the forward's hooks (papa_call ... papa_return), pruning and the head layout
                    (papa_prune, papa_value_rows), where a constant may attend (papa_band), dropout
    DecoderAdapter  every causal family besides: generation with a key/value cache (papa/families/generation.py)
                    and the sliding window that cache, structured constants and retrieval heads read

Shapes: B examples, T positions (q new ones in a cached step, kv cached ones), H heads of the layer (its query
heads), D of them dynamic, d per head, U the value projection's heads (a decoder's K/V heads; H without grouping).
Per-head tensors of H heads are in the layer's layout, [dynamic | replaced] (papa/families/base.py). `Call` is what
`papa_call` makes of one forward's arguments (papa.families.base.Call).

The adapters do not subclass these protocols (a stub inherited from one would hide a missing hook);
tests/test_family_contract.py checks that every registered family's attention class provides every hook, as a
method or a property as declared, with the declared arguments.
"""

from typing import Protocol, runtime_checkable


@runtime_checkable
class FamilyAdapter(Protocol):
    """The hooks every family adapter provides (PapaAttention provides `papa_band`'s default: None)."""

    def papa_call(self, *args, **kwargs):
        """The stock forward's arguments, in the stock signature, parsed into a `Call`: hidden states (B, T, hidden),
        the 4-D mask as the layer received it, whether attentions were asked for, and the family's extras (rotary
        embeddings, relative positions, a decoder's cache). PAPA's forward replaces the stock one and takes its
        arguments as the model passes them; every other hook reads the `Call`. What PAPA cannot patch (a cache in
        an encoder, cross-attention, DeBERTa's query_states) is refused here."""

    @property
    def papa_dropout_p(self):
        """The stock module's attention-probability dropout p (a float). In training with p > 0 the layer takes the
        dropout path and draws its mask with this p, as the stock module drops its probabilities."""

    def papa_values(self, call):
        """(B, T, H, d): every head's values, in the layer's layout (a grouped decoder gathers each query head's K/V
        head). Dynamic and replaced heads both mix values: the dynamic ones with their own attention, the constant
        ones with their constant matrices; papa.method.averaging reads them for the mean outputs."""

    def papa_validity(self, call):
        """(B, T) in the hidden states' dtype, 1.0 for a real token and 0.0 for padding, read from the mask; None
        without a mask. norm(C·P) renormalises a constant head's row over the real tokens and zeroes padded query
        rows (the original's normalisation); computed once per forward and shared by the layers
        (papa/families/call_cache.py)."""

    def papa_scores(self, call):
        """(B, D, T, T): the dynamic heads' attention logits, masked, as the stock eager softmax receives them
        (scaling, position terms, soft-capping; in float32 where the stock softmax runs in it). The probabilities
        path (attentions asked for, averaging, mix mode's dropout) and the dropout path softmax them."""

    def papa_dynamic_context(self, call, values):
        """(B, T, D, d): the dynamic heads' output from their values `values` (B, T, D, d), computed as the stock
        model does, through its fused kernel (scaled_dot_product_attention) where it has one. The fast path, which
        never builds a (B, D, T, T) probability tensor."""

    def papa_return(self, call, context, probs):
        """What the stock forward returns, from the heads' output `context` (B, T, H, d, in the layout) and the
        attentions `probs` (B, H, T, T in the stock head order, or None): (the heads' output concatenated to
        (B, T, H·d), through the output projection where the stock module applies it, probs). The patched module
        sits in the unchanged stock model, which reads what the stock module returned."""

    def papa_prune(self, dynamic_heads):
        """Drop, in place and once at patch time, the projections the replaced heads no longer need: the Q and K
        rows (and position projections) of the heads not in `dynamic_heads`; the value rows stay. Returns None.
        A constant head needs no queries or keys: the patched model is smaller and faster. What PAPA cannot patch
        (DeBERTa's talking heads, a bidirectional decoder, cross-attention) is refused here."""

    def papa_value_rows(self):
        """[(owner, parameter name, offset[, dim])]: where the H·d value rows live (head h's rows offset + h·d +
        [0, d) along `dim`, 0 unless given; the owner's parameter may be None); [] when the values are gathered
        per call instead (a grouped decoder). `papa_reorder_heads` permutes these rows once into the layout
        [dynamic | replaced], so that each group of heads is one contiguous slice in every step."""

    def papa_band(self, seq_len):
        """(seq_len, seq_len) bool, where a constant head may attend: the causal band, a sliding window; None:
        everywhere. The constant matrices are multiplied by it, so a constant head never reaches what the stock
        head could not (a later token, a key outside the window). May be called unbound on a stock module
        (papa.interop)."""


@runtime_checkable
class DecoderAdapter(FamilyAdapter, Protocol):
    """The hooks a causal family's adapter adds: generation with a key/value cache (papa/families/generation.py)
    keeps for each layer only what its heads still read, and structured constants and retrieval heads stay inside
    the layer's window."""

    @property
    def papa_window(self):
        """The layer's sliding window w (a query attends to keys i − j < w), or None for a global layer. A cached
        step keeps at most the last w − 1 positions of a constant head's values; structured constants' FFT product
        and the retrieval-head scores stay inside the window."""

    def papa_unit_values(self, call):
        """(B, T, U, d): the value projection's output per unit (a K/V head; each head is its own unit without
        grouping), not gathered per query head. The cache holds values per K/V head, as the stock cache does."""

    @property
    def papa_value_units(self):
        """(H,) long tensor: for each head of the layout, the unit of `papa_unit_values` it reads. Generation plans
        from it which K/V heads the dynamic heads keep in the cache and which only constant heads read (kept in
        PAPA's side state, values only)."""

    def papa_rotated(self, call):
        """(queries (B, D, q, d) of the dynamic heads, keys (B, G', q, d) of the K/V heads they read), at the call's
        positions (rotated where the family rotates; GPT-2's positions are learned). The new tokens' keys go into
        the cache, and their queries attend over it."""

    def papa_cached_dynamic(self, call, query, key, value, mask):
        """(B, q, D, d): the dynamic heads' output for the q new queries `query` (B, D, q, d) over the cached `key`
        and `value` (B, D or fewer K/V heads read in groups, kv, d) under `mask` (the layer's, or the causal band of
        the last q keys; None for one query, and for a prompt with nothing cached before it, q = kv: causal, so the
        fused kernel runs without a (q, kv) mask and a long prompt's attention is never materialised). Attends as
        the stock module does (its soft-capping, its float32 logits), so that a cached step equals the full forward."""


def hooks(protocol):
    """{hook name: "method" or "property"} of `protocol`, its bases' included."""
    found = {}
    for cls in reversed(protocol.__mro__):
        for name, value in vars(cls).items():
            if name.startswith("papa_"):
                found[name] = "property" if isinstance(value, property) else "method"
    return found
