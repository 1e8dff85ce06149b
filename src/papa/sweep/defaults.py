"""The sweep's defaults: hyper-parameters per task, which k to probe, and the flags it owns."""

import dataclasses
import math

from ..errors import PapaError
from ..method.structured_averaging import CONSTANT_KINDS

# The original README's hyper-parameters (BERT-base, GLUE and CoNLL).
README_DEFAULTS = {
    "max_seq_length": 64,
    "num_train_epochs": 15.0,
    "sort_num_train_epochs": None,  # = num_train_epochs
    "learning_rate": 2e-5,
    "per_device_train_batch_size": 16,
    "per_device_eval_batch_size": 16,
    "avgs_batch_size": 8,
    "evaluation_strategy": "epoch",
}

# The built-in synthetic `repeat` task on the bundled MiniLM, for the README's main command (this
# whole sweep: averages, ranking run, 5 probing runs) to finish well under 15 minutes on a 2-core
# CPU. Measured on that machine: averages 19 s, ranking run 38 s, each probing run 38-42 s, the
# whole sweep 4.3 min; k=0 accuracy 0.888. Contention from other processes easily doubles CPU
# times, hence the margin.
# - T=32: a repeat sentence is at most 15 tokens and a single sentence gets T/2 = 16 positions in
#   the PAPA layout.
# - lr 1e-3, constant: the README's 2e-5 is for 15 epochs; a frozen encoder's probe takes a larger
#   step (the probe alone, on cached MiniLM states: 0.78 / 0.86 / 0.90 after 1 / 2 / 3 epochs).
# - the ranking run (backward pass through the encoder for the λ): 1 epoch.
# - evaluation only at the end of each run; batch 32 for the (gradient-free) averaging pass.
REPEAT_DEFAULTS = {
    "max_seq_length": 32,
    "num_train_epochs": 2.0,
    "sort_num_train_epochs": 1.0,
    "learning_rate": 1e-3,
    "per_device_train_batch_size": 16,
    "per_device_eval_batch_size": 64,
    "avgs_batch_size": 32,
    "evaluation_strategy": "no",
}

# The language-modelling task (papa.data.lm): the probing runs only evaluate (no probe), so their epochs are
# unused; the ranking run trains the λ alone on the LM loss, one epoch at the repeat task's step size.
LM_DEFAULTS = {
    "max_seq_length": 128,
    "num_train_epochs": 1.0,
    "sort_num_train_epochs": 1.0,
    "learning_rate": 1e-3,
    "per_device_train_batch_size": 8,
    "per_device_eval_batch_size": 16,
    "avgs_batch_size": 16,
    "evaluation_strategy": "no",
}

# The retrieval tasks (papa.data.retrieval): examples of thousands of tokens, one per batch; the ranking run trains
# nothing (a decoder ranks by taylor by default), the probing runs only evaluate.
RETRIEVAL_DEFAULTS = dict(LM_DEFAULTS, max_seq_length=2048, per_device_train_batch_size=1,
                          per_device_eval_batch_size=1, avgs_batch_size=1)

# Flags the sweep sets itself per stage; passing them through would break the method.
RESERVED_FLAGS = {
    "--output_dir", "--static_heads_dir", "--sorting_heads_dir", "--static_heads_num", "--sort_calculating",
    "--grad_for_classifier_only", "--grad_for_classifier_and_static_only", "--do_train", "--do_eval",
    "--task_name", "--model_name_or_path", "--use_freeze_extract_pooler", "--use_papa_preprocess",
    "--max_seq_length", "--data_dir", "--train_file", "--validation_file", "--replace_heads_with", "--ranker",
    "--constants", "--sink_tokens", "--window", "--filler", "--retrieval_depths",  # the sweep's own: every stage's
}


def task_defaults(task):
    """The defaults for a task (a papa.data.tasks.TaskSpec): measured quick ones for the built-in task, lm's, else the
    README's."""
    if task.retrieval:
        return RETRIEVAL_DEFAULTS
    if task.kind == "lm":
        return LM_DEFAULTS
    return REPEAT_DEFAULTS if task.quick_sweep else README_DEFAULTS


def default_static_heads_nums(total_heads):
    """0, ½, ⅞, 15⁄16 and all of the heads (rounded half up): 72 → [0, 36, 63, 68, 72]."""
    if isinstance(total_heads, bool) or not isinstance(total_heads, int) or total_heads < 1:
        raise PapaError(f"a model needs at least one attention head; got {total_heads!r}")
    values = [math.floor(total_heads * f + 0.5) for f in (0, 1 / 2, 7 / 8, 15 / 16, 1)]
    return sorted(set(values))


def check_passthrough(extra_args):
    """Passed-through flags must not be ones the sweep sets per stage."""
    for arg in extra_args:
        name = arg.split("=", 1)[0]
        if name in RESERVED_FLAGS:
            raise PapaError(f"{name} cannot be passed through to the training runs: the sweep sets it per stage "
                            "(use the sweep's own flag where there is one)")


# The training runs' flags that also decide what the averaging pass averages (the same data, tokenizer and model
# weights): {field of the parsed ModelArguments / DataArguments: the averaging script's flag}.
AVERAGED_FIELDS = {
    "original_token_types": "--original_token_types", "dataset_name": "--dataset_name",
    "dataset_config_name": "--dataset_config_name", "text_column_name": "--text_column_name",
    "label_column_name": "--label_column_name", "preprocessing_num_workers": "--preprocessing_num_workers",
    "config_name": "--config_name", "tokenizer_name": "--tokenizer_name", "model_revision": "--model_revision",
}


def _default(args, name):
    return next(f.default for f in dataclasses.fields(args) if f.name == name)


def averaging_flags(training_flags):
    """The averaging stage's flags from the training runs' passed-through ones, parsed once (`training_flags`:
    papa.runs.arguments.parse_training_args' three dataclasses), so that it averages what they read: the data,
    tokenizer and model fields of AVERAGED_FIELDS that differ from their defaults, the hub token, a slow tokenizer,
    and `--fp16` / `--bf16` as `--mixed_precision fp16` / `bf16` (the forward's autocast)."""
    model_args, data_args, training_args = training_flags
    flags = []
    for name, flag in AVERAGED_FIELDS.items():
        args = model_args if hasattr(model_args, name) else data_args
        value = getattr(args, name)
        if value != _default(args, name):
            flags += [flag, str(value).lower() if isinstance(value, bool) else str(value)]
    if model_args.use_auth_token:
        flags += ["--use_auth_token", "true"]
    elif model_args.token:
        flags += ["--token", str(model_args.token)]
    if not model_args.use_fast_tokenizer:
        flags += ["--use_slow_tokenizer", "true"]
    precision = "fp16" if training_args.fp16 else "bf16" if training_args.bf16 else None
    return flags + (["--mixed_precision", precision] if precision else [])


def structured_flags(args):
    """The sweep's --constants (and --sink_tokens, --window) as every stage's flags: the averaging stage writes
    those constants, the training runs read them."""
    if not CONSTANT_KINDS[args.constants].structured:
        return []
    flags = ["--constants", args.constants]
    for name in ("sink_tokens", "window"):
        if getattr(args, name) is not None:
            flags += [f"--{name}", str(getattr(args, name))]
    return flags


def retrieval_flags(args):
    """The sweep's --filler and --retrieval_depths as every stage's flags (the retrieval tasks' data)."""
    flags = [] if args.filler == "fixed" else ["--filler", args.filler]
    return flags + (["--retrieval_depths", *map(repr, args.retrieval_depths)] if args.retrieval_depths else [])


def check_data_source(task, data_dir, train_file, dataset_name=None):
    """A task that reads data, given no local files, where the hub is known to be unreachable (HF_HUB_OFFLINE /
    HF_DATASETS_OFFLINE) or cannot help (lm_qnli, lm_mrpc): an error now, with the scripts' own message, before
    any folder is made (its averaging stage would only fail the same way)."""
    from ..data.conll import TOKEN_FLAGS_HINT
    from ..data.glue import DATA_FLAGS_HINT, hub_is_offline
    from ..data.lm import LM_DATA_HINT

    if task.generator is not None or task.retrieval or data_dir or train_file:
        return
    if task.kind == "lm" and task.glue_folder is not None:  # never from the hub (papa.data.lm)
        raise PapaError(f"{task.name} reads the sentences of GLUE's {task.glue_folder} TSVs: pass --data_dir (that "
                        f"folder, or a root holding it, e.g. ../shared/data)")
    if not hub_is_offline():
        return
    hint = {"sequence": DATA_FLAGS_HINT, "token": TOKEN_FLAGS_HINT, "lm": LM_DATA_HINT}[task.kind]
    via = " (--dataset_name needs it)" if dataset_name else ""
    raise PapaError(f"no local data for {task.name} and the hub is offline (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE)"
                    f"{via}; {hint}")


def epilog():
    """The sweep's --help epilog: what 'task default' means."""
    readme, quick = README_DEFAULTS, REPEAT_DEFAULTS
    return (f"'Task default': the original README's settings for GLUE/CoNLL tasks (T={readme['max_seq_length']}, "
            f"{readme['num_train_epochs']:g} epochs, lr {readme['learning_rate']:g} constant, batch "
            f"{readme['per_device_train_batch_size']}); quick measured settings for the built-in repeat task "
            f"(T={quick['max_seq_length']}, {quick['num_train_epochs']:g} epochs, ranking run "
            f"{quick['sort_num_train_epochs']:g} epoch, lr {quick['learning_rate']:g} constant, batch "
            f"{quick['per_device_train_batch_size']}).")


# controls that read or train full constant matrices (avgs.pt, mean_outputs.pt), which structured constants replace
FULL_CONSTANT_CONTROLS = ("uniform", "mean_output", "trained_constant")


def constants_file(constants):
    """The averaging stage's artifact for --constants: avgs.pt, or structured_constants.pt."""
    return CONSTANT_KINDS[constants].file


def check_structured_controls(plan):
    """Structured constants go with the orderings and the controls that read no constants, not with these."""
    clash = [c for c in plan.controls if c in FULL_CONSTANT_CONTROLS]
    if plan.constants_file != "avgs.pt" and clash:
        raise PapaError(f"--constants (structured constants) does not go with the {', '.join(clash)} control(s), which "
                        "use full constant matrices: drop them, or run with --constants full")
