"""The forward of a PAPA self-attention module, shared by every family (encoders and decoders).

`patch_model` swaps the class of each stock self-attention module for a subclass that mixes in
`PapaAttention` and one family adapter (papa/families/<family>.py). The adapter knows the
family's projections, masks and return values; this module knows what PAPA does with heads:

- dynamic heads attend as the stock model does (their Q/K remain; in a layer with replaced heads the
  pruned Q and K projections run as one GEMM, `papa_projections`, as two half-width ones are slower);
- replaced heads either attend with a constant matrix, norm(C·P) ("constant", PAPA itself), or
  output a fixed mean context vector per position ("mean_output", an ablation control); their
  Q/K (and position projections) are pruned;
- in mix mode (the ranking run) every head mixes σ(λ)·softmax + (1−σ(λ))·norm(C·P).

In a layer with replaced heads the dynamic heads' probabilities also go through norm(·), which
only zeroes padded query rows, as in the original. A layer without replaced heads runs the
family's stock computation.

Head layout: in a layer that mixes dynamic and replaced heads, `patch_model` lays the heads out as
[dynamic | replaced] once, at patch time: it permutes the rows of the value projection and the
input columns of the output projection (the Linear that reads the heads' concatenated outputs)
by `papa_head_order`, and the pruned Q/K rows hold the dynamic heads in that order already. Each
group is then a contiguous slice in every step, with no per-call gather or scatter. The layer
computes the same function (the output projection sums over heads, so only the order of a float
sum changes); attentions are returned in the stock head order, while the heads' concatenated outputs
(the output projection's input) and the saved weights follow the layout, which
`config.papa["head_layout"]` records for reload. Attention-dropout masks are drawn in the stock
head order, so seeded training is the same in either layout.

Three code paths compute the same thing:
- the probabilities path materialises every head's (B, H, T, T) attention; it runs when
  attentions are requested, and in mix mode's training with attention dropout (dropout acts on
  the mixed probabilities, as in the original);
- the dropout path, in training with attention dropout otherwise (the probing runs): the same
  dropout mask, but dynamic heads' softmax and constant heads' keep ⊙ C are each multiplied
  by their values directly (`dropped_constant_output`), with no (B, H, T, T) normalisation;
- the fast path never builds probabilities: dynamic heads go through the adapter's fused kernel
  (`scaled_dot_product_attention`), constant heads through `constant_attention_output`.

Adapter hooks: what this forward asks of the family adapter (`papa_call` parses the stock forward's arguments into
a `Call`, which the other hooks read) is declared, one hook and one docstring each, in papa/families/contract.py:
`FamilyAdapter` (every family), `DecoderAdapter` (a decoder's generation with a key/value cache besides).
"""

from dataclasses import dataclass, field

import torch

from . import generation, structured
from .block_triangle import BlockTriangle, dense
from .call_cache import constant_facts, shared_validity
from .constant_math import (add_corrections, constant_attention_output, constants_in, dropped_constant_output, in_place_ok,
                             mean_output, normalize_rows, normalized_constant)
from ..errors import PapaError
from .layout import HeadLayout
from .pruning import joint_linear

try:  # transformers 5 records `output_attentions` through this context variable
    from transformers.utils.output_capturing import _active_collector
except ImportError:  # pragma: no cover - other transformers versions: rely on the kwarg alone
    _active_collector = None

HEAD_MODES = ("constant", "mean_output")
STOCK = "stock"  # `papa_gate` of a layer a ranker leaves stock: its heads attend as the stock model's (no tensor is
# made at import: PyTorch reads its huge-page setting at its first allocation, papa/hugepages.py)


@dataclass
class Call:
    """One forward call, as the adapter parsed it."""

    hidden_states: torch.Tensor  # (B, T, hidden)
    attention_mask: torch.Tensor | None  # the 4-D mask the stock module received
    want_probs: bool  # attentions requested
    extra: dict = field(default_factory=dict)  # family-specific (rotary embeddings, relative positions, ...)


def attentions_requested(kwargs):
    """True when the caller asked for attentions (kwarg, or config via HF's output recorder)."""
    if kwargs.get("output_attentions"):
        return True
    collected = _active_collector.get() if _active_collector is not None else None
    return bool(collected is not None and "attentions" in collected)


def diagonal_validity(attention_mask, batch_size, seq_len, dtype, multiplicative=False):
    """(B, T) with 1.0 for real tokens, from a (B, 1, T, T) mask, or None without a mask.

    Entry [b, 0, i, j] of a bidirectional mask says whether key j may be attended from query i;
    its diagonal holds each token's own validity. Masks come in three kinds: boolean (True =
    attend; sdpa), additive (0 / finfo.min; eager) and multiplicative (1 / 0; DeBERTa).
    """
    if attention_mask is None:
        return None
    diagonal = attention_mask[:, 0].diagonal(dim1=-2, dim2=-1)  # (B, T)
    if diagonal.dtype == torch.bool:
        valid = diagonal
    elif multiplicative:
        valid = diagonal != 0
    else:
        valid = diagonal == 0
    return valid.to(dtype).expand(batch_size, seq_len)


def additive_mask(attention_mask, dtype):
    """A boolean 4-D mask as an additive float mask (eager style); other masks unchanged."""
    if attention_mask is None or attention_mask.dtype != torch.bool:
        return attention_mask
    return torch.zeros((), dtype=dtype, device=attention_mask.device).masked_fill(
        ~attention_mask, torch.finfo(dtype).min
    )


class PapaAttention(HeadLayout):
    """Mixin: the PAPA forward. Attributes set by `patch_model`:

    static_heads   sorted heads that are replaced (constant or mean output)
    dynamic_heads  the others, whose Q/K remain
    head_mode      "constant", "mean_output" or "structured": what replaced heads do
    structured_sink, structured_profile  (S, s) and (S, D) parameters in structured mode (papa/families/structured.py:
                   a constant of any length T, sink plus relative-position profile), else None
    mix_all_heads  mix mode: every head is in dynamic_heads and has a constant matrix
    constant_matrices  (S, T, T) parameter, one per replaced head (per head in mix mode), or None; a decoder's
                   from T = 2·papa_block on: (S, N), the lower triangles' strips (papa/families/block_triangle.py)
    papa_block     rows per strip of those strips, or None (full matrices)
    papa_seq_len   T, the length the constants (or mean outputs) were made for
    mean_outputs   (S, T, d) parameter in mean_output mode, or None
    output_corrections  (S, T, d) parameter added to the constant heads' output (the mean_corrected replacement:
                   E[A V] − Ā·E[V], papa.method.averaging), or None
    lambdas        (H,) parameter in mix mode, or None
    papa_band_mask (T, T) where constant heads may attend (held as the constants are: (N,) beside strips), or None
    papa_return_probs  True while papa.method.averaging records the attention (returns probabilities
                   without asking HF to collect every layer's)
    papa_head_order    the heads' layout (module docstring); set by `papa_reorder_heads`
    """

    papa_return_probs = False
    papa_value_hook = None  # while papa.method.averaging records mean values: called with each forward's (B, T, H, d)
    papa_lower_triangular = False  # a decoder's constants (causal band): zero above the diagonal
    papa_block = None  # constants held as (S, N) block-row strips of their lower triangle, `papa_block` rows each
    papa_seq_len = None
    papa_gate = None  # mix mode: σ(λ) mixes; a ranker's constant share g per head, or STOCK (papa.method.gates)

    def forward(self, *args, **kwargs):
        if self.papa_layout_pending:
            raise PapaError("this PAPA layer's heads are not laid out yet: call papa.method.attention.reorder_heads(model)")
        call = self.papa_call(*args, **kwargs)
        if call.extra.get("cache") is not None:  # generation: new tokens over a key/value cache
            return self.papa_return(call, generation.cached_context(self, call, call.extra["cache"]), None)
        B, T, _ = call.hidden_states.shape
        self._check_length(T)
        values = self.papa_values(call)  # (B, T, H, d)
        if self.papa_value_hook is not None:
            self.papa_value_hook(self.papa_stock_order(values, dim=2))
        # only replaced heads need the padding pattern; an all-dynamic layer runs exactly like stock
        valid = self._validity(call) if self._has_replacements else None
        want_probs = call.want_probs or self.papa_return_probs
        dropout = self.training and self.papa_dropout_p > 0
        if want_probs or (dropout and self.mix_all_heads):
            context, probs = self._probabilities_path(call, values, valid)
        elif dropout:
            context, probs = self._dropout_path(call, values, valid), None
        else:
            context, probs = self._fast_path(call, values, valid), None
        probs = self.papa_stock_order(probs, dim=1) if want_probs else None  # (B, H, T, T)
        return self.papa_return(call, context, probs)

    # ------------------------------------------------------------------ helpers

    def _validity(self, call):
        return shared_validity(call.attention_mask, call.hidden_states, lambda: self.papa_validity(call),
                               type(self).papa_validity)

    @property
    def _has_replacements(self):
        return bool(self.static_heads) or self.mix_all_heads

    def _check_length(self, T):
        expected = self.papa_seq_len
        if expected is None or not self._has_replacements:
            return
        if expected != T:
            raise PapaError(
                f"the constant matrices are {expected}x{expected} but the input sequence length is {T}: "
                f"pad inputs to {expected} (--pad_to_max_length, --max_seq_length {expected}) "
                f"or recompute avgs.pt at length {T}"
            )

    def _constants(self, dtype, seq_len=None):
        """The constant matrices in `dtype` (a `BlockTriangle` where the layer holds strips), restricted to where
        the layer may attend: `patch_model` zeroes them outside the band once (and after every state-dict load);
        while they train, the band is applied per call too, so their gradient stays inside it. Structured constants
        are materialised at the call's length `seq_len` (with the band)."""
        if self.head_mode == "structured":
            return constants_in(structured.layer_matrices(self, seq_len), dtype)
        constants = self.constant_matrices
        if self.papa_band_mask is not None and constants.requires_grad and torch.is_grad_enabled():
            constants = constants * self.papa_band_mask.to(constants.dtype)
        if self.papa_block is not None:
            constants = BlockTriangle(constants, self.papa_seq_len, self.papa_block)
        return constants_in(constants, dtype)

    def _constant_facts(self, constants, valid):
        return constant_facts(self, constants, valid)

    def _mix_weights(self, dtype):
        """Each head's weight on its own attention in mix mode, (1, H) or (B, H): σ(λ), or 1 − g while a ranker
        sets the constant share g (`papa_gate`: (H,) or, one per example, (B, H); papa.method.gates)."""
        gate = self.papa_gate
        if gate is not None:
            gate = self.lambdas.new_zeros(len(self.dynamic_heads)) if gate is STOCK else gate
            return (1 - gate).to(dtype).reshape(-1, gate.shape[-1])
        return torch.sigmoid(self.lambdas).to(dtype)[None]

    def _replaced_output(self, values, valid, out=None):
        """Output of the replaced heads, (B, T, S, d); `values` are theirs; `out` a view to fill (no autograd)."""
        if self.head_mode == "mean_output":
            result = mean_output(self.mean_outputs.to(values.dtype), valid, values.shape[0])
            return result if out is None else out.copy_(result)
        if self.head_mode == "structured" and structured.uses_fft(self, values.shape[1]):  # O(T log T), no (T, T)
            result = self._structured_output(values, valid)
            return result if out is None else out.copy_(result)
        constants = self._constants(values.dtype, values.shape[1])
        result = constant_attention_output(constants, values, valid, out=out, **self._constant_facts(constants, valid))
        return add_corrections(result, self.output_corrections, valid)

    # ------------------------------------------------------------------ the two paths

    def _fast_path(self, call, values, valid):
        B, T, H, d = values.shape
        if self.mix_all_heads:
            dynamic = self.papa_dynamic_context(call, values)  # (B, T, H, d)
            if self.papa_gate is STOCK:  # a ranker's layer left as it is: no constant share to compute
                return dynamic
            if self.head_mode == "structured" and structured.uses_fft(self, T):  # no (H, T, T) at long T
                constant = self._structured_output(values, valid)
            else:
                constants = self._constants(values.dtype, T)
                constant = constant_attention_output(constants, values, valid, **self._constant_facts(constants, valid))
            constant = add_corrections(constant, self.output_corrections, valid)  # a replacement's own c (mix mode)
            weight = self._mix_weights(values.dtype)[:, None, :, None]  # (1 or B, 1, H, 1)
            return constant + weight * (dynamic - constant)  # σ(λ)·A + (1−σ(λ))·C: λ's gradient reduces A − C, no cancellation
        if not self.static_heads:
            return self.papa_dynamic_context(call, values)
        if not self.dynamic_heads:
            return self._replaced_output(values, valid)
        # heads are laid out [dynamic | replaced]: each group is one contiguous slice
        D = len(self.dynamic_heads)
        dynamic = self.papa_dynamic_context(call, values[:, :, :D])  # (B, T, D, d)
        row_valid = None if valid is None else valid[:, :, None, None].to(dynamic.dtype)  # (B, T, 1, 1)
        if not in_place_ok(dynamic, values, *self._replacements()):
            if row_valid is not None:  # the original re-normalises dynamic heads too: padded query rows become 0
                dynamic = dynamic * row_valid
            return torch.cat([dynamic, self._replaced_output(values[:, :, D:], valid)], dim=2)
        context = values.new_empty(B, T, H, d)
        if valid is None:
            context[:, :, :D].copy_(dynamic)
        else:
            torch.mul(dynamic, row_valid, out=context[:, :, :D])
        self._replaced_output(values[:, :, D:], valid, out=context[:, :, D:])
        return context

    def _structured_output(self, values, valid):
        """norm(C·P)·V of structured constants by FFT (papa.families.structured), inside the layer's window."""
        return structured.structured_output(self.structured_sink, self.structured_profile, values, valid,
                                            self.papa_window)

    def papa_projections(self, x, *linears):
        """(linear(x) for linear in linears): the pruned Q/K projections of a layer with replaced heads as one GEMM
        (`joint_linear`); an all-dynamic layer's as the stock forward runs them."""
        if self.static_heads:
            return joint_linear(x, *linears)
        return tuple(linear(x) for linear in linears)

    def _replacements(self):
        return [p for p in (self.constant_matrices, self.mean_outputs, self.output_corrections, self.structured_sink,
                            self.structured_profile) if p is not None]

    def _probabilities_path(self, call, values, valid):
        B, T, H, d = values.shape
        D = len(self.dynamic_heads)  # heads are laid out [dynamic | replaced]
        if D == H:  # no empty rows to fill (mix mode, or no replaced head)
            probs = self.papa_scores(call).softmax(dim=-1).to(values.dtype)
        else:
            probs = values.new_zeros(B, H, T, T)
            if D:
                probs[:, :D] = self.papa_scores(call).softmax(dim=-1).to(values.dtype)
        if self.mix_all_heads:
            weight = self._mix_weights(values.dtype)[:, :, None, None]  # (1 or B, H, 1, 1)
            constant = normalized_constant(self._constants(values.dtype, T), valid)
            probs = constant + weight * (probs - constant)  # as in the fast path
        elif self.static_heads:
            if self.head_mode != "mean_output":
                probs[:, D:] = dense(self._constants(probs.dtype, T))
            probs = normalize_rows(probs, valid)  # mean-output heads keep all-zero rows: they do not attend
        if self.training and self.papa_dropout_p > 0:
            probs = probs * self._dropout_keep(probs, B, H, T)
        context = torch.matmul(probs, values.transpose(1, 2)).transpose(1, 2)  # (B, T, H, d)
        if self.mix_all_heads and self.output_corrections is not None:  # c in the constant share: (1 − w)·c
            context = context + (1 - weight).transpose(1, 2) * mean_output(self.output_corrections.to(context.dtype), valid, B)
        if self.static_heads and self.head_mode == "mean_output":
            context[:, :, D:] = self._replaced_output(values[:, :, D:], valid)
        elif self.static_heads and self.output_corrections is not None:
            context[:, :, D:] = add_corrections(context[:, :, D:].clone(), self.output_corrections, valid)
        return context, probs

    def _dropout_path(self, call, values, valid):
        """Training with attention dropout, attentions not requested: the probabilities path's output with its
        mask, without its (B, H, T, T) zero fill, copies and normalisation. Dynamic heads: softmax ⊙ keep · V;
        constant heads: (keep ⊙ C) · (V·m), rows scaled to norm(C·P)'s (`dropped_constant_output`). The mask
        stays 0/1 and its 1/(1−p) rides on a product made anyway (one (B, H, T, T) pass fewer than F.dropout)."""
        B, T, H, d = values.shape
        D = len(self.dynamic_heads)  # heads are laid out [dynamic | replaced]
        # the scores first, as in the probabilities path: a family's own dropout inside them (DeBERTa's position
        # embeddings) draws before the attention mask does
        probs = self.papa_scores(call).softmax(dim=-1).to(values.dtype) if D else None  # (B, D, T, T)
        mask, scale = self._dropout_mask(values, B, H, T)  # (B, H, T, T) of 0/1, the probabilities path's draw
        # a layer mixing both kinds writes each into its slice of one context (no autograd), as the fast path does
        mixed = 0 < D < H and in_place_ok(values, probs, *self._replacements())
        context = values.new_empty(B, T, H, d) if mixed else None
        parts = []
        if D:
            # (probs · m_i/(1−p)) ⊙ mask = probs ⊙ keep with padded query rows zero, as the probabilities path's
            # norm(·) makes them (padded keys are zero already)
            factor = scale if valid is None else valid[:, None, :, None].to(probs.dtype) * scale  # (B, 1, T, 1)
            if in_place_ok(probs):
                weights = probs.mul_(factor).mul_(mask[:, :D])
            else:
                weights = probs * factor * mask[:, :D]
            dynamic = torch.matmul(weights, values[:, :, :D].transpose(1, 2)).transpose(1, 2)  # (B, T, D, d)
            parts.append(dynamic if context is None else context[:, :, :D].copy_(dynamic))
        if D < H:
            replaced, target = values[:, :, D:], None if context is None else context[:, :, D:]
            if self.head_mode == "mean_output":
                parts.append(self._replaced_output(replaced, valid, out=target))
            else:
                constants = self._constants(values.dtype, T)
                parts.append(add_corrections(dropped_constant_output(
                    constants, mask[:, D:], scale, replaced, valid, out=target,
                    **self._constant_facts(constants, valid)), self.output_corrections, valid))
        if context is not None:
            return context
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)  # (B, T, H, d)

    def _dropout_mask(self, like, B, H, T):
        """The attention-dropout mask (B, H, T, T) of 0/1 in `like`'s dtype and its scale 1/(1−p) (a 0-dim tensor,
        0 for p = 1): drawn as F.dropout draws on CPU and in the stock head order, so a seed drops the same
        entries of each head whatever the layout and whichever path runs; returned in this layer's layout.
        mask · scale is F.dropout's multiplier (its `bernoulli_(1 − p).div_(1 − p)`), bit for bit."""
        p = self.papa_dropout_p
        if p >= 1:
            return like.new_zeros(B, H, T, T), like.new_zeros(())
        mask = like.new_empty(B, H, T, T).bernoulli_(1 - p)
        scale = like.new_ones(()).div_(1 - p)  # the value F.dropout's div_ gives a kept entry
        if self.papa_head_order is not None:
            mask = mask.index_select(1, torch.tensor(self.papa_head_order, device=like.device))
        return mask, scale

    def _dropout_keep(self, like, B, H, T):
        """Attention-dropout multipliers (B, H, T, T): 0 or 1/(1−p), as F.dropout multiplies (`_dropout_mask`)."""
        mask, scale = self._dropout_mask(like, B, H, T)
        return mask.mul_(scale)

    # ------------------------------------------------------------------ adapter defaults

    def papa_band(self, seq_len):
        return None
