"""What the four PAPA scripts do, shared: the averaging pass and the probing run.

`run_averaging` (run_papa_*_avgs_creator.py): tokenise the train split padded to T, run the stock
encoder in eval mode without gradients, average every head's attention → avgs.pt and the two sums.

`run_probing` (run_papa_*.py): load the model, replace the first k ranked heads by their constant
matrices (or mix every head, for the ranking run), freeze what the training mode freezes, train
and evaluate with HF's Trainer, and write the original's files.

Each step validates its inputs before any heavy work; bad input raises `PapaError`.
"""

import json
import logging
import os
from dataclasses import dataclass

import numpy as np
import transformers
from transformers import AutoConfig, AutoModel, AutoTokenizer, Trainer, default_data_collator, set_seed

from . import data, metrics, preprocessing
from .attention import lambdas_array, load_constant_matrices
from .encoders import family_for
from .averaging import accumulate_attention, distributed_context, shard
from .errors import PapaError, check_positive
from .io import atomic_path, save_json
from .modeling import build_model, default_model_path, save_papa_model, set_trainable, training_mode
from .ranking import check_static_heads_num, first_k_heads, load_sorted_heads, save_ranking

logger = logging.getLogger("papa")


def stage(message):
    """One visible progress line per stage (main process only)."""
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"[papa] {message}", flush=True)


# ----------------------------------------------------------------------------- tasks


@dataclass
class Task:
    """A task's data, labels, tokenisation and metric, for sequence and token tasks alike."""

    name: str
    kind: str  # "sequence" | "token"
    datasets: object  # datasets.DatasetDict
    label_list: list | None  # None for regression (STS-B)

    @property
    def num_labels(self):
        return 1 if self.label_list is None else len(self.label_list)

    def tokenize(self, tokenizer, max_length, papa_layout, pad_to_max_length, label_all_tokens=False):
        """The DatasetDict tokenised (label columns → "labels"), original columns dropped."""
        if self.kind == "sequence":
            key1, key2 = data.TASK_TO_KEYS[self.name]
            fn = lambda batch: preprocessing.tokenize_sequence_examples(
                tokenizer, batch, key1, key2, max_length, papa_layout, pad_to_max_length)
        else:
            fn = lambda batch: preprocessing.tokenize_token_examples(
                tokenizer, batch, max_length, papa_layout, pad_to_max_length, label_all_tokens, self.label_list)
        columns = next(iter(self.datasets.values())).column_names
        return self.datasets.map(fn, batched=True, remove_columns=columns, desc="Tokenising")

    def compute_metrics(self, entity_level=False):
        """A Trainer `compute_metrics` for this task."""
        def compute(prediction):
            logits = prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
            if self.kind == "token":
                predicted, gold = metrics.token_predictions_to_tags(logits, prediction.label_ids, self.label_list)
                return metrics.compute_token_metrics(predicted, gold, entity_level=entity_level)
            predicted = logits.reshape(-1) if self.label_list is None else np.argmax(logits, axis=-1)
            return metrics.compute_glue_metrics(self.name, predicted, prediction.label_ids)
        return compute


def load_task(kind, task_name, data_dir, train_file, validation_file, cache_dir, splits):
    """Validate the task name and load its splits (offline first; see papa.data)."""
    if task_name is None:
        valid = data.SEQUENCE_TASKS if kind == "sequence" else data.TOKEN_TASKS
        raise PapaError(f"--task_name is required; one of: {', '.join(valid)}")
    if kind == "sequence":
        name = data.canonical_task_name(task_name, data.SEQUENCE_TASKS)
        datasets = data.load_sequence_task(name, data_dir, train_file, validation_file, cache_dir, splits)
        return Task(name, kind, datasets, data.glue_label_names(name))
    name = data.canonical_task_name(task_name, data.TOKEN_TASKS)
    datasets, label_list = data.load_token_task(name, data_dir, train_file, validation_file, cache_dir, splits)
    return Task(name, kind, datasets, label_list)


# ----------------------------------------------------------------------------- model pieces


def load_config_and_tokenizer(model_name_or_path, cache_dir, task, max_length):
    """Config with the task's labels, and a tokenizer; checks T against the position embeddings."""
    path = model_name_or_path or default_model_path()
    try:
        config = AutoConfig.from_pretrained(path, cache_dir=cache_dir, num_labels=task.num_labels)
    except OSError as err:
        raise PapaError(f"cannot load model {path!r}: {str(err).splitlines()[0]}") from None
    try:
        family = family_for(config)
    except PapaError as err:
        raise PapaError(f"{path}: {err}") from None
    if task.label_list is not None:
        config.id2label = dict(enumerate(task.label_list))
        config.label2id = {label: i for i, label in enumerate(task.label_list)}
    # RoBERTa-style models reserve their first position ids for padding
    limit = config.max_position_embeddings - (config.pad_token_id + 1 if family.position_offset else 0)
    if max_length > limit:
        raise PapaError(f"sequence length {max_length} exceeds the model's {limit} position embeddings; lower it")
    tokenizer = AutoTokenizer.from_pretrained(path, cache_dir=cache_dir)
    if task.kind == "token" and getattr(tokenizer, "add_prefix_space", None) is False:
        # byte-level BPE (RoBERTa, DeBERTa v1) marks word starts by a preceding space: pre-split words
        # need one, as the original set for its token tasks
        tokenizer = AutoTokenizer.from_pretrained(path, cache_dir=cache_dir, add_prefix_space=True)
    return path, config, tokenizer


def limit(dataset, max_samples):
    return dataset if max_samples is None else dataset.select(range(min(max_samples, len(dataset))))


# ----------------------------------------------------------------------------- averaging


def run_averaging(args, kind):
    """The averaging pass: writes avgs.pt, attention_sums.pt, attention_patterns_sums.pt."""
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Subset
    from tqdm.auto import tqdm

    set_seed(args.seed)
    for flag in ("max_length", "per_device_train_batch_size", "max_train_samples"):
        check_positive(getattr(args, flag), f"--{flag}")
    task = load_task(kind, args.task_name, args.data_dir, args.train_file, None, args.cache_dir, ("train",))
    path, config, tokenizer = load_config_and_tokenizer(args.model_name_or_path, args.cache_dir, task, args.max_length)
    stage(f"averaging attention of {path} on {task.name} (T={args.max_length})")

    task.datasets["train"] = limit(task.datasets["train"], args.max_train_samples)
    tokenized = task.tokenize(tokenizer, args.max_length, args.use_papa_preprocess, pad_to_max_length=True)["train"]
    columns = [c for c in ("input_ids", "attention_mask", "token_type_ids") if c in tokenized.column_names]
    tokenized = tokenized.with_format("torch", columns=columns)

    rank, world_size, device = distributed_context()
    model = AutoModel.from_pretrained(path, config=config, cache_dir=args.cache_dir, attn_implementation="eager")
    model.to(device)
    # each process reads a disjoint shard: no example is counted twice, whatever the sizes
    loader = DataLoader(Subset(tokenized, shard(len(tokenized), rank, world_size)),
                        batch_size=args.per_device_train_batch_size, collate_fn=default_data_collator)
    progress = tqdm(total=len(loader), desc="Averaging", disable=rank != 0)
    averager = accumulate_attention(model, loader, args.max_length, device, progress)
    progress.close()
    averager.all_reduce()
    if rank == 0:
        averager.save(args.output_dir)
        stage(f"wrote avgs.pt [{config.num_hidden_layers}, {config.num_attention_heads}, {args.max_length}, "
              f"{args.max_length}] from {averager.num_examples} examples ({world_size} process(es)) to {args.output_dir}")
    if world_size > 1:
        dist.barrier()
        dist.destroy_process_group()


# ----------------------------------------------------------------------------- probing


def heads_to_replace(model_args, config):
    """(constant matrices or None, static heads {layer: [heads]}, mix_all_heads), validated."""
    num_layers, num_heads = config.num_hidden_layers, config.num_attention_heads
    k = model_args.static_heads_num
    check_static_heads_num(k, num_layers, num_heads)  # before anything else: k < 0 must not pass as "no heads"
    if model_args.sort_calculating:
        if not model_args.static_heads_dir:
            raise PapaError("--sort_calculating needs --static_heads_dir (the folder holding avgs.pt)")
        if k:
            raise PapaError("--sort_calculating mixes every head; drop --static_heads_num")
        return load_constant_matrices(model_args.static_heads_dir, num_layers, num_heads), {}, True
    if k > 0 and not (model_args.static_heads_dir and model_args.sorting_heads_dir):
        missing = [f for f in ("--static_heads_dir", "--sorting_heads_dir") if not getattr(model_args, f[2:])]
        raise PapaError(f"--static_heads_num {k} needs {' and '.join(missing)} (avgs.pt and sorted_heads.json)")
    if not model_args.static_heads_dir:
        return None, {}, False
    static = {}
    if k > 0:
        ranking = load_sorted_heads(model_args.sorting_heads_dir, num_layers, num_heads)
        static = first_k_heads(ranking, k, num_layers, num_heads)
    return load_constant_matrices(model_args.static_heads_dir, num_layers, num_heads), static, False


def check_constant_length(constants, max_seq_length):
    if constants is not None and constants.shape[-1] != max_seq_length:
        raise PapaError(f"avgs.pt was computed at length {constants.shape[-1]} but --max_seq_length is "
                        f"{max_seq_length}; use --max_seq_length {constants.shape[-1]} or recompute avgs.pt")


def save_results(split, results, output_dir):
    """HF's `<split>_results.json` and merged `all_results.json`, written atomically."""
    save_json(results, os.path.join(output_dir, f"{split}_results.json"), indent=4, sort_keys=True)
    combined_path = os.path.join(output_dir, "all_results.json")
    combined = {}
    if os.path.exists(combined_path):
        with open(combined_path) as f:
            combined = json.load(f)
    save_json({**combined, **results}, combined_path, indent=4, sort_keys=True)


def run_probing(model_args, data_args, training_args, kind):
    """Train and evaluate one PAPA configuration with the Trainer; writes the original's files."""
    mode = training_mode(model_args.sort_calculating, model_args.grad_for_classifier_only,
                         model_args.grad_for_classifier_and_static_only)
    for flag in ("max_seq_length", "max_train_samples", "max_eval_samples"):
        check_positive(getattr(data_args, flag), f"--{flag}")
    splits = tuple(s for s, on in (("train", training_args.do_train), ("validation", training_args.do_eval)) if on)
    if not splits:
        raise PapaError("nothing to do: pass --do_train and/or --do_eval")
    task = load_task(kind, data_args.task_name, data_args.data_dir, data_args.train_file,
                     data_args.validation_file, model_args.cache_dir, splits)
    path, config, tokenizer = load_config_and_tokenizer(model_args.model_name_or_path, model_args.cache_dir, task,
                                                        data_args.max_seq_length)
    constants, static_heads, mix = heads_to_replace(model_args, config)
    check_constant_length(constants, data_args.max_seq_length)
    if mix and not training_args.do_train:
        raise PapaError("--sort_calculating ranks heads by training their mixing weights: add --do_train")
    if mode == "grad_for_classifier_and_static_only" and constants is None:
        raise PapaError("--grad_for_classifier_and_static_only trains constant matrices: pass --static_heads_dir")
    set_seed(training_args.seed)

    # constant matrices and the freeze-extract pooler are defined per position: pad everything to T
    pad = data_args.pad_to_max_length or constants is not None or model_args.use_freeze_extract_pooler
    tokenized = task.tokenize(tokenizer, data_args.max_seq_length, data_args.use_papa_preprocess, pad,
                              data_args.label_all_tokens)
    train_dataset = limit(tokenized["train"], data_args.max_train_samples) if training_args.do_train else None
    eval_sets = {}
    if training_args.do_eval:
        eval_sets[task.name] = limit(tokenized["validation"], data_args.max_eval_samples)
        if "validation_mismatched" in tokenized:
            eval_sets["mnli-mm"] = limit(tokenized["validation_mismatched"], data_args.max_eval_samples)

    model_class = "AutoModelForSequenceClassification" if kind == "sequence" else "AutoModelForTokenClassification"
    num_constant = sum(len(h) for h in static_heads.values())
    stage(f"{task.name}: {path}, {'mixing all heads (ranking run)' if mix else f'{num_constant} constant heads'}, "
          f"mode={mode or 'full fine-tuning'}, T={data_args.max_seq_length}")
    model = build_model(model_class, config, path, constants, static_heads, mix,
                        data_args.max_seq_length if model_args.use_freeze_extract_pooler else None, model_args.cache_dir)
    trainable = set_trainable(model, mode)
    logger.info("trainable parameters: %s", ", ".join(trainable))

    if pad:
        collator = default_data_collator
    elif kind == "token":
        collator = transformers.DataCollatorForTokenClassification(tokenizer)
    else:
        collator = transformers.DataCollatorWithPadding(tokenizer)
    trainer = Trainer(
        model=model, args=training_args, train_dataset=train_dataset,
        eval_dataset=eval_sets.get(task.name), processing_class=tokenizer, data_collator=collator,
        compute_metrics=task.compute_metrics(data_args.return_entity_level_metrics),
    )

    if training_args.do_train:
        stage(f"training on {len(train_dataset)} examples for {training_args.num_train_epochs:g} epochs")
        result = trainer.train()
        train_metrics = dict(result.metrics, train_samples=len(train_dataset))
        if trainer.is_world_process_zero():
            if training_args.save_total_limit != 0:
                save_papa_model(model, training_args.output_dir)
                tokenizer.save_pretrained(training_args.output_dir)
            else:
                model.config.save_pretrained(training_args.output_dir)
            if mix:
                save_ranking(lambdas_array(model), training_args.output_dir)
                stage(f"wrote lambdas.npy and sorted_heads.json to {training_args.output_dir}")
        trainer.log_metrics("train", train_metrics)
        if trainer.is_world_process_zero():
            save_results("train", train_metrics, training_args.output_dir)
            with atomic_path(os.path.join(training_args.output_dir, "trainer_state.json")) as tmp:
                trainer.state.save_to_json(tmp)

    if training_args.do_eval:
        all_eval = {}
        for name, dataset in eval_sets.items():
            prefix = "eval" if name == task.name else f"eval_{name}"
            results = trainer.evaluate(eval_dataset=dataset, metric_key_prefix=prefix)
            results[f"{prefix}_samples"] = len(dataset)
            all_eval.update(results)
        trainer.log_metrics("eval", all_eval)
        if trainer.is_world_process_zero():
            save_results("eval", all_eval, training_args.output_dir)
        stage("eval: " + ", ".join(f"{k}={v:.4f}" for k, v in all_eval.items()
                                   if isinstance(v, float) and not k.endswith(("runtime", "per_second", "loss"))))
    return trainer
