"""What each file a run reads must hold, checked where it is read: anything else is one PapaError naming the file,
what is wrong with it and the fix, before any heavy work (docs/artifacts.md lists the files).

    avgs.pt (both layouts, papa.method.layouts), the sink and profile of structured_constants.pt
        attention weights: floats, finite, never negative
    mean_outputs.pt, output_corrections.pt
        floats, finite; of this model and T (papa.method.attention's loaders, given the model's shape)
    structured_constants.pt
        its record whole: kind, seq_len, sink [L, H, S] and profile [L, H, D ≥ 1] (papa.method.structured_averaging)
    sorted_heads.json, best_of.csv
        heads of this model, none twice; sorted_heads.json's rows [layer, head] integer pairs, best_of.csv's every
        head once (papa.method.ranking, papa.method.best_of)
    lambdas.npy
        a finite float [layers, heads] array, one λ per head its ranking ranks (papa.reporting.stability, .plots)

The original code's files (avgs.pt a float [L, H, T, T] tensor, sorted_heads.json a list of [layer, head] pairs,
lambdas.npy a float [L, H] array) pass unchanged. Only this module's functions and papa.errors are imported here.
"""

import numpy as np
import torch

from .errors import PapaError, first_line

RECOMPUTE = "recompute them with the averaging script"
RERANK = "rerun the ranking run (run_papa_*.py --sort_calculating True) that writes it"


def _number_type(dtype):
    return str(dtype).removeprefix("torch.")


def check_floats(tensor, what):
    """A tensor of floating-point numbers (every PAPA file's); `what` names it, the file included."""
    if not tensor.dtype.is_floating_point:
        raise PapaError(f"{what} hold {_number_type(tensor.dtype)} numbers where PAPA writes floats, so they are not "
                        f"what the averaging script wrote; {RECOMPUTE}")


def check_finite(tensor, what, where=""):
    if not torch.isfinite(tensor).all():
        raise PapaError(f"{what} contain NaN or infinite values{where}; {RECOMPUTE}")


def check_attention_weights(layers, what):
    """Attention weights (averages, structured constants): floats, finite and ≥ 0. `layers`: the tensor, or an
    iterable of its layers' tensors (a lower-triangle file's, read a layer at a time), so no check copies the whole."""
    for index, values in enumerate(layers):
        check_floats(values, what)
        check_finite(values, what, f" (layer {index})")
        if values.numel() and (least := float(values.min())) < 0:
            raise PapaError(f"{what} hold negative weights ({least:.3g} in layer {index}), which no attention gives, "
                            f"so they are not attention averages; {RECOMPUTE}")


def check_model_heads(shape, what, num_layers, num_heads, num_kv_heads=None):
    """A per-head tensor's leading [layers, heads] are this model's: `num_layers` x `num_heads` (query heads); its
    `num_kv_heads` named as the mistake of per-K/V-head files."""
    if num_kv_heads not in (None, num_heads) and len(shape) >= 2 and shape[1] == num_kv_heads:
        raise PapaError(
            f"{what} have {num_kv_heads} heads per layer, the model's key/value heads, but PAPA's heads are its "
            f"{num_heads} query heads (num_attention_heads): recompute them with papa's averaging, which records "
            "one matrix per query head"
        )
    if num_layers is not None and tuple(shape[:2]) != (num_layers, num_heads):
        raise PapaError(f"{what} have {shape[0]} layers x {shape[1]} heads, but the model has {num_layers} x "
                        f"{num_heads}: they were computed for another model")


def check_same_length(tensor, what, seq_len):
    """Per-position outputs [L, H, T, d] made with constant matrices of length `seq_len`: one averaging pass's."""
    if seq_len is not None and tensor.shape[2] != seq_len:
        raise PapaError(f"{what} are for T = {tensor.shape[2]}, but the constant matrices beside them are for T = "
                        f"{seq_len}: take both from one averaging pass (rerun it with --mean_corrections)")


# ----------------------------------------------------------------------------- structured_constants.pt

def check_structured(record, path, kinds):
    """The record of a structured_constants.pt (its format and version already read): a kind of `kinds`, seq_len,
    num_examples, sink [L, H, S] and profile [L, H, D ≥ 1] of one [L, H], both attention weights."""
    fix = "recompute it with the averaging script (--constants toeplitz or sink_window)"
    if record.get("kind") not in kinds:
        raise PapaError(f"{path} holds constants of kind {record.get('kind')!r}, not {' or '.join(kinds)}; {fix}")
    for key, least in (("seq_len", 1), ("num_examples", 0)):
        value = record.get(key)
        if type(value) is not int or value < least:
            raise PapaError(f"{path} records {key} {value!r}, not an integer ≥ {least}; {fix}")
    sink, profile = record.get("sink"), record.get("profile")
    if not isinstance(sink, torch.Tensor) or not isinstance(profile, torch.Tensor):
        raise PapaError(f"{path} lacks its sink and profile tensors; {fix}")
    if sink.dim() != 3 or profile.dim() != 3 or sink.shape[:2] != profile.shape[:2] or profile.shape[2] == 0:
        raise PapaError(f"{path} must hold sink [layers, heads, S] and profile [layers, heads, D ≥ 1]; got "
                        f"{list(sink.shape)} and {list(profile.shape)}: {fix}")
    check_attention_weights([sink], f"the sink weights in {path}")
    check_attention_weights([profile], f"the profile weights in {path}")


# ----------------------------------------------------------------------------- head lists


def add_head(seen, layer, head, path, num_layers, num_heads, made="the ranking was made", fix=RERANK):
    """Add (layer, head), a row of `path`, to `seen`: a head of this model, not listed before (else a PapaError
    ending with `fix`)."""
    if not (0 <= layer < num_layers and 0 <= head < num_heads):
        raise PapaError(f"{path} names head [{layer}, {head}], which a model with {num_layers} layers x {num_heads} "
                        f"heads lacks: {made} for another model")
    if (layer, head) in seen:
        raise PapaError(f"{path} lists head [{layer}, {head}] twice; {fix}")
    seen.add((layer, head))


JSON_NAMES = {dict: "an object", str: "a string", int: "a number", float: "a number", bool: "true or false",
              type(None): "null"}


def check_ranking(rows, path, num_layers, num_heads):
    """sorted_heads.json's rows: a list of [layer, head] integer pairs (JSON true is no index), heads of this model,
    none twice; it may list fewer than all heads (the first k are made constant)."""
    if not isinstance(rows, list) or not rows:
        got = "an empty list" if isinstance(rows, list) else JSON_NAMES.get(type(rows), type(rows).__name__)
        raise PapaError(f"{path} must be a JSON list of [layer, head] integer pairs, not {got}; {RERANK}")
    seen = set()
    for index, row in enumerate(rows):
        if not (isinstance(row, list) and len(row) == 2 and all(type(x) is int for x in row)):
            raise PapaError(f"{path} must be a JSON list of [layer, head] integer pairs; row {index} is "
                            f"{first_line(repr(row))[:60]}: {RERANK}")
        add_head(seen, *row, path, num_layers, num_heads)
    return rows


# ----------------------------------------------------------------------------- lambdas.npy


def load_lambdas(path, ranking=None):
    """λ from a ranking run's lambdas.npy: a finite float [layers, heads] array; with `ranking` (the rows of
    sorted_heads.json beside it), one λ for each head it ranks."""
    try:
        lambdas = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise PapaError(f"{path} is not a readable .npy file ({first_line(err)[:120]}); {RERANK}") from None
    if lambdas.ndim != 2 or not np.issubdtype(lambdas.dtype, np.floating):
        raise PapaError(f"{path} must hold a float [layers, heads] array of λ; it holds {lambdas.dtype} "
                        f"{list(lambdas.shape)}: {RERANK}")
    if not np.isfinite(lambdas).all():
        raise PapaError(f"{path} holds NaN or infinite λ; {RERANK}")
    if ranking is not None:
        layers, heads = lambdas.shape
        outside = [row for row in ranking if not (isinstance(row, list) and len(row) == 2 and all(
            type(x) is int for x in row) and 0 <= row[0] < layers and 0 <= row[1] < heads)]
        if outside or len(ranking) != lambdas.size:
            raise PapaError(f"{path} holds λ of {layers} x {heads} heads, but sorted_heads.json beside it ranks "
                            f"{len(ranking)} heads{f' (among them {outside[0]})' if outside else ''}: both must "
                            f"come from one ranking run; {RERANK}")
    return lambdas
