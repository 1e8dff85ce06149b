"""Command-line arguments of the PAPA commands, with the original README's spellings.

Every command parses dataclasses with HF's `HfArgumentParser`: the training scripts
`ModelArguments`, `DataArguments` and HF's `TrainingArguments` (so every Trainer flag works), the
averaging scripts `AveragingArguments` (papa/runs/averaging_arguments.py), the sweep `SweepArguments` (papa/sweep/arguments.py). Booleans accept a bare flag or
a value, and parse honestly: `false`, `False`, `0`, `no` are False. Each dataclass checks its own
values in `__post_init__`; a bad flag or value is a `PapaError` (one `error:` line), not argparse's
usage dump. As in HF's example scripts, a single argument ending in `.json` is a file of arguments
(`{"task_name": "cola", "do_train": true, ...}`).
"""

from dataclasses import dataclass, field
from typing import Literal

from transformers import TrainingArguments

from ..errors import PapaError, check_positive, check_seed, check_writable_folder
from .flag_groups import LmEvalFlags, RankingFlags, RetrievalFlags, StructuredFlags
from .command_line import RENAMED_FLAGS, json_to_argv, modernize_argv, parse_dataclasses  # noqa: F401  (public)
from ..models.bundled import check_model_path
from ..models.modeling import training_mode
from ..method.rankers import PAPER, RANKERS, with_distill_signal, without_distill_signal
from ..method.structured_averaging import CONSTANT_KINDS

# the sweep's control runs (papa.sweep.controls)
SWEEP_CONTROLS = ("uniform", "random_order", "mean_output", "zero_output", "first_token", "trained_constant",
                  "mean_corrected", "optimal_output", "best_of")

REVISION_HELP = "Model version on the hub: a branch name, tag name or commit id."
TOKEN_HELP = "Hub token for private models or datasets (default: the one `hf auth login` stored, if any)."
USE_AUTH_TOKEN_HELP = "transformers 4's flag: use the token `hf auth login` stored (now --token)."


def check_model_paths(args):
    """A model, config or tokenizer named by a path that leads nowhere: said first, before any other check."""
    for flag in ("model_name_or_path", "config_name", "tokenizer_name"):
        check_model_path(getattr(args, flag), f"--{flag}")


@dataclass
class ModelArguments(RankingFlags, StructuredFlags):
    model_name_or_path: str | None = field(default=None, metadata={
        "help": "HF model name or folder, of any supported family: the encoders BERT, RoBERTa, XLM-R, CamemBERT, "
                "ELECTRA, DeBERTa v1/v2/v3, ModernBERT and the decoders GPT-2, Llama, Mistral, Qwen2, Qwen3, Gemma2, "
                "Gemma3 (text), Granite, SmolLM3; or a .gguf file (converted once, papa.models.gguf), or `smollm2`, `gemma3` (the "
                "bundled SmolLM2-135M-Instruct, Gemma-3-270M). Default: the bundled all-MiniLM-L6-v2."})
    config_name: str | None = field(default=None, metadata={"help": "Config name or folder, if not the model's."})
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer name or folder, if not the model's."})
    cache_dir: str | None = field(default=None, metadata={"help": "Where to cache models and datasets from the hub."})
    use_fast_tokenizer: bool = field(
        default=True, metadata={"help": "Use a fast (tokenizers) tokenizer; token tasks need one (word_ids)."})
    model_revision: str = field(default="main", metadata={"help": REVISION_HELP})
    token: str | None = field(default=None, metadata={"help": TOKEN_HELP})
    use_auth_token: bool = field(default=False, metadata={"help": USE_AUTH_TOKEN_HELP})
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
    replace_heads_with: Literal["constant", "mean_output", "zero_output", "first_token", "mean_corrected",
                                "best_of"] = field(
        default="constant", metadata={"help": "What the replaced heads do: attend with their constant matrix (avgs.pt, "
                                              "PAPA); output their training-set mean (mean_outputs.pt in "
                                              "--static_heads_dir, mean ablation); output 0 (zero ablation); or "
                                              "attend only to the first token (the attention sink), which two "
                                              "read no file; or mean_corrected: attend with the constant matrix "
                                              "and add E[A V] - A_avg E[V] (output_corrections.pt in "
                                              "--static_heads_dir); or best_of: per head the one of constant, "
                                              "mean_output and mean_corrected chosen on the ranking data "
                                              "(best_of.csv in --sorting_heads_dir, the ranking run's --best_of)."}
    )

    ranker: str = field(
        default=PAPER, metadata={"choices": tuple(RANKERS), "help": "With --sort_calculating, how the heads are ranked (papa.method.rankers): "
                                            "lambda (the original: trained mixing weights λ); gates (DuoAttention: "
                                            "gates from the stock model with an L1 pull toward constant); taylor "
                                            "(first-order loss change at the stock model, one pass); loo (the exact "
                                            "loss change of each head made constant alone); iterative (loo, "
                                            "re-scored after each tenth of the heads is made constant); "
                                            "iterative_taylor (the same with taylor); retrieval (Wu et al.'s retrieval-head score on a retrieval "
                                            "task: how often a head's top attention lands on the needle token it "
                                            "copies). Every ranker writes "
                                            "sorted_heads.json and head_scores.csv. A probe task's ranker (not "
                                            "lambda) first trains the probe at k = 0."})
    gates_l1: float = field(default=0.05, metadata={
        "help": "--ranker gates: weight of the L1 pull of the gates toward constant attention."})
    ranker_part: int | None = field(default=None, metadata={"help": "With --ranker_parts N: which part, 1 to N."})
    ranker_merge: list[str] | None = field(default=None, metadata={
        "help": "--ranker loo: rank from the ranker_part.pt files of these folders (the parts of --ranker_parts) "
                "instead of scoring: the same sorted_heads.json and head_scores.csv as one process's.",
        "metavar": "DIR"})
    best_of: bool = field(default=False, metadata={
        "help": "With --sort_calculating: also write best_of.csv, per head the loss change on the ranking data (the "
                "training split, its first --ranker_max_samples) when it alone is replaced by constant, mean_output "
                "or mean_corrected, and the one that loses least, which --replace_heads_with best_of then uses "
                "(reads mean_outputs.pt and output_corrections.pt in --static_heads_dir: averaging "
                "--mean_corrections)."})
    loo_prefix_cache: bool = field(default=True, metadata={
        "help": "--ranker loo / iterative: compute the blocks below a head's layer once per batch and reuse them "
                "(false: every replacement runs the whole model; the same scores, slower)."})

    def __post_init__(self):
        check_model_paths(self)
        training_mode(self.sort_calculating, self.grad_for_classifier_only, self.grad_for_classifier_and_static_only)
        if self.use_auth_token and self.token is None:
            self.token = True  # huggingface_hub: True = the stored token
        if not RANKERS[self.ranker].in_trainer and not self.sort_calculating:
            raise PapaError(f"--ranker {self.ranker} ranks heads in a ranking run: add --sort_calculating True")
        if self.sort_calculating and self.ranker_loss == "distill" and without_distill_signal([self.ranker]):
            raise PapaError(f"--ranker_loss distill has no signal for --ranker {self.ranker} (lambda trains on the "
                            "task's loss; taylor's gradient of the distillation loss is 0 at the stock model): drop "
                            f"it or use {with_distill_signal()}")
        self.check_ranking()
        self.check_structured()
        if (self.ranker_tasks or self.ranker_lengths) and RANKERS[self.ranker].in_trainer:
            raise PapaError(f"--ranker_tasks and --ranker_lengths choose the ranking data of the rankers that score on "
                            f"their own; --ranker {self.ranker} trains in the Trainer on the run's training data")
        if (self.ranker_parts or self.ranker_merge) and not RANKERS[self.ranker].parts:
            raise PapaError("--ranker_parts and --ranker_merge split --ranker loo's heads into parts: the other rankers "
                            "score every head in one pass or depend on each other's choice; drop them or use loo")
        if (self.ranker_part is None) != (self.ranker_parts is None):
            raise PapaError("--ranker_part I and --ranker_parts N go together: the I-th part of N")
        if self.ranker_parts and not 1 <= self.ranker_part <= self.ranker_parts:
            raise PapaError(f"--ranker_part must be 1 to --ranker_parts ({self.ranker_parts}); got {self.ranker_part}")
        if self.ranker_parts and self.ranker_merge:
            raise PapaError("a run scores a part (--ranker_part) or merges the parts (--ranker_merge), not both")
        if self.gates_l1 < 0:
            raise PapaError(f"--gates_l1 must be 0 or more; got {self.gates_l1}")
        clash = {"--replace_heads_with " + self.replace_heads_with: self.replace_heads_with != "constant",
                 "--grad_for_classifier_and_static_only": self.grad_for_classifier_and_static_only,
                 "--head_replacements": self.head_replacements}
        if CONSTANT_KINDS[self.constants].structured and any(clash.values()):
            raise PapaError(f"--constants {self.constants} (structured constants) does not go with "
                            f"{next(f for f, on in clash.items() if on)}, which needs full constant matrices")


TASK_HELP = ("Task (case-insensitive): cola sst2 mrpc qqp stsb mnli qnli rte wnli repeat, lm (language modelling "
             "with a decoder's own LM head; plain text files), lm_qnli / lm_mrpc (the same on the sentences of GLUE's QNLI / "
             "MRPC TSVs in --data_dir) (run_papa_glue*), ner pos chunk (run_papa_ner*; default ner). Sequence tasks: omit it for your own CSV/JSON files or --dataset_name "
             "(labels from the data). Token tasks: any other name for your own tag set (JSON files or --dataset_name).")
TRAIN_FILE_HELP = ("Training file: GLUE .tsv, or .csv/.json(l) with a 'label' column (text columns: sentence1/"
                   "sentence2, else the first one or two); token tasks: CoNLL .txt/.conll or .json(l) of word and tag lists; lm: plain text, one document per line.")
DATASET_HELP = "Dataset on the Hugging Face hub (online only), for the splits without local files."
COLUMN_HELP = "Token tasks, JSON or hub data: the column of {} (default: {})."


ORIGINAL_TYPES_HELP = ("PAPA layout: leave token_type_ids where the tokenizer put them, as the original code did (a pair's "
                       "second sentence is then read as segment A), to match the paper's numbers. Default: they move "
                       "with their tokens.")


@dataclass
class DataArguments(RetrievalFlags, LmEvalFlags):
    task_name: str | None = field(default=None, metadata={"help": TASK_HELP})
    data_dir: str | None = field(
        default=None, metadata={"help": "Folder with the task's files (GLUE: train.tsv, dev.tsv, test.tsv; CoNLL: "
                                        "train.txt, valid.txt, test.txt)."}
    )
    dataset_name: str | None = field(default=None, metadata={"help": DATASET_HELP})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Configuration of --dataset_name."})
    train_file: str | None = field(default=None, metadata={"help": TRAIN_FILE_HELP})
    validation_file: str | None = field(default=None, metadata={"help": "Validation file, same formats as --train_file."})
    test_file: str | None = field(default=None, metadata={
        "help": "Test file for --do_predict, same formats (labels optional for sequence tasks)."})
    text_column_name: str | None = field(default=None, metadata={"help": COLUMN_HELP.format("word lists", "tokens, else the first")})
    label_column_name: str | None = field(default=None, metadata={
        "help": COLUMN_HELP.format("tag lists", "<task>_tags, else the second")})
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
    max_predict_samples: int | None = field(default=None, metadata={"help": "Predict only the first N test examples."})
    overwrite_cache: bool = field(default=False, metadata={
        "help": "Tokenise again and replace the entries of the tokenised-split cache (PAPA_TOKENIZED_CACHE, the "
                "sweep's tokenized/); the scripts run alone do not cache, so there it changes nothing."})
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes that tokenise the data."})
    original_token_types: bool = field(default=False, metadata={"help": ORIGINAL_TYPES_HELP})
    label_all_tokens: bool = field(
        default=False, metadata={"help": "Token tasks: label every sub-token (B- becomes I-), not only each word's first."}
    )
    return_entity_level_metrics: bool = field(
        default=False, metadata={"help": "Token tasks: also report precision/recall/f1 per entity type."}
    )

    def __post_init__(self):
        for flag in ("max_seq_length", "max_train_samples", "max_eval_samples", "max_predict_samples",
                     "preprocessing_num_workers"):
            check_positive(getattr(self, flag), f"--{flag}")
        self.check_lm_eval()


@dataclass
class PapaTrainingArguments(TrainingArguments):
    """HF's TrainingArguments, plus the flag transformers 5 removed that HF's example scripts (and the original) used."""

    overwrite_output_dir: bool = field(default=False, metadata={
        "help": "Train from scratch in a non-empty --output_dir instead of stopping (or resuming its last checkpoint)."})

    def __post_init__(self):
        super().__post_init__()
        # what would otherwise fail deep inside the Trainer, or run zero steps and write an untrained result
        check_seed(self.seed, "--seed")
        for flag in ("per_device_train_batch_size", "per_device_eval_batch_size"):
            check_positive(getattr(self, flag), f"--{flag}")
        if self.do_train and self.max_steps <= 0:
            check_positive(self.num_train_epochs, "--num_train_epochs")
        if self.output_dir:
            check_writable_folder(self.output_dir, "--output_dir")


def parse_training_args(argv):
    """(ModelArguments, DataArguments, PapaTrainingArguments) from the command line (old flag names accepted)."""
    return parse_dataclasses((ModelArguments, DataArguments, PapaTrainingArguments), argv)
