"""The language-modelling task's data (`--task_name lm`): plain text → blocks of T tokens, as HF's run_clm.py.

Sources, per split: --train_file / --validation_file, plain text with one document per line (each line
keeps its line break, as run_clm's text loader does by default); for the lm tasks read off GLUE text (lm_qnli:
QNLI's Wikipedia sentences; lm_mrpc: MRPC's news sentences) the sentences in --data_dir's TSVs, one per line
(`glue_sentences`); else --dataset_name / --dataset_config_name from the hub (its "text" column, else its
first), online only. Every document is
tokenised as the tokenizer does by default (a Llama tokenizer's BOS included, as in run_clm); the tokens
of each batch of GROUP_BATCH documents are concatenated and cut into blocks of T, the remainder of the
batch dropped (run_clm's `group_texts` under `datasets.map(batched=True)`); labels = input_ids (the model
shifts them: position t predicts token t + 1, T − 1 predictions per block). --max_*_samples count
blocks, as run_clm selects after grouping. Every block is full, so nothing is padded and a tokenizer
without a pad token works.
"""

import hashlib
import io
from pathlib import Path

import datasets

from ..console import stage
from .glue import hub_dataset, hub_split, read_glue_tsv
from ..errors import PapaError
from .task_folders import resolve_data_dir

GROUP_BATCH = 1000  # documents concatenated together: datasets.map's default batch, as in run_clm
LM_DATA_HINT = ("pass --train_file/--validation_file (plain text, one document per line) or, online, --dataset_name "
                "and --dataset_config_name (e.g. wikitext wikitext-2-raw-v1)")
FLAGS = {"train": "--train_file", "validation": "--validation_file"}


def check_lm_flags(use_papa_preprocess=False, use_freeze_extract_pooler=False, do_predict=False):
    """lm's blocks are contiguous text scored by the model's own LM head: the sequence tasks' layout, probe and
    test split do not apply."""
    for flag, on in (("--use_papa_preprocess", use_papa_preprocess),
                     ("--use_freeze_extract_pooler", use_freeze_extract_pooler), ("--do_predict", do_predict)):
        if on:
            raise PapaError(f"{flag} does not apply to --task_name lm (contiguous blocks of text scored by the "
                            f"model's own LM head, no probe, no test split); drop it")


LM_TRAINING_MODES = ("sort_calculating", "grad_for_classifier_and_static_only")


def check_lm_run(mode, use_papa_preprocess, use_freeze_extract_pooler, training_args):
    """A probing run of lm: its flags checked; a --do_train with nothing to train (no probe: only the ranking run's
    λ or, with --grad_for_classifier_and_static_only, the constant matrices train) turned into evaluation only."""
    check_lm_flags(use_papa_preprocess, use_freeze_extract_pooler, training_args.do_predict)
    if training_args.do_train and mode not in LM_TRAINING_MODES:
        if not training_args.do_eval:
            raise PapaError("--task_name lm trains nothing without --sort_calculating or "
                            "--grad_for_classifier_and_static_only (no probe: the model's own LM head); add --do_eval "
                            "to evaluate it")
        stage("lm: nothing to train without --sort_calculating or --grad_for_classifier_and_static_only: evaluating")
        training_args.do_train = False


def read_text_file(path, flag) -> list[str]:
    """A plain text file's lines, each with its line break (run_clm's keep_linebreaks default), split as run_clm's
    `load_dataset("text")` splits them."""
    path = Path(path)
    if not path.is_file():
        raise PapaError(f"{flag} {path} does not exist")
    try:
        # at "\n" only, as datasets' text builder (str.splitlines also breaks at \x0c, \x85, \u2028, ...)
        lines = io.StringIO(path.read_text(encoding="utf-8")).readlines()
    except UnicodeDecodeError as err:
        raise PapaError(f"{flag} {path} is not UTF-8 text ({err}); lm reads plain text, one document per line") from None
    if not any(line.strip() for line in lines):
        raise PapaError(f"{flag} {path} has no text")
    return lines


HELD_OUT = 0.2  # a GLUE folder without train.tsv: the last fifth of its dev sentences is the validation text


def glue_sentences(task, data_dir) -> dict[str, list[str]]:
    """{"train": lines, "validation": lines}: the sentences of the task's text column in a GLUE folder, each once (in
    order of first appearance), one per line, none in both splits.

    train.tsv gives the training text and dev.tsv the validation text; a folder without train.tsv (GLUE's QNLI as
    shared here: dev only) gives the first 80% of its dev sentences to train and the rest to validation, cut
    contiguously so that neighbouring rows of one article stay on one side.
    """
    folder = resolve_data_dir(data_dir, task, False)
    files = {split: Path(folder) / name for split, name in (("train", "train.tsv"), ("validation", "dev.tsv"))}
    if not files["validation"].is_file():
        raise PapaError(f"--data_dir {folder} has no dev.tsv: {task.name} reads the sentences of GLUE's "
                        f"{task.glue_folder} TSVs; pass that folder or a root holding it")

    def sentences(path):
        column = read_glue_tsv(path, task, labels=False)[task.text_columns[0]]
        return list(dict.fromkeys(s.strip() for s in column if s.strip()))

    validation = sentences(files["validation"])
    if files["train"].is_file():
        train = sentences(files["train"])
        seen = set(train)
        validation = [s for s in validation if s not in seen]
    else:
        cut = round(len(validation) * (1 - HELD_OUT))
        train, validation = validation[:cut], validation[cut:]
    return {"train": [s + "\n" for s in train], "validation": [s + "\n" for s in validation]}


def load_lm_texts(task, splits, train_file=None, validation_file=None, dataset_name=None, dataset_config_name=None,
                  cache_dir=None, data_dir=None) -> datasets.DatasetDict:
    """The requested splits ("train", "validation") as datasets with one column, "text": the files, the task's
    GLUE folder (lm_qnli, lm_mrpc), else the hub."""
    files = {"train": train_file, "validation": validation_file}
    # the GLUE folder is read only for a split without its own file
    needs_glue = task.glue_folder is not None and any(files.get(s) is None for s in splits if s in files)
    if needs_glue and data_dir is None:
        raise PapaError(f"{task.name} reads the sentences of GLUE's {task.glue_folder} TSVs: pass --data_dir (that "
                        f"folder, or a root holding it, e.g. ../shared/data)")
    glue = glue_sentences(task, data_dir) if needs_glue else None
    loaded, from_hub = {}, []
    for split in splits:
        if split not in files:
            raise PapaError(f"--task_name {task.name} has no {split} split (only train and validation)")
        if files[split] is not None:
            loaded[split] = datasets.Dataset.from_dict({"text": read_text_file(files[split], FLAGS[split])})
        elif glue is not None:
            loaded[split] = datasets.Dataset.from_dict({"text": glue[split]})
        else:
            from_hub.append(split)
    if from_hub:
        hub = hub_dataset(task, dataset_name, dataset_config_name, cache_dir, from_hub, LM_DATA_HINT)
        for split in from_hub:
            table = hub_split(hub, split, dataset_name)
            column = "text" if "text" in table.column_names else table.column_names[0]
            loaded[split] = datasets.Dataset.from_dict({"text": table[column]})
    return datasets.DatasetDict({s: loaded[s] for s in splits})


def group_texts(examples, block_size) -> dict:
    """run_clm's group_texts: every column's lists concatenated, cut into blocks of `block_size`, the remainder
    dropped; "labels" = a copy of the input ids."""
    concatenated = {key: [x for row in examples[key] for x in row] for key in examples}
    total = (len(concatenated["input_ids"]) // block_size) * block_size
    result = {key: [values[i:i + block_size] for i in range(0, total, block_size)]
              for key, values in concatenated.items()}
    result["labels"] = [list(block) for block in result["input_ids"]]
    return result


def tokenized_fingerprint(dataset, tokenizer):
    """The tokenised split's datasets fingerprint, from the text's and the tokenizer's identity (its class, name,
    vocabulary size and special tokens). Left to datasets, the fingerprint would hash the `tokenize` closure and so
    pickle the whole tokenizer: about 2 s a split for Gemma-3's 262 144 tokens (papa.data.tokenized_cache's
    tokenizer_digest, which serialises it too, costs as much). The splits here live in memory (Dataset.from_dict),
    so the fingerprint names the result and caches nothing on disk."""
    identity = [dataset._fingerprint, type(tokenizer).__name__, getattr(tokenizer, "name_or_path", ""), len(tokenizer),
                sorted(map(str, tokenizer.special_tokens_map.items())), getattr(tokenizer, "padding_side", None)]
    return hashlib.sha256(repr(identity).encode()).hexdigest()[:16]


def lm_blocks(texts, tokenizer, block_size, limits=None, num_proc=None) -> datasets.DatasetDict:
    """`texts` (a DatasetDict with "text") tokenised and grouped into blocks of `block_size` tokens, the first
    `limits[split]` blocks of each split kept (None: all); a split without one whole block is an error."""
    limits = limits or {}

    def tokenize(batch):
        return dict(tokenizer(batch["text"]))

    out = {}
    for split, dataset in texts.items():
        tokenized = dataset.map(tokenize, batched=True, remove_columns=dataset.column_names, num_proc=num_proc,
                                desc="Tokenising", new_fingerprint=tokenized_fingerprint(dataset, tokenizer))
        blocks = tokenized.map(group_texts, batched=True, batch_size=GROUP_BATCH, num_proc=num_proc,
                               fn_kwargs={"block_size": block_size}, desc=f"Grouping into blocks of {block_size}")
        if len(blocks) == 0:
            total = sum(len(ids) for ids in tokenized["input_ids"])
            raise PapaError(f"the {split} text has {total} tokens, less than one block of {block_size} "
                            f"(--max_seq_length / --max_length): add text or lower the length")
        limit = limits.get(split)
        out[split] = blocks if limit is None else blocks.select(range(min(limit, len(blocks))))
    return datasets.DatasetDict(out)
