"""What replaces a head: per head, the held-out loss change when it alone is replaced, by each input-independent
replacement, beside its profile and how much its pattern varies (`head_replacements.csv` and its figure).

Every replacement is a pair (C, c) per head: the replaced head outputs norm(C·P)·V + c (c zero on padded positions,
papa.families.constant_math.add_corrections):

    constant        (Ā, 0)                 PAPA: the average pattern
    mean_corrected  (Ā, E[A V] − Ā·E[V])   the average pattern, its output's bias against the mean output removed
    mean_output     (0, E[A V])            the mean ablation (norm(0·P) = 0: no attention at all)
    zero_output     (0, 0)                 the zero ablation
    first_token     (e_0 rows, 0)          the attention sink only

so one model patched in mix mode with a replacement's pair makes g = 1 that replacement (papa.method.gates), and the
loo ranker's exact single-head loss changes (papa.method.scorers.loo_scores: the blocks below a head's layer computed
once per batch, several heads per forward) give every head's cost. The pair is swapped into the same model, layer by
layer, between replacements (`load_replacement`). The pattern variance is the mean over real query rows of
‖A_h(x)_i − norm(Ā_h·P)_i‖², on the same data.
"""

import torch
from torch import nn

from ..errors import PapaError
from ..families import attention_modules
from ..families.block_triangle import pack_blocks
from ..families.constant_math import normalized_constant, padding_pattern
from .ablations import first_token_matrices
from .attention import _layer_replacements, load_constant_matrices, load_mean_outputs, load_output_corrections
from .gates import gated
from .profiles import head_kind, head_profiles
from .scorers import Objective, loo_scores, make_units

REPLACEMENTS = ("constant", "mean_corrected", "mean_output", "zero_output", "first_token")


def replacement_pairs(avgs_dir, names=REPLACEMENTS, num_layers=None, num_heads=None, head_dim=None):
    """{name: (C [L, H, T, T], c [L, H, T, d] or None)} from an averaging folder (avgs.pt; mean_outputs.pt for
    mean_output; output_corrections.pt for mean_corrected); with num_layers, num_heads (and head_dim) the files'
    shapes are checked against the model's, and every file's T against avgs.pt's."""
    unknown = [n for n in names if n not in REPLACEMENTS]
    if unknown:
        raise PapaError(f"unknown replacement {unknown[0]!r}; choose from {', '.join(REPLACEMENTS)}")
    averages = load_constant_matrices(avgs_dir, num_layers, num_heads)
    if not isinstance(averages, torch.Tensor):  # a decoder's lower triangles (papa.method.layouts)
        averages = averages.full()
    L, H, T, _ = averages.shape
    zeros = torch.zeros(()).expand(L, H, T, T)
    pairs = {}
    for name in names:
        if name == "constant":
            pairs[name] = (averages, None)
        elif name == "mean_corrected":
            pairs[name] = (averages, load_output_corrections(avgs_dir, L, H, head_dim, seq_len=T))
        elif name == "mean_output":
            pairs[name] = (zeros, load_mean_outputs(avgs_dir, L, H, head_dim, seq_len=T))
        elif name == "zero_output":
            pairs[name] = (zeros, None)
        else:
            pairs[name] = (first_token_matrices(L, H, T), None)
    return pairs


@torch.no_grad()
def load_replacement(model, constants, corrections):
    """Swap the pair (C, c) into a mix-mode model, layer by layer, in the form `patch_model` holds it (the band
    folded in; strips where the layer holds strips); c None removes the corrections."""
    for index, module in enumerate(attention_modules(model)):
        heads = list(range(len(module.dynamic_heads)))
        reference = module.constant_matrices
        tensor = _layer_replacements(constants, index, heads, reference)  # (H, T, T)
        band = module.papa_band(module.papa_seq_len)
        if band is not None:
            tensor = tensor * band.to(tensor)
        if module.papa_block is not None:
            tensor = pack_blocks(tensor, module.papa_block)
        reference.copy_(tensor)
        if "output_corrections" in module._parameters:
            del module._parameters["output_corrections"]
        elif "output_corrections" in module.__dict__:
            del module.__dict__["output_corrections"]
        module.output_corrections = (None if corrections is None else
                                     nn.Parameter(_layer_replacements(corrections, index, heads, reference),
                                                  requires_grad=False))


@torch.no_grad()
def pattern_variance(model, batches):
    """(L, H) mean over the real query rows of the batches of ‖A_h(x)_i − norm(Ā_h·P)_i‖², the stock model's
    attention against the constant pattern the model holds (a mix-mode model: load the constant replacement)."""
    layers = attention_modules(model)
    sums = torch.zeros(len(layers), len(layers[0].dynamic_heads), dtype=torch.float64)
    rows = 0.0
    for batch in batches:
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        with gated(model, {}):
            attentions = model(**inputs, output_attentions=True).attentions  # L × (B, H, T, T)
        valid = inputs["attention_mask"].to(attentions[0].dtype)  # (B, T)
        for index, (module, probs) in enumerate(zip(layers, attentions)):
            constant = normalized_constant(module._constants(probs.dtype), valid)  # (B, H, T, T)
            diff = (probs - constant) * padding_pattern(valid)
            sums[index] += diff.double().pow(2).sum((0, 2, 3)).cpu()
        rows += float(valid.sum())
    return sums / max(rows, 1.0)


def head_replacement_deltas(model, batches, kind, pairs, loss="task", max_rows=64, log=None):
    """({name: (L, H) mean loss change on `batches` when the head alone is replaced}, (L, H) pattern variance) on a
    mix-mode model (`patch_model(..., mix_all_heads=True)`); the model holds the last pair afterwards."""
    layers = attention_modules(model)
    L, H = len(layers), len(layers[0].dynamic_heads)
    units = make_units(L, H)
    deltas, variance = {}, None
    for name, (constants, corrections) in pairs.items():
        load_replacement(model, constants, corrections)
        if name == "constant":
            variance = pattern_variance(model, batches)
        objective = Objective(model, batches, kind, loss)
        scores = loo_scores(objective, units, max_rows=max_rows)
        deltas[name] = scores.view(L, H)
        if log is not None:
            log(name)
    return deltas, variance


def head_replacements_rows(deltas, variance, averages):
    """head_replacements.csv's rows (dicts), one per head, layer-major: the profile, the pattern variance, the loss
    change of each replacement (delta_<name>) and the replacement that loses least (best)."""
    profiles = head_profiles(averages)
    L, H = profiles["first"].shape
    rows = []
    for layer in range(L):
        for head in range(H):
            row = {"layer": layer, "head": head, "profile": head_kind(profiles, layer, head)}
            row.update({key: float(profiles[key][layer, head]) for key in ("first", "previous", "self", "distance")})
            row["pattern_variance"] = None if variance is None else float(variance[layer, head])
            row.update({f"delta_{name}": float(d[layer, head]) for name, d in deltas.items()})
            row["best"] = min(deltas, key=lambda name: (float(deltas[name][layer, head]), name))
            rows.append(row)
    return rows


def rows_csv(rows):
    """CSV text of dict rows (their keys the header; None as empty)."""
    header = list(rows[0])
    lines = [",".join(header)]
    for row in rows:
        lines.append(",".join("" if row[k] is None else repr(row[k]) if isinstance(row[k], float) else str(row[k])
                              for k in header))
    return "\n".join(lines) + "\n"


PROFILE_ORDER = ("first token", "previous token", "self", "broad")


def plot_head_replacements(rows, path):
    """head_replacements.png: heads (rows, grouped by profile, layer-major inside a group) × replacements (columns),
    coloured by the loss change on a symmetric log scale; the group's name at its first row. Written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import numpy as np
    from matplotlib.colors import SymLogNorm
    from matplotlib.figure import Figure

    from ..io import atomic_path

    names = [k[len("delta_"):] for k in rows[0] if k.startswith("delta_")]
    ordered = sorted(rows, key=lambda r: (PROFILE_ORDER.index(r["profile"]), r["layer"], r["head"]))
    values = np.array([[r[f"delta_{n}"] for n in names] for r in ordered])  # (heads, replacements)
    bound = max(float(np.abs(values).max()), 1e-6)
    fig = Figure(figsize=(2.0 + 1.1 * len(names), 2.5 + 0.025 * len(rows)))
    ax = fig.add_subplot()
    image = ax.imshow(values, aspect="auto", cmap="RdBu_r", interpolation="nearest",
                      norm=SymLogNorm(linthresh=min(1e-3, bound), vmin=-bound, vmax=bound))
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    starts = [i for i, r in enumerate(ordered) if i == 0 or r["profile"] != ordered[i - 1]["profile"]]
    ax.set_yticks(starts, [f"{ordered[i]['profile']} ({sum(r['profile'] == ordered[i]['profile'] for r in rows)})"
                           for i in starts])
    for i in starts[1:]:
        ax.axhline(i - 0.5, color="black", linewidth=0.8)
    ax.set_title("loss change when one head alone is replaced")
    fig.colorbar(image, ax=ax, label="held-out loss change")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    return path
