"""Constant-matrix attention heads for BERT and RoBERTa on transformers 5.

`patch_model` turns chosen heads of a loaded model into *constant* heads: instead of
softmax(QKᵀ/√d) they use a fixed T×T matrix C (the head's average attention over the training
set, `avgs.pt`), re-normalised to the padding of each example. Their query/key projections are
pruned away. In mix mode ("sort calculating") every head mixes both with a trainable weight:
σ(λ)·A + (1−σ(λ))·norm(C). The math is the original PAPA code's (Hassid et al., 2022):

    P[i, j]  = m_i · m_j                       (m = 1 for a real token, 0 for padding)
    norm(X)  = X·P / max(Σ_j |X·P|_ij, 1e-12)   (F.normalize(p=1): an all-zero row stays zero)

Two code paths compute the same thing:
- the probabilities path materialises every head's (B, H, T, T) attention; it runs when
  attentions are requested, and in training when attention dropout is on (dropout acts on the
  mixed probabilities, as in the original);
- the fast path never builds probabilities: dynamic heads go through
  `F.scaled_dot_product_attention`, constant heads are norm(C·P)·V computed as
  m_i · (C (m⊙V))_i / max((|C| m)_i, eps), and mix mode uses linearity.

The patch swaps the class of each existing self-attention module for a subclass of the stock
one, so output-recording hooks (matched with `isinstance`, possibly installed already) keep working.
"""

import os
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.bert.modeling_bert import BertSelfAttention
from transformers.models.roberta.modeling_roberta import RobertaSelfAttention
from transformers.pytorch_utils import prune_linear_layer

from .errors import PapaError

try:  # transformers 5 records `output_attentions` through this context variable
    from transformers.utils.output_capturing import _active_collector
except ImportError:  # pragma: no cover - other transformers versions: rely on the kwarg alone
    _active_collector = None

NORM_EPS = 1e-12  # F.normalize's eps, as in the original's mask_and_normalize
SUPPORTED_MODEL_TYPES = {"bert": BertSelfAttention, "roberta": RobertaSelfAttention}


# ----------------------------------------------------------------------------- math helpers


def token_validity(attention_mask, batch_size, seq_len, dtype):
    """(B, T) with 1.0 for real tokens, from the 4-D mask HF hands to self-attention, or None.

    The bidirectional mask's entry [b, 0, i, j] says whether key j may be attended, for every
    query i; its diagonal therefore holds each token's own validity (eager: 0 / finfo.min,
    sdpa: True / False). `None` means no padding.
    """
    if attention_mask is None:
        return None
    diagonal = attention_mask[:, 0].diagonal(dim1=-2, dim2=-1)  # (B, T)
    valid = diagonal if diagonal.dtype == torch.bool else diagonal == 0
    return valid.to(dtype).expand(batch_size, seq_len)


def additive_mask(attention_mask, dtype):
    """The 4-D mask as an additive float mask (eager style), or None."""
    if attention_mask is None or attention_mask.dtype != torch.bool:
        return attention_mask
    return torch.zeros((), dtype=dtype, device=attention_mask.device).masked_fill(
        ~attention_mask, torch.finfo(dtype).min
    )


def normalized_constant(constant, valid):
    """norm(C·P): (H, T, T) constants → (B, H, T, T) probabilities ((1, H, T, T) without padding)."""
    if valid is None:
        return F.normalize(constant, p=1, dim=-1, eps=NORM_EPS).unsqueeze(0)
    pattern = valid[:, None, :, None] * valid[:, None, None, :]  # (B, 1, T, T)
    return F.normalize(constant.unsqueeze(0) * pattern, p=1, dim=-1, eps=NORM_EPS)


def constant_attention_output(constant, values, valid):
    """norm(C·P) · V without materialising (B, H, T, T).

    constant: (H, T, T); values: (B, T, H, d); valid: (B, T) or None → (B, T, H, d), contiguous.
    Row i of norm(C·P)·V is m_i · Σ_j C_ij m_j V_j / max(Σ_j |C_ij| m_j, eps), so one
    (H, T, T) @ (H, T, B·d) batched matmul serves the whole batch. The masking and the scaling
    write straight into the layouts the matmul and the output projection want (out=), which
    saves two copies of V per layer on CPU.
    """
    B, T, H, d = values.shape
    if valid is None:
        scale = 1 / constant.abs().sum(-1).clamp_min(NORM_EPS)[:, :, None]  # (H, T, 1)
    else:
        valid_t = valid.t()  # (T, B)
        scale = valid_t / torch.matmul(constant.abs(), valid_t).clamp_min(NORM_EPS)  # (H, T, B); 0 on padded rows
    if torch.is_grad_enabled() and (values.requires_grad or constant.requires_grad):
        # autograd cannot record out= writes: the same math with two extra copies
        masked = values if valid is None else values * valid[:, :, None, None]
        numerator = torch.bmm(constant, masked.permute(2, 1, 0, 3).reshape(H, T, B * d)).view(H, T, B, d)
        return (numerator * scale.unsqueeze(-1)).permute(2, 1, 0, 3).contiguous()
    by_head = values.new_empty(H, T, B, d)  # V laid out for the batched matmul
    if valid is None:
        by_head.copy_(values.permute(2, 1, 0, 3))
    else:
        torch.mul(values.permute(2, 1, 0, 3), valid_t[None, :, :, None], out=by_head)
    numerator = torch.bmm(constant, by_head.view(H, T, B * d)).view(H, T, B, d)
    out = values.new_empty(B, T, H, d)
    torch.mul(numerator, scale.unsqueeze(-1), out=out.permute(2, 1, 0, 3))
    return out


# ----------------------------------------------------------------------------- the module


class PapaSelfAttentionMixin:
    """Forward of a self-attention layer with constant (replace mode) or mixed (mix mode) heads.

    Attributes set by `patch_model`: `static_heads` (sorted head indices that are constant),
    `dynamic_heads` (the others, whose Q/K rows remain), `mix_all_heads`, and the parameters
    `constant_matrices` (S, T, T) — one per constant head, or per head in mix mode — and
    `lambdas` (H,) in mix mode.
    """

    def forward(self, hidden_states, attention_mask=None, cache=None, **kwargs):
        if cache is not None:
            raise PapaError("PAPA-patched attention supports encoders only (no key/value cache)")
        B, T, _ = hidden_states.shape
        H, d = self.num_attention_heads, self.attention_head_size
        if self.constant_matrices is not None and self.constant_matrices.shape[-1] != T:
            raise PapaError(
                f"the constant matrices are {self.constant_matrices.shape[-1]}x{self.constant_matrices.shape[-1]} "
                f"but the input sequence length is {T}: pad inputs to {self.constant_matrices.shape[-1]} "
                f"(--pad_to_max_length, --max_seq_length {self.constant_matrices.shape[-1]}) or recompute avgs.pt at length {T}"
            )
        values = self.value(hidden_states).view(B, T, H, d)
        # only constant matrices need the padding pattern; an all-dynamic layer runs exactly like stock
        valid = token_validity(attention_mask, B, T, values.dtype) if self.constant_matrices is not None else None
        want_probs = attentions_requested(kwargs)
        if want_probs or (self.training and self.dropout.p > 0):
            context, probs = self._probabilities_path(hidden_states, attention_mask, values, valid)
        else:
            context, probs = self._fast_path(hidden_states, attention_mask, values, valid), None
        return context.reshape(B, T, H * d), (probs if want_probs else None)

    def _queries_keys(self, hidden_states):
        """Queries and keys of the dynamic heads: (B, D, T, d) each."""
        B, T, _ = hidden_states.shape
        shape = (B, T, len(self.dynamic_heads), self.attention_head_size)
        query = self.query(hidden_states).view(shape).transpose(1, 2)
        key = self.key(hidden_states).view(shape).transpose(1, 2)
        return query, key

    def _fast_path(self, hidden_states, attention_mask, values, valid):
        B, T, H, d = values.shape
        dynamic = None
        if self.dynamic_heads:
            query, key = self._queries_keys(hidden_states)
            dyn_values = values if len(self.dynamic_heads) == H else values[:, :, self.dynamic_heads]
            dynamic = F.scaled_dot_product_attention(
                query, key, dyn_values.transpose(1, 2), attn_mask=attention_mask, scale=self.scaling
            ).transpose(1, 2)  # (B, T, D, d)
        if self.mix_all_heads:
            constant = constant_attention_output(self.constant_matrices, values, valid)
            weight = torch.sigmoid(self.lambdas).to(values.dtype)[:, None]  # (H, 1)
            return weight * dynamic + (1 - weight) * constant
        if not self.static_heads:
            return dynamic
        if not self.dynamic_heads:
            return constant_attention_output(self.constant_matrices, values, valid)
        constant = constant_attention_output(self.constant_matrices, values[:, :, self.static_heads], valid)
        if valid is not None:  # the original re-normalises dynamic heads too: padded query rows become 0
            dynamic = dynamic * valid[:, :, None, None]
        context = values.new_empty(B, T, H, d)
        context[:, :, self.dynamic_heads] = dynamic
        context[:, :, self.static_heads] = constant
        return context

    def _probabilities_path(self, hidden_states, attention_mask, values, valid):
        B, T, H, d = values.shape
        probs = values.new_zeros(B, H, T, T)
        if self.dynamic_heads:
            query, key = self._queries_keys(hidden_states)
            scores = torch.matmul(query, key.transpose(-1, -2)) * self.scaling
            mask = additive_mask(attention_mask, scores.dtype)
            if mask is not None:
                scores = scores + mask
            probs[:, self.dynamic_heads] = scores.softmax(dim=-1)
        if self.mix_all_heads:
            weight = torch.sigmoid(self.lambdas).to(values.dtype)[:, None, None]  # (H, 1, 1)
            probs = weight * probs + (1 - weight) * normalized_constant(self.constant_matrices, valid)
        elif self.static_heads:
            probs[:, self.static_heads] = self.constant_matrices.to(probs.dtype)
            ones = torch.ones(B, T, dtype=probs.dtype, device=probs.device)
            probs = F.normalize(probs * _pattern(ones if valid is None else valid), p=1, dim=-1, eps=NORM_EPS)
        probs = self.dropout(probs)
        context = torch.matmul(probs, values.transpose(1, 2))  # (B, H, T, d)
        return context.transpose(1, 2), probs


def _pattern(valid):
    return valid[:, None, :, None] * valid[:, None, None, :]  # (B, 1, T, T)


class PapaBertSelfAttention(PapaSelfAttentionMixin, BertSelfAttention):
    pass


class PapaRobertaSelfAttention(PapaSelfAttentionMixin, RobertaSelfAttention):
    pass


PATCHED_CLASSES = {"bert": PapaBertSelfAttention, "roberta": PapaRobertaSelfAttention}


def attentions_requested(kwargs):
    """True when the caller asked for attentions (kwarg, or config via HF's output recorder)."""
    if kwargs.get("output_attentions"):
        return True
    collected = _active_collector.get() if _active_collector is not None else None
    return bool(collected is not None and "attentions" in collected)


# ----------------------------------------------------------------------------- patching


def self_attention_layers(model):
    """The model's self-attention modules, one per layer; a clear error for other architectures."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise PapaError(
            f"PAPA supports BERT and RoBERTa models only; this model is {type(model).__name__} "
            f"(model_type={model_type!r})"
        )
    base = model.base_model
    layers = [layer.attention.self for layer in base.encoder.layer]
    for module in layers:
        if not isinstance(module, SUPPORTED_MODEL_TYPES[model_type]):
            raise PapaError(f"unexpected self-attention module {type(module).__name__} in a {model_type} model")
    return layers


def load_constant_matrices(source, num_layers=None, num_heads=None):
    """A [L, H, T, T] float tensor from a tensor, an `avgs.pt` file, or a folder holding one.

    With num_layers and num_heads (the model's), L x H must match them.
    """
    what = "constant matrices"
    if isinstance(source, torch.Tensor):
        tensor = source
    else:
        path = os.fspath(source)
        if os.path.isdir(path) or not path.endswith(".pt"):  # a folder, existing or not
            path = os.path.join(path, "avgs.pt")
        if not os.path.isfile(path):
            raise PapaError(
                f"constant matrices not found: {path} does not exist "
                "(run run_papa_*_avgs_creator.py first and pass its --output_dir as --static_heads_dir)"
            )
        try:
            tensor = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:
            raise PapaError(f"{path} is not a readable tensor file ({type(err).__name__}: {err})") from None
        if not isinstance(tensor, torch.Tensor):
            raise PapaError(f"{path} holds a {type(tensor).__name__}, not a [layers, heads, T, T] tensor")
        what = f"the constant matrices in {path}"
    if tensor.dim() != 4 or tensor.shape[-1] != tensor.shape[-2]:
        raise PapaError(f"constant matrices must have shape [layers, heads, T, T]; got {list(tensor.shape)}")
    if not torch.isfinite(tensor).all():
        raise PapaError("constant matrices contain NaN or infinite values; recompute avgs.pt")
    if num_layers is not None and tuple(tensor.shape[:2]) != (num_layers, num_heads):
        raise PapaError(
            f"{what} have {tensor.shape[0]} layers x {tensor.shape[1]} heads, "
            f"but the model has {num_layers} x {num_heads}: they were computed for another model"
        )
    return tensor.float()


def static_heads_by_layer(static_heads, num_layers, num_heads):
    """`{layer: [heads]}` or `[[layer, head], ...]` → {layer: sorted heads}, validated."""
    if not static_heads:
        return {}
    pairs = (
        [(layer, head) for layer, heads in static_heads.items() for head in heads]
        if isinstance(static_heads, dict)
        else [tuple(pair) for pair in static_heads]
    )
    by_layer, seen = {}, set()
    for pair in pairs:
        if len(pair) != 2:
            raise PapaError(f"a static head must be a [layer, head] pair; got {list(pair)}")
        layer, head = int(pair[0]), int(pair[1])
        if not (0 <= layer < num_layers and 0 <= head < num_heads):
            raise PapaError(
                f"static head [{layer}, {head}] does not exist in a model with {num_layers} layers x {num_heads} heads"
            )
        if (layer, head) in seen:
            raise PapaError(f"static head [{layer}, {head}] is listed twice")
        seen.add((layer, head))
        by_layer.setdefault(layer, []).append(head)
    return {layer: sorted(heads) for layer, heads in sorted(by_layer.items())}


def _keep_heads(linear, heads, head_size):
    """`linear` with only the output rows of `heads` (a 0-row Linear when none remain)."""
    if not heads:
        with warnings.catch_warnings():  # "Initializing zero-element tensors is a no-op"
            warnings.simplefilter("ignore", UserWarning)
            empty = nn.Linear(linear.in_features, 0, device=linear.weight.device, dtype=linear.weight.dtype)
        return empty.requires_grad_(linear.weight.requires_grad)
    keep = torch.cat([torch.arange(h * head_size, (h + 1) * head_size) for h in heads]).to(linear.weight.device)
    return prune_linear_layer(linear, keep)


def patch_model(model, constant_matrices, static_heads=None, mix_all_heads=False):
    """Install PAPA attention in a loaded BERT/RoBERTa model, in place; returns the model.

    constant_matrices: [L, H, T, T] tensor (the layout of `avgs.pt`) or a path to it / its folder.
    static_heads: heads to make constant, `{layer: [heads]}` or `[[layer, head], ...]` (the first k
        rows of `sorted_heads.json`); None or empty keeps every head dynamic (patched modules
        are still installed, so 0 constant heads runs the same code as k > 0).
    mix_all_heads: every head mixes σ(λ)·softmax + (1−σ(λ))·norm(C) with a trainable λ per head
        (parameter `lambdas`, initialised to 0) — the original's "sort calculating" mode.
    """
    layers = self_attention_layers(model)
    if any(isinstance(module, PapaSelfAttentionMixin) for module in layers):
        raise PapaError("this model is already PAPA-patched; load a fresh model to patch it again")
    config = model.config
    num_layers, num_heads = config.num_hidden_layers, config.num_attention_heads
    matrices = load_constant_matrices(constant_matrices, num_layers, num_heads)
    if mix_all_heads and static_heads:
        raise PapaError("mix_all_heads mixes every head; do not also pass static_heads")
    by_layer = {} if mix_all_heads else static_heads_by_layer(static_heads, num_layers, num_heads)
    patched_class = PATCHED_CLASSES[config.model_type]
    reference = next(model.parameters())
    for index, module in enumerate(layers):
        static = list(range(num_heads)) if mix_all_heads else by_layer.get(index, [])
        dynamic = list(range(num_heads)) if mix_all_heads else [h for h in range(num_heads) if h not in static]
        module.__class__ = patched_class
        module.mix_all_heads = mix_all_heads
        module.static_heads = [] if mix_all_heads else static
        module.dynamic_heads = dynamic
        if len(dynamic) < num_heads:  # physically drop the Q/K rows of constant heads
            module.query = _keep_heads(module.query, dynamic, module.attention_head_size)
            module.key = _keep_heads(module.key, dynamic, module.attention_head_size)
        heads_with_constants = list(range(num_heads)) if mix_all_heads else static
        if heads_with_constants:
            constants = matrices[index, heads_with_constants].to(reference.device, reference.dtype)
            module.constant_matrices = nn.Parameter(constants.clone())
        else:
            module.constant_matrices = None
        module.lambdas = nn.Parameter(torch.zeros(num_heads, device=reference.device)) if mix_all_heads else None
    config.papa = {
        **(getattr(config, "papa", None) or {}),
        "static_heads": [[layer, head] for layer, heads in by_layer.items() for head in heads],
        "mix_all_heads": bool(mix_all_heads),
        "seq_len": int(matrices.shape[-1]),
    }
    return model


def lambdas_array(model):
    """The trained mixing weights as a float numpy array [L, H] (mix mode only)."""
    layers = self_attention_layers(model)
    if not all(getattr(m, "lambdas", None) is not None for m in layers):
        raise PapaError("the model was not patched with mix_all_heads=True; it has no lambdas")
    return torch.stack([m.lambdas.detach().float().cpu() for m in layers]).numpy()
