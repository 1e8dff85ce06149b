"""Command-line arguments of the PAPA scripts, with the original README's spellings.

Training scripts parse `ModelArguments`, `DataArguments` and HF's `TrainingArguments` with
`HfArgumentParser`, so every Trainer flag works. The averaging scripts use `averaging_parser()`
(argparse, like HF's run_glue_no_trainer.py, which they descend from). Booleans accept a bare
flag or a value, and parse honestly: `false`, `False`, `0`, `no` are False.
"""

import argparse
from dataclasses import dataclass, field

from transformers import HfArgumentParser, TrainingArguments

from .errors import PapaError

# transformers 5 renamed this flag; the original commands use the old spelling
RENAMED_FLAGS = {"--evaluation_strategy": "--eval_strategy"}


def modernize_argv(argv):
    """Rewrite renamed flags (`--evaluation_strategy epoch`, `--evaluation_strategy=epoch`)."""
    out = []
    for arg in argv:
        name, eq, value = arg.partition("=")
        out.append(RENAMED_FLAGS.get(name, name) + eq + value if name in RENAMED_FLAGS else arg)
    return out


def str2bool(value):
    if isinstance(value, bool):
        return value
    lowered = value.strip().lower()
    if lowered in ("true", "t", "yes", "y", "1"):
        return True
    if lowered in ("false", "f", "no", "n", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (true/false), got {value!r}")


@dataclass
class ModelArguments:
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "HF model name or folder (BERT or RoBERTa). Default: the bundled all-MiniLM-L6-v2."}
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


def parse_training_args(argv):
    """(ModelArguments, DataArguments, TrainingArguments) from the command line."""
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    try:
        return tuple(parser.parse_args_into_dataclasses(args=modernize_argv(argv)))
    except ValueError as err:  # unknown flags, and TrainingArguments' own consistency checks
        raise PapaError(str(err).strip().splitlines()[0]) from None


def averaging_parser(description):
    """argparse for run_papa_*_avgs_creator.py (the original's run_glue_no_trainer-style flags)."""
    p = argparse.ArgumentParser(description=description)
    flag = lambda name, help: p.add_argument(name, type=str2bool, nargs="?", const=True, default=False, help=help)
    p.add_argument("--model_name_or_path", default=None, help="HF model name or folder. Default: the bundled all-MiniLM-L6-v2.")
    p.add_argument("--task_name", default=None, help="Task (case-insensitive), e.g. cola, sst2, mrpc, ner, repeat.")
    p.add_argument("--data_dir", default=None, help="Folder with the task's files (GLUE TSVs or CoNLL text).")
    p.add_argument("--train_file", default=None, help="Training file (GLUE .tsv/.csv/.json, CoNLL .txt/.conll).")
    p.add_argument("--validation_file", default=None, help="Accepted for compatibility; averaging reads the train split only.")
    p.add_argument("--max_length", type=int, default=128, help="Sequence length T: inputs are padded/truncated to it.")
    p.add_argument("--per_device_train_batch_size", type=int, default=8, help="Batch size per process.")
    p.add_argument("--max_train_samples", type=int, default=None, help="Average over the first N training examples only.")
    p.add_argument("--output_dir", required=True, help="Where avgs.pt, attention_sums.pt and attention_patterns_sums.pt go.")
    p.add_argument("--cache_dir", default=None, help="Where to cache models and datasets from the hub.")
    p.add_argument("--seed", type=int, default=42, help="Random seed (the averages do not depend on it).")
    flag("--use_papa_preprocess", "Use the PAPA layout (first segment from 0, the rest from T/2, separator at T-1).")
    flag("--pad_to_max_length", "Accepted for compatibility: averaging always pads to --max_length.")
    flag("--label_all_tokens", "Accepted for compatibility with the token scripts (no effect on averages).")
    return p
