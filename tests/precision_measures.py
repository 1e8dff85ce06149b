"""What the low-precision gradient tests measure (tests/test_precision_backward.py): one training step's gradients in a
precision, how much a gradient's sum cancels (its condition number), and what a constant head's gradient is made of.

A gradient that is a sum of terms of both signs loses more precision than one that is not: rounding each term by a
relative ε moves the sum by up to ε·Σ|terms|, so its relative error scales with ‖Σ|terms|‖ / ‖Σ terms‖
(`cancellation`). Some of PAPA's gradients cancel more than any of the stock model's, and are judged with that.
"""

import copy

import torch

from papa.families import attention_modules, family_for
from test_precision import in_precision
from tiny_encoders import H

VALUE_PROJECTIONS = ("value", "value_proj", "in_proj", "Wqkv", "v_proj", "c_attn")  # per family; fused QKV too
LABELS = torch.tensor([0, 1, 2])
UNIT_ROUNDOFF = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}  # u: rounding to the nearest moves x by at most u·|x|


def training_step_grads(model, precision, ids, mask, attentions=False, device="cpu", train=True, captured=None):
    """Gradients of one full training step (train mode, attention and hidden dropout on), seeded: float32
    {name: grad} on the CPU. `attentions` asks for them, so replaced heads take the probabilities path rather than
    the dropout path (mix mode takes it either way). train=False: the same step in eval mode (no dropout: the fast
    path, or the probabilities path with attentions, under autograd). `captured`, a dict: filled with each layer's
    tensors (`record_layer_tensors`), float32 on the CPU, gradients unscaled.

    float16 training scales the loss so that small gradients stay normal numbers: as the Trainer's GradScaler,
    start at 2**16 and halve while any gradient overflows; the gradients are unscaled after, as the scaler does.
    """
    ids, mask, labels = ids.to(device), mask.to(device), LABELS.to(device)
    for loss_scale in (2.0 ** e for e in range(16, -1, -1)) if "fp16" in precision else [1.0]:
        low, context = in_precision(copy.deepcopy(model), precision, device)
        low.train(train)
        layer_tensors = {}
        handles = [] if captured is None else record_layer_tensors(low, layer_tensors)
        torch.manual_seed(0)  # the same dropout masks in every precision (CPU draws them independently of dtype)
        with context:
            logits = classifier_logits(low, ids, mask, attentions)
        (loss_scale * torch.nn.functional.cross_entropy(logits.float(), labels)).backward()
        for handle in handles:
            handle.remove()
        grads = {n: p.grad.float().cpu() / loss_scale for n, p in low.named_parameters() if p.grad is not None}
        if all(torch.isfinite(g).all() for g in grads.values()):
            if captured is not None:
                captured |= {k: v.detach().float().cpu() / (loss_scale if k[0].startswith("g") else 1.0)
                             for k, v in layer_tensors.items()}
            return grads
    raise AssertionError(f"non-finite gradients in {precision} at every loss scale")


def classifier_logits(model, ids, mask, attentions=False):
    """(B, labels) logits; a family without a sequence classifier (tiny_family_model) gives its last real token's."""
    logits = model(input_ids=ids, attention_mask=mask, output_attentions=attentions).logits
    return logits[torch.arange(len(ids)), mask.sum(1) - 1] if logits.dim() == 3 else logits


def relative_error(got, want):
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def cancellation(terms, dims):
    """‖Σ|terms|‖ / ‖Σ terms‖ over `dims`: how much a gradient's sum cancels (see the module docstring)."""
    return (terms.abs().sum(dims).norm() / terms.sum(dims).norm()).item()


def per_example_cancellation(model, ids, mask, names):
    """{parameter: how much its gradient's sum over the batch's examples cancels} (`cancellation` of the examples'
    own gradients, float32, eval mode) for the parameters whose names end with `names`."""
    model, grads = copy.deepcopy(model).eval(), []
    for b in range(len(ids)):
        model.zero_grad()
        torch.nn.functional.cross_entropy(classifier_logits(model, ids, mask), LABELS, reduction="none")[b].backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if n.endswith(names)})
    return {n: cancellation(torch.stack([g[n] for g in grads]), 0) for n in grads[0]}


def attention_projections(model):
    """Per layer: its attention modules, the projections reading the heads' outputs, those making the values."""
    layers = attention_modules(model)
    outputs = family_for(model).output_projections(model.base_model)
    values = [next(getattr(m, n) for n in VALUE_PROJECTIONS if hasattr(m, n)) for m in layers]
    return layers, outputs, values


def record_layer_tensors(model, captured):
    """Hooks keeping, per layer i: the value projection's input ("x", i), output ("v", i) and output gradient
    ("g_v", i); the heads' outputs, the output projection's input ("out", i), and their gradient ("g_out", i); and
    in a patched model the values its heads read ("V", i) and its dynamic heads' outputs ("A", i), (B, T, ·, d), and
    in training its attention-dropout multipliers, 0 or 1/(1−p) ("keep", i), (B, H, T, T) in its layout. Their
    handles (the patched layers' hooks are attributes, which go with the model)."""
    layers, outputs, values = attention_projections(model)

    def store(key, tensor):  # as a hook: returns None, so that it changes nothing
        captured.setdefault(key, tensor)

    def stored(key, tensor):
        store(key, tensor)
        return tensor

    def stored_dropout(i, mask_and_scale):  # the multipliers, before a caller scales the mask in place
        mask, scale = mask_and_scale
        store(("keep", i), mask * scale)
        return mask_and_scale

    handles = []
    for i, (layer, output, value) in enumerate(zip(layers, outputs, values)):
        handles.append(value.register_forward_pre_hook(lambda module, args, i=i: store(("x", i), args[0])))
        handles.append(value.register_forward_hook(lambda module, args, out, i=i: store(("v", i), out)))
        handles.append(value.register_full_backward_hook(lambda module, g_in, g_out, i=i: store(("g_v", i), g_out[0])))
        handles.append(output.register_forward_pre_hook(lambda module, args, i=i: store(("out", i), args[0])))
        handles.append(output.register_full_backward_hook(lambda module, g_in, g_out, i=i: store(("g_out", i), g_in[0])))
        if hasattr(layer, "papa_values"):
            layer.papa_values = lambda call, m=layer, i=i: stored(("V", i), type(m).papa_values(m, call))
            layer.papa_dynamic_context = lambda call, values, m=layer, i=i: stored(
                ("A", i), type(m).papa_dynamic_context(m, call, values))
            layer._dropout_mask = lambda *args, m=layer, i=i: stored_dropout(i, type(m)._dropout_mask(m, *args))
    return handles


def value_cancellation(captured, i):
    """How much layer i's value projection weight gradient cancels: its terms are dL/dv ⊗ x per token."""
    x, g = captured[("x", i)].flatten(0, 1), captured[("g_v", i)].flatten(0, 1)  # (B·T, in), (B·T, out)
    return cancellation(g[:, :, None] * x[:, None, :], 0)  # (B·T, out, in) terms


def lambda_and_value_cancellation(model, ids, mask):
    """Per layer, in float32 and eval mode (mix mode, λ = 0): the cancellation (`cancellation`) of λ's gradient,
    whose terms are dL/dout · (A − C) per (example, position, head, channel), A and C the layer's heads' output (the
    output projection's input) with that layer's λ → +∞ and −∞, the other layers' at 0 ("lambda"); the same with A and
    C rounded apart, as the fast path's low-precision A and C are before their difference, so that the terms are
    dL/dout · A and dL/dout · C ("lambda, A and C rounded"); and of the value projection's weight gradient, whose
    terms are dL/dv ⊗ x per token (a fused QKV projection: its whole weight's) ("values")."""
    model = model.eval()
    layers, outputs, values = attention_projections(model)
    captured = {}

    def forward(lam=None, layer=None):
        with torch.no_grad():
            for i, m in enumerate(layers):
                m.lambdas.fill_(lam if i == layer else 0.0)
        return classifier_logits(model, ids, mask)

    for i, output in enumerate(outputs):  # A and C of layer i, on the input the λ = 0 model gives it
        for key, lam in (("out, all dynamic", 60.0), ("out, all constant", -60.0)):  # not record_layer_tensors' keys
            handle = output.register_forward_pre_hook(lambda module, args, key=key: captured.__setitem__((key, i), args[0]))
            forward(lam, i)
            handle.remove()
    handles = record_layer_tensors(model, captured)
    torch.nn.functional.cross_entropy(forward(), LABELS).backward()
    for handle in handles:
        handle.remove()
    result = []
    for i in range(len(layers)):
        B, T = ids.shape
        g_out, A, C = (captured[(k, i)].view(B, T, H, -1)
                       for k in ("g_out", "out, all dynamic", "out, all constant"))  # (B, T, H, d) each
        # with A and C each rounded before their difference, the sum is Σ g·A − Σ g·C, of terms g·A and g·C
        rounded = ((g_out.abs() * (A.abs() + C.abs())).sum((0, 1, 3)).norm()
                   / (g_out * (A - C)).sum((0, 1, 3)).norm()).item()
        result.append({"lambda": cancellation(g_out * (A - C), (0, 1, 3)), "lambda, A and C rounded": rounded,
                       "values": value_cancellation(captured, i)})
    return result


def normalized_constants(layer, mask):
    """norm(·)'s row factors m_i m_j / r_bi where C > 0, and norm(C·P), (B, S, T, T) each, float64, for the layer's
    constants C, the band folded in."""
    valid = mask.double()  # (B, T)
    C = layer._constants(torch.float32).detach().double()  # (S, T, T)
    rows = torch.einsum("sij,bj->bsi", C, valid)  # r_bi = Σ_j C_ij m_bj
    weight = (valid[:, None, :, None] * valid[:, None, None, :]) / rows.clamp_min(1e-300)[..., None]  # (B, S, T, T)
    weight = weight * (C > 0)  # C ≥ 0 here: 0 outside the band and on all-zero rows
    return weight, C * weight


def constant_gradient(layer, captured, i, mask):
    """dL/dC of layer i's constant heads, (S, T, T) float64, from the heads' outputs' gradient and values that
    `record_layer_tensors` kept in some precision: the exact gradient for that run's own inputs. Also the sum of its
    terms' magnitudes, which bounds what rounding them apart can move it by.

    With N = norm(C·P), r_bi = Σ_k C_ik m_bk and G_bij = Σ_d dL/dout_bid · m_bj V_bjd (out a constant head's output,
    V its values), dL/dC_ij = Σ_b m_bi m_bj / r_bi · (G_bij − Σ_k G_bik N_bik): norm(·)'s Jacobian subtracts each
    row's N-weighted mean of G, as softmax's does for the stock queries and keys. Its terms are G_bij and each
    G_bik N_bik, and G's own, dL/dout_bid V_bjd (a matmul rounds its products' sum, or its inputs). Attention
    dropout multiplies G by its multipliers (the dropout path's rows are norm(C·P)'s, so the same holds there). In
    mix mode the constant path is weighted by 1 − σ(λ). The heads' layout puts the constant heads last, in the order of
    `constant_matrices`."""
    B, T = mask.shape
    S = layer.constant_matrices.shape[0]
    g = captured[("g_out", i)].double().view(B, T, H, -1)[:, :, H - S:]  # (B, T, S, d)
    V = captured[("V", i)].double()[:, :, H - S:] * mask.double()[:, :, None, None]  # (B, T, S, d)
    weight, N = normalized_constants(layer, mask)  # (B, S, T, T) each
    keep = captured[("keep", i)].double()[:, H - S:] if ("keep", i) in captured else 1.0  # (B, S, T, T)
    G = keep * torch.einsum("bisd,bjsd->bsij", g, V)  # (B, S, T, T)
    G_terms = keep * torch.einsum("bisd,bjsd->bsij", g.abs(), V.abs())  # Σ_d |terms| of G: a matmul's rounding bound
    mixed = 1 - torch.sigmoid(layer.lambdas.detach().double())[:, None, None] if layer.lambdas is not None else 1.0
    exact = mixed * (weight * (G - (G * N).sum(-1, keepdim=True))).sum(0)
    magnitudes = mixed * (weight * (G_terms + (G_terms * N).sum(-1, keepdim=True))).sum(0)
    return exact, magnitudes


def lambda_gradient(layer, captured, i, mask):
    """dL/dλ of layer i in mix mode, (H,) float64, on the fast path, from what `record_layer_tensors` kept in some
    precision: the exact gradient for that run's own heads' outputs' gradient, dynamic outputs A and values V. Also
    the sum of its terms' magnitudes.

    The layer outputs C_out + σ(λ)·(A − C_out), C_out = norm(C·P)·V, so dL/dλ_h = σ'(λ_h) Σ_btd dL/dout_bthd ·
    (A − C_out)_bthd. A and C_out are rounded apart before their difference, so its terms are dL/dout · A and
    dL/dout · C_out, and C_out's own, N_bhtj V_bjhd."""
    B, T = mask.shape
    g = captured[("g_out", i)].double().view(B, T, H, -1)  # (B, T, H, d)
    A = captured[("A", i)].double()  # (B, T, H, d)
    V = captured[("V", i)].double() * mask.double()[:, :, None, None]  # (B, T, H, d)
    _, N = normalized_constants(layer, mask)  # (B, H, T, T)
    C_out = torch.einsum("bhtj,bjhd->bthd", N, V)
    C_terms = torch.einsum("bhtj,bjhd->bthd", N, V.abs())
    slope = torch.sigmoid(layer.lambdas.detach().double())
    slope = slope * (1 - slope)  # σ'(λ)
    exact = slope * (g * (A - C_out)).sum((0, 1, 3))
    magnitudes = slope * (g.abs() * (A.abs() + C_terms)).sum((0, 1, 3))
    return exact, magnitudes
