"""Command-line arguments of the PAPA commands, with the original README's spellings.

Every command parses dataclasses with HF's `HfArgumentParser`: the training scripts
`ModelArguments`, `DataArguments` and HF's `TrainingArguments` (so every Trainer flag works), the
averaging scripts `AveragingArguments`, the sweep `SweepArguments`. Booleans accept a bare flag or
a value, and parse honestly: `false`, `False`, `0`, `no` are False. Each dataclass checks its own
values in `__post_init__`; a bad flag or value is a `PapaError` (one `error:` line), not argparse's
usage dump.
"""

import argparse
from dataclasses import dataclass, field
from typing import Literal

from transformers import HfArgumentParser, TrainingArguments

from .errors import PapaError, check_positive
from .modeling import training_mode

# the sweep's control runs (papa.sweep.controls)
SWEEP_CONTROLS = ("uniform", "random_order", "mean_output")

# transformers 5 renamed this flag; the original commands use the old spelling
RENAMED_FLAGS = {"--evaluation_strategy": "--eval_strategy"}


def modernize_argv(argv):
    """Rewrite renamed flags (`--evaluation_strategy epoch`, `--evaluation_strategy=epoch`)."""
    out = []
    for arg in argv:
        name, eq, value = arg.partition("=")
        out.append(RENAMED_FLAGS.get(name, name) + eq + value if name in RENAMED_FLAGS else arg)
    return out


@dataclass
class ModelArguments:
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "HF model name or folder (any supported family: BERT, RoBERTa, XLM-R, CamemBERT, ELECTRA, DeBERTa v1/v2/v3, ModernBERT). Default: the bundled all-MiniLM-L6-v2."}
    )
    cache_dir: str | None = field(default=None, metadata={"help": "Where to cache models and datasets from the hub."})
    use_freeze_extract_pooler: bool = field(
        default=False, metadata={"help": "Probe every hidden state with the original freeze-extract head (pads inputs to max length)."}
    )
    grad_for_classifier_only: bool = field(
        default=False, metadata={"help": "Train only the probe (pooler + classifier); the encoder stays frozen."}
    )
    grad_for_classifier_and_static_only: bool = field(
        default=False, metadata={"help": "Train the probe and the constant matrices; the rest stays frozen."}
    )
    sort_calculating: bool = field(
        default=False,
        metadata={"help": "Head-ranking run: every head mixes dynamic and constant attention with a trained weight; "
                          "writes lambdas.npy and sorted_heads.json. Needs --static_heads_dir."},
    )
    static_heads_dir: str | None = field(
        default=None, metadata={"help": "Folder holding avgs.pt (the output_dir of the averaging script)."}
    )
    sorting_heads_dir: str | None = field(
        default=None, metadata={"help": "Folder holding sorted_heads.json (the output_dir of the sorting run)."}
    )
    static_heads_num: int = field(
        default=0, metadata={"help": "How many heads (first rows of sorted_heads.json) to replace by constant matrices."}
    )
    replace_heads_with: Literal["constant", "mean_output"] = field(
        default="constant", metadata={"help": "What the replaced heads do: attend with their constant matrix (avgs.pt, "
                                              "PAPA) or output their training-set mean (mean_outputs.pt in "
                                              "--static_heads_dir, the mean-ablation control)."}
    )

    def __post_init__(self):
        training_mode(self.sort_calculating, self.grad_for_classifier_only, self.grad_for_classifier_and_static_only)


@dataclass
class DataArguments:
    task_name: str | None = field(default=None, metadata={"help": "Task (case-insensitive), e.g. cola, sst2, mrpc, ner, repeat."})
    data_dir: str | None = field(
        default=None, metadata={"help": "Folder with the task's files (GLUE: train.tsv, dev.tsv; CoNLL: train.txt, valid.txt)."}
    )
    train_file: str | None = field(default=None, metadata={"help": "Training file (GLUE .tsv/.csv/.json, CoNLL .txt/.conll)."})
    validation_file: str | None = field(default=None, metadata={"help": "Validation file, same formats as --train_file."})
    max_seq_length: int = field(default=128, metadata={"help": "Sequence length T after tokenisation (the T of avgs.pt)."})
    pad_to_max_length: bool = field(
        default=False,
        metadata={"help": "Pad every input to max_seq_length (always on with constant matrices or the freeze-extract pooler)."},
    )
    use_papa_preprocess: bool = field(
        default=False, metadata={"help": "Use the PAPA layout: first segment from position 0, the rest from T/2, separator at T-1."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training examples."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only the first N validation examples."})
    overwrite_cache: bool = field(default=False, metadata={"help": "Re-run tokenisation instead of using the datasets cache."})
    label_all_tokens: bool = field(
        default=False, metadata={"help": "Token tasks: label every sub-token (B- becomes I-), not only each word's first."}
    )
    return_entity_level_metrics: bool = field(
        default=False, metadata={"help": "Token tasks: also report precision/recall/f1 per entity type."}
    )

    def __post_init__(self):
        for flag in ("max_seq_length", "max_train_samples", "max_eval_samples"):
            check_positive(getattr(self, flag), f"--{flag}")


@dataclass
class AveragingArguments:
    """run_papa_*_avgs_creator.py: the flags of the original's run_glue_no_trainer-style script."""

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "HF model name or folder. Default: the bundled all-MiniLM-L6-v2."})
    task_name: str | None = field(default=None, metadata={"help": "Task (case-insensitive), e.g. cola, sst2, mrpc, ner, repeat."})
    data_dir: str | None = field(default=None, metadata={"help": "Folder with the task's files (GLUE TSVs or CoNLL text)."})
    train_file: str | None = field(default=None, metadata={"help": "Training file (GLUE .tsv/.csv/.json, CoNLL .txt/.conll)."})
    validation_file: str | None = field(
        default=None, metadata={"help": "Accepted for compatibility; averaging reads the train split only."})
    max_length: int = field(default=128, metadata={"help": "Sequence length T: inputs are padded/truncated to it."})
    per_device_train_batch_size: int = field(default=8, metadata={"help": "Batch size per process."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Average over the first N training examples only."})
    output_dir: str | None = field(
        default=None, metadata={"help": "Where avgs.pt, attention_sums.pt and attention_patterns_sums.pt go (required)."})
    cache_dir: str | None = field(default=None, metadata={"help": "Where to cache models and datasets from the hub."})
    seed: int = field(default=42, metadata={"help": "Random seed (the averages do not depend on it)."})
    use_papa_preprocess: bool = field(
        default=False, metadata={"help": "Use the PAPA layout (first segment from 0, the rest from T/2, separator at T-1)."})
    pad_to_max_length: bool = field(
        default=False, metadata={"help": "Accepted for compatibility: averaging always pads to --max_length."})
    label_all_tokens: bool = field(
        default=False, metadata={"help": "Accepted for compatibility with the token scripts (no effect on averages)."})
    mean_outputs: bool = field(default=False, metadata={
        "help": "Also write mean_outputs.pt: each head's mean output per position (for --replace_heads_with mean_output)."})

    def __post_init__(self):
        if not self.output_dir:
            raise PapaError("--output_dir is required (the folder avgs.pt goes to)")
        for flag in ("max_length", "per_device_train_batch_size", "max_train_samples"):
            check_positive(getattr(self, flag), f"--{flag}")


@dataclass
class SweepArguments:
    """papa-sweep / run_papa_sweep.py. None means the task's default (papa.sweep.defaults)."""

    # one value, or several: a grid of every model x task (task_names / model_names list them either way)
    model_name_or_path: str | None = field(default=None, metadata={
        "nargs": "+", "help": "Encoder(s) of any supported family (hub name or folder); several run a grid. "
                              "Default: the bundled all-MiniLM-L6-v2 (6 x 12 heads)."})
    task_name: str = field(default="repeat", metadata={
        "nargs": "+", "help": "GLUE task (cola sst2 mrpc qqp stsb mnli qnli rte wnli), token task (ner pos chunk), "
                              "or the built-in synthetic 'repeat' (default; needs no data); several run a grid."})
    data_dir: str | None = field(default=None, metadata={
        "help": "Folder with the task's files (GLUE train.tsv/dev.tsv, CoNLL train.txt/valid.txt), or a root holding "
                "one folder per task under its official name (CoLA, SST-2, ..., conll2003), directly or one level "
                "down (e.g. ../shared/data)."})
    controls: list[str] | None = field(default=None, metadata={
        "choices": SWEEP_CONTROLS, "help": "Control runs beside PAPA at the same k: uniform (constant heads attend "
                                           "equally to every real token), random_order (heads taken in a seeded "
                                           "random order, not the ranking), mean_output (heads output their "
                                           "training-set mean)."})
    train_file: str | None = field(default=None, metadata={"help": "Training file, passed to every stage."})
    validation_file: str | None = field(default=None, metadata={"help": "Validation file, passed to the training runs."})
    output_dir: str | None = field(default=None, metadata={
        "help": "Where the stages and results go. Default: outputs/papa_sweep_<task>."})
    static_heads_nums: list[int] | None = field(default=None, metadata={
        "help": "Numbers of constant heads to probe. Default: 0, 1/2, 7/8, 15/16 and all of the model's heads "
                "(0 36 63 68 72 for MiniLM, 0 72 126 135 144 for BERT-base).", "metavar": "K"})
    num_train_epochs: float | None = field(default=None, metadata={"help": "Epochs of each probing run (task default)."})
    sort_num_train_epochs: float | None = field(default=None, metadata={
        "help": "Epochs of the ranking run (default: 1 for repeat, --num_train_epochs for other tasks)."})
    learning_rate: float | None = field(default=None, metadata={
        "help": "Learning rate (constant schedule) of the training runs (task default)."})
    per_device_train_batch_size: int | None = field(default=None, metadata={"help": "Training batch size (task default)."})
    max_seq_length: int | None = field(default=None, metadata={
        "help": "Sequence length T of avgs.pt and of every run (task default)."})
    max_train_samples: int | None = field(default=None, metadata={
        "help": "Use only the first N training examples (for the averages too)."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Evaluate on the first N validation examples only."})
    seed: int = field(default=42, metadata={"help": "Random seed of every stage."})
    cache_dir: str | None = field(default=None, metadata={"help": "Hub cache folder, passed to every stage."})
    extra_args: str = field(default="", metadata={
        "help": "More flags for the training runs, as one string: --extra_args=\"--weight_decay 0.01\" (with '='). "
                "Flags the sweep does not know are passed the same way, after its own, so they override its defaults."})
    verbose: bool = field(default=False, metadata={
        "help": "Also show each stage's full output (it always goes to <stage>/log.txt)."})

    def __post_init__(self):
        for flag in ("num_train_epochs", "sort_num_train_epochs", "learning_rate", "per_device_train_batch_size",
                     "max_seq_length", "max_train_samples", "max_eval_samples"):
            check_positive(getattr(self, flag), f"--{flag}")
        if self.static_heads_nums is not None and not self.static_heads_nums:
            raise PapaError("--static_heads_nums needs at least one value")
        # a single value stays a plain string, as before the grid existed
        for name in ("task_name", "model_name_or_path"):
            value = getattr(self, name)
            if isinstance(value, (list, tuple)):
                setattr(self, name, value[0] if len(value) == 1 else list(dict.fromkeys(value)))
        self.controls = list(dict.fromkeys(self.controls or []))

    @property
    def task_names(self):
        return [self.task_name] if isinstance(self.task_name, str) else list(self.task_name)

    @property
    def model_names(self):
        """The models asked for; [None] means the bundled MiniLM."""
        return list(self.model_name_or_path) if isinstance(self.model_name_or_path, list) else [self.model_name_or_path]


def parse_dataclasses(types, argv, remaining=False, **parser_kwargs):
    """`HfArgumentParser(types).parse_args_into_dataclasses(argv)`, bad flags and values as a PapaError.

    With `remaining`, flags no dataclass knows are returned (last) instead of being an error.
    """
    parser = HfArgumentParser(types, exit_on_error=False, **parser_kwargs)
    try:
        return tuple(parser.parse_args_into_dataclasses(args=list(argv), return_remaining_strings=remaining))
    except argparse.ArgumentError as err:  # a bad value, or a flag without its value
        raise PapaError(str(err)) from None
    except ValueError as err:  # unknown flags, and TrainingArguments' own consistency checks
        raise PapaError(str(err).strip().splitlines()[0]) from None


def parse_training_args(argv):
    """(ModelArguments, DataArguments, TrainingArguments) from the command line (old flag names accepted)."""
    return parse_dataclasses((ModelArguments, DataArguments, TrainingArguments), modernize_argv(argv))


def parse_averaging_args(argv):
    """AveragingArguments from the command line."""
    return parse_dataclasses(AveragingArguments, argv)[0]


def parse_sweep_args(argv, **parser_kwargs):
    """(SweepArguments, the flags it does not know: for the training runs)."""
    args, passthrough = parse_dataclasses(SweepArguments, argv, remaining=True, allow_abbrev=False, **parser_kwargs)
    if passthrough and not passthrough[0].startswith("-"):
        raise PapaError(f"unexpected argument {passthrough[0]!r} (flags the sweep does not know must start with --)")
    return args, passthrough
