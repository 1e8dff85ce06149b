"""What a probing run replaces its heads with, read and checked against its flags: avgs.pt's constant matrices,
mean outputs, zero outputs, first-token matrices, mean-corrected constants, best_of's per-head choice or structured
constants, and which heads (the first k of sorted_heads.json)."""

from typing import NamedTuple

import torch

from ..errors import PapaError
from ..method.ablations import first_token_matrices, zero_outputs
from ..method.best_of import best_of_pair, check_best_of_inputs
from ..method.attention import head_dim, load_constant_matrices, load_mean_outputs, load_output_corrections
from ..method.ranking import check_static_heads_num, first_k_heads, load_sorted_heads
from .structured_constants import run_constants

# what the replaced heads read from --static_heads_dir, per --replace_heads_with (None: built here,
# papa.method.ablations, from the model's shape and --max_seq_length)
REPLACEMENT_FILES = {"constant": "avgs.pt", "mean_output": "mean_outputs.pt", "zero_output": None,
                     "first_token": None, "mean_corrected": "avgs.pt", "best_of": "avgs.pt"}


class HeadReplacement(NamedTuple):
    """What a probing run replaces heads with (at most one of the three), and which heads."""

    constant_matrices: torch.Tensor | None  # avgs.pt [L, H, T, T]
    mean_outputs: torch.Tensor | None  # mean_outputs.pt [L, H, T, d], with --replace_heads_with mean_output
    static_heads: dict  # {layer: [heads]}
    mix_all_heads: bool  # the ranking run
    output_corrections: torch.Tensor | None = None  # output_corrections.pt [L, H, T, d], with mean_corrected
    structured: tuple | None = None  # --constants toeplitz / sink_window: (sink [L, H, S], profile [L, H, D])

    @property
    def loaded(self):
        """The tensor read from --static_heads_dir, or None."""
        return self.mean_outputs if self.mean_outputs is not None else self.constant_matrices


def load_replacements(model_args, config, static_heads, seq_len):
    """A HeadReplacement of `static_heads` with avgs.pt or, per --replace_heads_with, mean_outputs.pt, zero outputs
    or first-token matrices (of length `seq_len`)."""
    shape = (config.num_hidden_layers, config.num_attention_heads)
    if model_args.replace_heads_with == "zero_output":
        return HeadReplacement(None, zero_outputs(*shape, seq_len, head_dim(config)), static_heads, False)
    if model_args.replace_heads_with == "first_token":
        return HeadReplacement(first_token_matrices(*shape, seq_len), None, static_heads, False)
    if model_args.replace_heads_with == "mean_output":
        means = load_mean_outputs(model_args.static_heads_dir, *shape, head_dim(config))
        return HeadReplacement(None, means, static_heads, False)
    if model_args.replace_heads_with == "best_of" and static_heads:  # the choice in the ranking folder's best_of.csv
        constants, corrections = best_of_pair(model_args.static_heads_dir, model_args.sorting_heads_dir, *shape,
                                              head_dim(config))
        return HeadReplacement(constants, None, static_heads, False, corrections)
    if model_args.replace_heads_with == "mean_corrected":
        constants = load_constant_matrices(model_args.static_heads_dir, *shape)
        corrections = load_output_corrections(model_args.static_heads_dir, *shape, head_dim(config),
                                              seq_len=constants.shape[2])
        return HeadReplacement(constants, None, static_heads, False, corrections)
    structured = run_constants(model_args, config)
    if structured is not None:
        return HeadReplacement(None, None, static_heads, False, structured=structured)
    return HeadReplacement(load_constant_matrices(model_args.static_heads_dir, *shape), None, static_heads, False)


def heads_to_replace(model_args, config, seq_len):
    """The run's HeadReplacement, validated against its flags; `seq_len`: --max_seq_length."""
    num_layers, num_heads = config.num_hidden_layers, config.num_attention_heads
    k = model_args.static_heads_num
    check_static_heads_num(k, num_layers, num_heads)  # before anything else: k < 0 must not pass as "no heads"
    mode = model_args.replace_heads_with
    if model_args.best_of and not model_args.sort_calculating:
        raise PapaError("--best_of makes its choice in the ranking run: add --sort_calculating True (a probing run "
                        "reads the choice with --replace_heads_with best_of)")
    if model_args.best_of and model_args.static_heads_dir:
        check_best_of_inputs(model_args.static_heads_dir)
    static_only = model_args.grad_for_classifier_and_static_only and mode not in ("constant", "mean_output")
    if mode != "constant" and (model_args.sort_calculating or static_only):
        flag = "--sort_calculating" if model_args.sort_calculating else "--grad_for_classifier_and_static_only"
        raise PapaError(f"{flag} works on the averages' constant matrices (or trains mean outputs); drop it or "
                        f"--replace_heads_with {mode}")
    if model_args.sort_calculating:
        if not model_args.static_heads_dir:
            raise PapaError("--sort_calculating needs --static_heads_dir (the folder holding avgs.pt)")
        if k:
            raise PapaError("--sort_calculating mixes every head; drop --static_heads_num")
        structured = run_constants(model_args, config)
        constants = None if structured else load_constant_matrices(model_args.static_heads_dir, num_layers, num_heads)
        return HeadReplacement(constants, None, {}, True, structured=structured)
    reads_file = REPLACEMENT_FILES[mode] is not None
    needed = ("--static_heads_dir", "--sorting_heads_dir") if reads_file else ("--sorting_heads_dir",)
    missing = [f for f in needed if not getattr(model_args, f[2:])]
    if k > 0 and missing:
        raise PapaError(f"--static_heads_num {k} needs {' and '.join(missing)} "
                        f"({' and '.join(f for f in (REPLACEMENT_FILES[mode], 'sorted_heads.json') if f)})")
    if reads_file and not model_args.static_heads_dir:
        return HeadReplacement(None, None, {}, False)
    static = {}
    if k > 0:
        ranking = load_sorted_heads(model_args.sorting_heads_dir, num_layers, num_heads)
        static = first_k_heads(ranking, k, num_layers, num_heads)
    return load_replacements(model_args, config, static, seq_len)


def check_heads_setup(constants, mix, mode, max_seq_length, do_train, name="avgs.pt"):
    """The constant matrices (or mean outputs, `name`) fit T, and the training mode fits what is being replaced."""
    if constants is not None and constants.shape[2] != max_seq_length:
        raise PapaError(f"{name} was computed at length {constants.shape[2]} but --max_seq_length is "
                        f"{max_seq_length}; use --max_seq_length {constants.shape[2]} or recompute {name}")
    if mix and not do_train:
        raise PapaError("--sort_calculating ranks heads by training their mixing weights: add --do_train")
    if mode == "grad_for_classifier_and_static_only" and constants is None:
        raise PapaError("--grad_for_classifier_and_static_only trains constant matrices: pass --static_heads_dir")
