"""The averaging scripts' arguments (run_papa_*_avgs_creator.py, papa.cli.glue_avgs / ner_avgs): the flags of
the original's run_glue_no_trainer-style script, parsed as every command's are (papa.runs.arguments)."""

from dataclasses import dataclass, field
from typing import Literal

from ..errors import PapaError, check_positive, check_seed, check_writable_folder
from .arguments import (COLUMN_HELP, DATASET_HELP, ORIGINAL_TYPES_HELP, REVISION_HELP, TASK_HELP, TOKEN_HELP,
                        TRAIN_FILE_HELP, USE_AUTH_TOKEN_HELP, check_model_paths)
from .command_line import parse_dataclasses
from .flag_groups import RetrievalFlags, StructuredFlags
from .structured_constants import check_structured_flags


@dataclass
class AveragingArguments(StructuredFlags, RetrievalFlags):
    """run_papa_*_avgs_creator.py: the flags of the original's run_glue_no_trainer-style script."""

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "HF model name or folder, a .gguf file, or `smollm2`, `gemma3` (the bundled "
                                        "decoders). "
                                        "Default: the bundled all-MiniLM-L6-v2."})
    config_name: str | None = field(default=None, metadata={"help": "Config name or folder, if not the model's."})
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer name or folder, if not the model's."})
    use_slow_tokenizer: bool = field(default=False, metadata={"help": "Sequence tasks: a slow (Python) tokenizer."})
    model_revision: str = field(default="main", metadata={"help": REVISION_HELP})
    token: str | None = field(default=None, metadata={"help": TOKEN_HELP})
    use_auth_token: bool = field(default=False, metadata={"help": USE_AUTH_TOKEN_HELP})
    model_type: str | None = field(default=None, metadata={
        "help": "Without --model_name_or_path: average an untrained model of this type (needs --tokenizer_name)."})
    task_name: str | None = field(default=None, metadata={"help": TASK_HELP})
    data_dir: str | None = field(default=None, metadata={"help": "Folder with the task's files (GLUE TSVs or CoNLL text)."})
    dataset_name: str | None = field(default=None, metadata={"help": DATASET_HELP})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Configuration of --dataset_name."})
    train_file: str | None = field(default=None, metadata={"help": TRAIN_FILE_HELP})
    validation_file: str | None = field(
        default=None, metadata={"help": "Accepted for compatibility; averaging reads the train split only."})
    text_column_name: str | None = field(default=None, metadata={"help": COLUMN_HELP.format("word lists", "tokens, else the first")})
    label_column_name: str | None = field(default=None, metadata={
        "help": COLUMN_HELP.format("tag lists", "<task>_tags, else the second")})
    max_length: int = field(default=128, metadata={"help": "Sequence length T: inputs are padded/truncated to it."})
    per_device_train_batch_size: int = field(default=8, metadata={"help": "Batch size per process."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Average over the first N training examples only."})
    debug: bool = field(default=False, metadata={"help": "Use only the first 100 examples of each split (as the original)."})
    output_dir: str | None = field(
        default=None, metadata={"help": "Where avgs.pt, attention_sums.pt, attention_patterns_sums.pt and avgs_info.json go (required)."})
    cache_dir: str | None = field(default=None, metadata={"help": "Where to cache models and datasets from the hub."})
    seed: int = field(default=42, metadata={"help": "Random seed (the averages do not depend on it)."})
    use_papa_preprocess: bool = field(
        default=False, metadata={"help": "Use the PAPA layout (first segment from 0, the rest from T/2, separator at T-1)."})
    original_token_types: bool = field(default=False, metadata={"help": ORIGINAL_TYPES_HELP})
    pad_to_max_length: bool = field(
        default=False, metadata={"help": "Accepted for compatibility: averaging always pads to --max_length."})
    label_all_tokens: bool = field(
        default=False, metadata={"help": "Accepted for compatibility with the token scripts (no effect on averages)."})
    return_entity_level_metrics: bool = field(
        default=False, metadata={"help": "Accepted for compatibility with the token scripts (no effect on averages)."})
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes that tokenise the data."})
    mean_outputs: bool = field(default=False, metadata={
        "help": "Also write mean_outputs.pt: each head's mean output per position (for --replace_heads_with mean_output)."})
    mean_corrections: bool = field(default=False, metadata={
        "help": "Also write mean_outputs.pt, mean_values.pt and output_corrections.pt (E[A V] - A_avg E[V] per head "
                "and position, for --replace_heads_with mean_corrected)."})
    mixed_precision: str = field(default="no", metadata={
        "help": "Run the forward under autocast in fp16 or bf16 (as the original's accelerate --mixed_precision); "
                "the sums are still accumulated in float64. One of: no, fp16, bf16."})

    def __post_init__(self):
        check_model_paths(self)
        if not self.output_dir:
            raise PapaError("--output_dir is required (the folder avgs.pt goes to)")
        if self.use_auth_token and self.token is None:
            self.token = True  # huggingface_hub: True = the stored token
        self.check_structured()
        check_structured_flags(self)
        if self.mixed_precision not in MIXED_PRECISIONS:
            raise PapaError(f"--mixed_precision must be one of {', '.join(MIXED_PRECISIONS)}; got {self.mixed_precision!r}")
        for flag in ("max_length", "per_device_train_batch_size", "max_train_samples", "preprocessing_num_workers"):
            check_positive(getattr(self, flag), f"--{flag}")
        check_seed(self.seed, "--seed")
        check_writable_folder(self.output_dir, "--output_dir")  # now, not after the averaging pass


MIXED_PRECISIONS = ("no", "fp16", "bf16")

NO_EFFECT = "Accepted for compatibility, no effect: the original parsed it for its training loop, which never ran."


def _no_effect(default, help=NO_EFFECT):
    return field(default=default, metadata={"help": help})


@dataclass
class UnusedAveragingArguments:
    """The original averaging scripts were HF's no-trainer training scripts with the training loop replaced by the
    averaging pass: they still parsed these flags. Accepted so their command lines run; none changes the averages."""

    per_device_eval_batch_size: int = _no_effect(8)
    learning_rate: float = _no_effect(5e-5)
    weight_decay: float = _no_effect(0.0)
    num_train_epochs: int = _no_effect(3)
    max_train_steps: int | None = _no_effect(None)
    gradient_accumulation_steps: int = _no_effect(1)
    lr_scheduler_type: str = _no_effect("linear")
    num_warmup_steps: int = _no_effect(0)
    sort_output_dir: str | None = _no_effect(None, "Accepted for compatibility, no effect (the original never used it).")
    hub_model_id: str | None = _no_effect(None, "Accepted for compatibility, no effect (only --push_to_hub used it).")
    hub_token: str | None = _no_effect(None, "Accepted for compatibility, no effect (only --push_to_hub used it).")
    push_to_hub: bool = field(default=False, metadata={
        "help": "Not supported: the original cloned the hub repository but pushed nothing; upload --output_dir "
                "yourself (hf upload)."})

    def __post_init__(self):
        if self.push_to_hub:
            raise PapaError("--push_to_hub is not supported by the averaging scripts (the original cloned the hub "
                            "repository but never pushed to it); drop it and upload --output_dir with `hf upload`")


def parse_averaging_args(argv):
    """AveragingArguments from the command line (the original's training-loop flags accepted, without effect)."""
    return parse_dataclasses((AveragingArguments, UnusedAveragingArguments), argv)[0]
