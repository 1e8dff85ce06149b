"""`patch_model`: make chosen attention heads of a loaded encoder or decoder constant, in place.

Instead of softmax(QKᵀ/√d) a constant head uses a fixed T×T matrix C (the head's average
attention over the training set, `avgs.pt`), re-normalised to the padding of each example; its
query/key projections are pruned away. In mix mode ("sort calculating") every head mixes both
with a trainable weight: σ(λ)·A + (1−σ(λ))·norm(C). The math is the original PAPA code's
(Hassid et al., 2022) and lives in papa/families/constant_math.py; the forward shared by every family in
papa/families/base.py; what differs per family (BERT, RoBERTa, XLM-R, CamemBERT, ELECTRA,
DeBERTa v1/v2/v3, ModernBERT; the decoders GPT-2, Llama, Mistral, Qwen2, Qwen3, Gemma2, Gemma3
(text), Granite, SmolLM3) in one adapter each under papa/families/. A decoder's constant head
attends inside its causal band (papa/families/causal.py); its heads are the query heads, whatever
its key/value grouping.

The patch swaps the class of each existing self-attention module for a subclass of the stock
one, so output-recording hooks (matched with `isinstance`, possibly installed already) keep working.
"""

import copy
import os

import torch
from torch import nn

from ..families import block_triangle
from ..families.block_triangle import pack_blocks
from ..families.constant_math import constant_attention_output, normalized_constant  # noqa: F401  (public math)
from ..families import PapaAttention, attention_modules, family_for
from ..artifacts import (RECOMPUTE, check_attention_weights, check_finite, check_floats, check_model_heads,
                         check_same_length)
from ..errors import PapaError
from .layouts import PackedConstants, read_head_file

HEAD_LAYOUT = "dynamic_first"  # config.papa["head_layout"] of models patched by this version


def _load_tensor(source, default_name, what, producer):
    """(tensor, description) from a tensor, a .pt file, or a folder holding `default_name`; a file in the
    lower-triangle layout (papa.method.layouts) gives a `PackedConstants`, read lazily."""
    if isinstance(source, (torch.Tensor, PackedConstants)):
        return source, what
    path = os.fspath(source)
    if os.path.isdir(path) or not path.endswith(".pt"):  # a folder, existing or not
        path = os.path.join(path, default_name)
    if not os.path.isfile(path):
        raise PapaError(f"{what} not found: {path} does not exist ({producer})")
    tensor, described = read_head_file(path, producer), f"the {what} in {path}"
    check_floats(tensor, described)
    return tensor, described


def _check_head_tensor(tensor, what, num_layers, num_heads, num_kv_heads=None):
    if not isinstance(tensor, PackedConstants):  # packed: checked as its file was read (papa.method.layouts)
        check_finite(tensor, what)
    check_model_heads(tuple(tensor.shape), what, num_layers, num_heads, num_kv_heads)
    return tensor if isinstance(tensor, PackedConstants) else tensor.float()


def load_constant_matrices(source, num_layers=None, num_heads=None, num_kv_heads=None):
    """A [L, H, T, T] float tensor from a tensor, an `avgs.pt` file, or a folder holding one; a lower-triangle
    file (a decoder's, papa.method.layouts) gives a `PackedConstants` of that shape, read a layer at a time.

    With num_layers and num_heads (the model's), L x H must match them; num_kv_heads (a decoder's grouped
    key/value heads) names the mistake of averages computed per key/value head.
    """
    tensor, what = _load_tensor(source, "avgs.pt", "constant matrices",
                                "run run_papa_*_avgs_creator.py first and pass its --output_dir as --static_heads_dir")
    if tensor.dim() != 4 or tensor.shape[-1] != tensor.shape[-2]:
        raise PapaError(f"{what} must have shape [layers, heads, T, T]; got {list(tensor.shape)}: {RECOMPUTE}")
    if not isinstance(source, (torch.Tensor, PackedConstants)):  # a file: attention weights, a layer at a time
        check_attention_weights(tensor.layers() if isinstance(tensor, PackedConstants) else tensor, what)
    return _check_head_tensor(tensor, what, num_layers, num_heads, num_kv_heads)


def _load_per_position(source, name, what, producer, num_layers, num_heads, head_dim, num_kv_heads, seq_len):
    """A [L, H, T, d] float tensor per head and position (mean outputs, output corrections) from a tensor, the
    file `name` or its folder; `seq_len`: the T of the constant matrices they go with."""
    tensor, described = _load_tensor(source, name, what, producer)
    if isinstance(tensor, PackedConstants) or tensor.dim() != 4 or (head_dim is not None
                                                                    and tensor.shape[-1] != head_dim):
        raise PapaError(f"{described} must have shape [layers, heads, T, {head_dim or 'd'}]; got "
                        f"{list(tensor.shape)}: {RECOMPUTE}")
    tensor = _check_head_tensor(tensor, described, num_layers, num_heads, num_kv_heads)
    check_same_length(tensor, described, seq_len)
    return tensor


def load_mean_outputs(source, num_layers=None, num_heads=None, head_dim=None, num_kv_heads=None, seq_len=None):
    """A [L, H, T, d] float tensor of mean head outputs from a tensor, `mean_outputs.pt` or its folder (with
    `seq_len`, the T of the constant matrices beside them)."""
    return _load_per_position(source, "mean_outputs.pt", "mean head outputs",
                              "run the averaging script with --mean_outputs first", num_layers, num_heads, head_dim,
                              num_kv_heads, seq_len)


def load_output_corrections(source, num_layers=None, num_heads=None, head_dim=None, num_kv_heads=None, seq_len=None):
    """A [L, H, T, d] float tensor of output corrections E[A V] − Ā·E[V] (the mean_corrected replacement) from a
    tensor, `output_corrections.pt` or its folder (with `seq_len`, the T of the constant matrices they correct)."""
    return _load_per_position(source, "output_corrections.pt", "output corrections",
                              "run the averaging script with --mean_corrections first", num_layers, num_heads,
                              head_dim, num_kv_heads, seq_len)


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


def head_dim(config_or_model):
    """Per-head size d of the attention (DeBERTa-v2 and Llama-like configs may set it apart from hidden/heads)."""
    config = getattr(config_or_model, "config", config_or_model)
    explicit = getattr(config, "attention_head_size", None) or getattr(config, "head_dim", None)
    return explicit or config.hidden_size // config.num_attention_heads


def load_structured(source, num_layers=None, num_heads=None, num_kv_heads=None):
    """(sink [L, H, S], profile [L, H, D]) float tensors from such a pair or a `structured_constants.pt` file (or
    its folder; papa.method.structured_averaging)."""
    from .structured_averaging import STRUCTURED_NAME, read_structured

    if isinstance(source, (tuple, list)):
        sink, profile = source
        what = "structured constants"
    else:
        path = os.fspath(source)
        path = os.path.join(path, STRUCTURED_NAME) if os.path.isdir(path) or not path.endswith(".pt") else path
        record = read_structured(path)
        sink, profile, what = record["sink"], record["profile"], f"the structured constants in {path}"
    if sink.dim() != 3 or profile.dim() != 3 or sink.shape[:2] != profile.shape[:2]:
        raise PapaError(f"{what} must be sink [layers, heads, S] and profile [layers, heads, D]; got "
                        f"{list(sink.shape)} and {list(profile.shape)}")
    return (_check_head_tensor(sink, what, num_layers, num_heads, num_kv_heads),
            _check_head_tensor(profile, what, num_layers, num_heads, num_kv_heads))


def dynamic_copy(model, seq_len):
    """A PAPA-patched copy of a stock `model` with every head dynamic: the same attention, read through PAPA's
    modules (the averaging pass's mean values and head outputs, `value_means`)."""
    config = model.config
    return patch_model(copy.deepcopy(model), torch.zeros(()).expand(config.num_hidden_layers,
                       config.num_attention_heads, seq_len, seq_len))


def patch_model(model, constant_matrices=None, static_heads=None, mix_all_heads=False, mean_outputs=None,
                reorder=True, output_corrections=None, structured=None):
    """Install PAPA attention in a loaded encoder or decoder, in place; returns the model.

    Any supported family (see papa.families.SUPPORTED_MODEL_TYPES): bare model, sequence or
    token classification, causal LM. A decoder's config gets use_cache=False: patched decoders
    run full-sequence forwards unless a cache is asked for (generation: papa/families/generation.py).
    constant_matrices: [L, H, T, T] tensor (the layout of `avgs.pt`) or a path to it / its folder.
    static_heads: heads to replace, `{layer: [heads]}` or `[[layer, head], ...]` (the first k
        rows of `sorted_heads.json`); None or empty keeps every head dynamic (patched modules
        are still installed, so 0 replaced heads runs the same code as k > 0).
    mix_all_heads: every head mixes σ(λ)·softmax + (1−σ(λ))·norm(C) with a trainable λ per head
        (parameter `lambdas`, initialised to 0) — the original's "sort calculating" mode.
    mean_outputs: instead of constant matrices, a [L, H, T, d] tensor (or `mean_outputs.pt`):
        the replaced heads output their training-set mean context vector per position (the
        mean-ablation control; no attention at all). Pass it *instead of* constant_matrices.
    structured: instead of constant matrices, a decoder's structured constants (sink [L, H, S], profile [L, H, D]) or
        `structured_constants.pt` (papa/families/structured.py): a constant for any input length, applied as a
        causal convolution.
    output_corrections: with constant_matrices, a [L, H, T, d] tensor (or `output_corrections.pt`) added to the
        replaced heads' output: norm(C·P)·V + E[A V] − Ā·E[V], the mean_corrected replacement (papa.method.averaging).
    reorder: lay each layer's heads out as [dynamic | replaced] (papa/families/base.py): permutes
        the value rows and the output projection's columns, recorded as config.papa["head_layout"].
        False only to load a folder saved in the stock layout; `reorder_heads` must follow.
    """
    family = family_for(model)
    layers = attention_modules(model)
    if any(isinstance(module, PapaAttention) for module in layers):
        raise PapaError("this model is already PAPA-patched; load a fresh model to patch it again")
    config = model.config
    implementation = getattr(config, "_attn_implementation", None) or "eager"
    if implementation not in ("eager", "sdpa"):
        # flash and flex kernels get a 2-D mask or none at all, so a sliding window or padding would be lost
        raise PapaError(f"this model runs attn_implementation={implementation!r}; PAPA patches the 'eager' and "
                        "'sdpa' ones: load it with attn_implementation='sdpa' (or 'eager')")
    if not family.causal and any(getattr(module, "is_causal", False) for module in layers):
        # its constant heads would attend to later tokens: the encoder adapters know no causal band
        raise PapaError(f"this {config.model_type} model is configured as a decoder (is_decoder=True), and PAPA "
                        "patches this family as an encoder: load it with is_decoder=False (the default)")
    num_layers, num_heads = config.num_hidden_layers, config.num_attention_heads
    num_kv_heads = getattr(config, "num_key_value_heads", None)
    if sum(x is not None for x in (constant_matrices, mean_outputs, structured)) != 1:
        raise PapaError("pass one of constant_matrices (PAPA), mean_outputs (mean ablation) or structured (structured "
                        "constants), not several or none")
    head_mode = "constant" if mean_outputs is None else "mean_output"
    if structured is not None:
        if not family.causal:
            raise PapaError(f"structured constants are a causal decoder's (sink plus profile over earlier tokens); "
                            f"this {config.model_type} model is an encoder: use full constant matrices (avgs.pt)")
        head_mode = "structured"
        sink, profile = load_structured(structured, num_layers, num_heads, num_kv_heads)
        replacements = sink
    elif head_mode == "constant":
        replacements = load_constant_matrices(constant_matrices, num_layers, num_heads, num_kv_heads)
    else:
        replacements = load_mean_outputs(mean_outputs, num_layers, num_heads, head_dim(model), num_kv_heads)
        if mix_all_heads:
            raise PapaError("mix_all_heads mixes attention with constant matrices; it does not take mean_outputs")
    if output_corrections is not None:
        if head_mode != "constant":
            raise PapaError("output_corrections correct constant heads: pass them with constant_matrices, "
                            "not mean_outputs")
        output_corrections = load_output_corrections(output_corrections, num_layers, num_heads, head_dim(model),
                                                     num_kv_heads)
        if output_corrections.shape[2] != replacements.shape[2]:
            raise PapaError(f"the output corrections are for T = {output_corrections.shape[2]}, the constant matrices "
                            f"for T = {replacements.shape[2]}: take both from one averaging pass")
    if mix_all_heads and static_heads:
        raise PapaError("mix_all_heads mixes every head; do not also pass static_heads")
    by_layer = {} if mix_all_heads else static_heads_by_layer(static_heads, num_layers, num_heads)
    seq_len = None if head_mode == "structured" else int(replacements.shape[2])  # structured: any length
    reference = next(model.parameters())
    output_projections = family.output_projections(model.base_model)
    for index, module in enumerate(layers):
        static = [] if mix_all_heads else by_layer.get(index, [])
        dynamic = [h for h in range(num_heads) if h not in static]
        module.__class__ = family.patched_class
        module.mix_all_heads = bool(mix_all_heads)
        module.static_heads, module.dynamic_heads, module.head_mode = static, dynamic, head_mode
        module.papa_prune(dynamic)
        stored = list(range(num_heads)) if mix_all_heads else static
        tensor = _layer_replacements(replacements, index, stored, reference) if stored else None
        module.constant_matrices = nn.Parameter(tensor) if tensor is not None and head_mode == "constant" else None
        module.mean_outputs = nn.Parameter(tensor) if tensor is not None and head_mode == "mean_output" else None
        structured_here = head_mode == "structured" and stored
        module.structured_sink = nn.Parameter(tensor) if structured_here else None
        module.structured_profile = (nn.Parameter(_layer_replacements(profile, index, stored, reference))
                                     if structured_here else None)
        module.output_corrections = (nn.Parameter(_layer_replacements(output_corrections, index, stored, reference))
                                     if output_corrections is not None and stored else None)
        # λ in float32, or float64 in a float64 model (a float32 σ(λ) was the one float32 step left there)
        lambda_dtype = torch.promote_types(reference.dtype, torch.float32)
        module.lambdas = (nn.Parameter(torch.zeros(num_heads, device=reference.device, dtype=lambda_dtype))
                          if mix_all_heads else None)
        band = None if seq_len is None else module.papa_band(seq_len)  # structured: per call, at its length
        module.papa_seq_len = seq_len
        module.papa_lower_triangular = bool(family.causal)  # zero above the diagonal: its strips hold it all
        module.register_buffer("papa_band_mask", None if band is None else band.to(reference.device), persistent=False)
        if band is not None and module.constant_matrices is not None:
            # the band folded into the stored constants once (and again after every state-dict load): a forward
            # reads them as they are, with no (S, T, T) product per call that autograd would keep per layer
            fold_band(module)
            module.register_load_state_dict_post_hook(_fold_band_after_load)
        if family.causal and module.constant_matrices is not None and seq_len >= 2 * block_triangle.BLOCK:
            hold_as_strips(module, block_triangle.BLOCK)
        if reorder:
            module.papa_reorder_heads(output_projections[index])
        else:
            module.papa_layout_pending = True
    if family.causal:  # full-sequence forwards unless asked (use_cache=True: papa/families/generation.py)
        config.use_cache = False
    config.papa = {
        **(getattr(config, "papa", None) or {}),
        "static_heads": [[layer, head] for layer, heads in by_layer.items() for head in heads],
        "mix_all_heads": bool(mix_all_heads),
        **({"seq_len": seq_len} if seq_len is not None else
           {"structured": {"sink_len": int(sink.shape[2]), "profile_len": int(profile.shape[2])}}),
        "head_mode": head_mode,
        **({"output_corrections": True} if output_corrections is not None else {}),
        "head_layout": HEAD_LAYOUT if reorder else "stock",
    }
    return model


def fold_band(module):
    """Zero a patched layer's stored constants outside its band (where it may attend), in place."""
    with torch.no_grad():
        module.constant_matrices.mul_(module.papa_band_mask.to(module.constant_matrices.dtype))


def hold_as_strips(module, block):
    """Hold a causal layer's constants (and band) as the block-row strips of their lower triangles, (S, N) for
    (S, T, T): (n + 1)/2n of the bytes for n blocks, and a product that skips the zero triangle
    (papa/families/block_triangle.py). The state dict holds the strips; a (S, T, T) one (a folder saved before)
    is packed as it loads."""
    values = pack_blocks(module.constant_matrices.detach(), block)
    module.constant_matrices = nn.Parameter(values, requires_grad=module.constant_matrices.requires_grad)
    if module.papa_band_mask is not None:
        module.papa_band_mask = pack_blocks(module.papa_band_mask[None], block)[0]  # (N,)
    module.papa_block = block
    module.register_load_state_dict_pre_hook(_pack_full_constants_on_load)


def _pack_full_constants_on_load(module, state_dict, prefix, *args):
    key = prefix + "constant_matrices"
    full = state_dict.get(key)
    if full is not None and full.dim() == 3 and module.papa_block is not None:
        state_dict[key] = pack_blocks(full, module.papa_block)


def _fold_band_after_load(module, incompatible_keys):
    if module.constant_matrices is not None and module.papa_band_mask is not None:
        fold_band(module)


def _layer_replacements(replacements, layer, heads, reference):
    """One layer's replacement tensors of `heads`, a fresh (S, T, ·) tensor in the model's device and dtype; read
    from a `PackedConstants` one layer at a time, so the whole [L, H, T, T] never exists."""
    if isinstance(replacements, PackedConstants):
        tensor = replacements.heads(layer, heads, reference.dtype, reference.device)
        if not torch.isfinite(tensor).all():
            raise PapaError(f"the constant matrices in {replacements.path} contain NaN or infinite values (layer "
                            f"{layer}); recompute them")
        return tensor
    return replacements[layer, heads].to(reference.device, reference.dtype)  # indexing by a list copies


def reorder_heads(model):
    """Lay out the heads of a model patched with `reorder=False` once its stock-layout weights are loaded."""
    layers = attention_modules(model)
    if not all(isinstance(module, PapaAttention) for module in layers):
        raise PapaError("this model is not PAPA-patched: patch it with patch_model(..., reorder=False) first")
    if not all(module.papa_layout_pending for module in layers):
        # a second permutation would pair the pruned queries and keys with another head's values
        raise PapaError("this model's heads are laid out already (patch_model does it unless reorder=False): call "
                        "reorder_heads once, on a model patched with reorder=False, after loading its weights")
    for module, projection in zip(layers, family_for(model).output_projections(model.base_model)):
        module.papa_reorder_heads(projection)
    model.config.papa["head_layout"] = HEAD_LAYOUT
    return model


def lambdas_array(model):
    """The trained mixing weights as a float numpy array [L, H] (mix mode only)."""
    layers = attention_modules(model)
    if not all(getattr(m, "lambdas", None) is not None for m in layers):
        raise PapaError("the model was not patched with mix_all_heads=True; it has no lambdas")
    return torch.stack([m.lambdas.detach().float().cpu() for m in layers]).numpy()
