"""The scripts' `--constants toeplitz | sink_window`: a decoder's structured constants (papa/families/structured.py),
written by the averaging script as structured_constants.pt and read by the probing runs at any length."""

import os

from ..console import stage
from ..errors import PapaError
from ..families import family_for
from ..method.attention import load_structured
from ..method.structured_averaging import (CONSTANT_KINDS, STRUCTURED_NAME, StructuredAverager, read_structured,
                                           save_structured, sink_window)

DEFAULT_WINDOW = 64


def check_structured_flags(args):
    """The averaging script's extra records go with full averages only (the structured flags themselves:
    papa.runs.flag_groups.StructuredFlags)."""
    extra = "--mean_outputs" if args.mean_outputs else "--mean_corrections" if args.mean_corrections else None
    if extra and CONSTANT_KINDS[args.constants].structured:
        raise PapaError(f"{extra} records head outputs beside full averages; drop it with --constants {args.constants}")


def check_decoder(config, constants):
    if not family_for(config).causal:
        raise PapaError(f"--constants {constants} builds a causal decoder's constants; this {config.model_type} model "
                        "is an encoder: use --constants full")


def structured_averager(args, config, device):
    """The averaging pass's averager for --constants toeplitz (None for full)."""
    if not CONSTANT_KINDS[args.constants].structured:
        return None
    check_decoder(config, args.constants)
    return StructuredAverager(config.num_hidden_layers, config.num_attention_heads, args.max_length,
                              args.sink_tokens or CONSTANT_KINDS["toeplitz"].default_sinks, device)


def write_sink_window(args, config):
    """--constants sink_window: StreamingLLM's constants, from the flags alone."""
    check_decoder(config, "sink_window")
    sink, profile = sink_window(config.num_hidden_layers, config.num_attention_heads,
                                args.sink_tokens or CONSTANT_KINDS["sink_window"].default_sinks, args.window or DEFAULT_WINDOW)
    path = os.path.join(args.output_dir, STRUCTURED_NAME)
    save_structured(path, sink, profile, "sink_window", args.max_length, 0)
    stage(f"wrote {STRUCTURED_NAME} (sink_window: {sink.shape[-1]} sink tokens, window {profile.shape[-1]}) to "
          f"{args.output_dir}")


def within_reach(profile, window):
    """A profile (…, D) cut to its first `window` distances (None: as it is): a constant head's reach, so its cache
    holds the sink and window − 1 positions (papa/families/generation.py); norm(C·P) renormalises each row over what
    remains."""
    return profile if window is None else profile[..., :window].contiguous()


def write_toeplitz(args, averager):
    sink, profile = averager.constants()
    profile = within_reach(profile, args.window)
    save_structured(os.path.join(args.output_dir, STRUCTURED_NAME), sink, profile, "toeplitz", args.max_length,
                    averager.num_examples)
    stage(f"wrote {STRUCTURED_NAME} (toeplitz: sink [{', '.join(map(str, sink.shape))}], profile "
          f"[{', '.join(map(str, profile.shape))}]) from {averager.num_examples} examples to {args.output_dir}")


def run_constants(model_args, config):
    """(sink, profile) for a probing run with --constants toeplitz / sink_window, else None."""
    if not CONSTANT_KINDS[model_args.constants].structured or not model_args.static_heads_dir:
        return None
    check_decoder(config, model_args.constants)
    path = os.path.join(model_args.static_heads_dir, STRUCTURED_NAME)
    kind = read_structured(path)["kind"]
    if kind != model_args.constants:
        raise PapaError(f"{path} holds {kind} constants, not {model_args.constants}: pass --constants {kind}, or "
                        f"rerun the averaging script with --constants {model_args.constants}")
    sink, profile = load_structured(path, config.num_hidden_layers, config.num_attention_heads)
    if CONSTANT_KINDS[kind].averaged:  # toeplitz: a profile of the data, cut to --window
        profile = within_reach(profile, model_args.window)
    elif model_args.window is not None and model_args.window != profile.shape[-1]:
        raise PapaError(f"{path} holds sink_window constants of window {profile.shape[-1]}, not {model_args.window}: "
                        f"pass --window {profile.shape[-1]}, or rerun the averaging script with --window "
                        f"{model_args.window}")
    return sink, profile
