"""What the four PAPA scripts do: the averaging pass and the probing run, for a resolved task.

`run_averaging` (run_papa_*_avgs_creator.py): tokenise the train split padded to T (lm: cut into blocks
of T, papa.data.lm), run the stock model in eval mode without gradients, average every head's attention
→ avgs.pt and the two sums.

`run_probing` (run_papa_*.py): load the model, replace the first k ranked heads by their constant
matrices (or mix every head, for the ranking run), freeze what the training mode freezes, train
(resuming a checkpoint, as HF's scripts do), evaluate and predict with HF's Trainer, and write the
original's files (papa.runs.outputs). For lm the model is the decoder with its own LM head: no probe; only the
ranking run (λ) and --grad_for_classifier_and_static_only (the constant matrices) train, on the LM loss.

Both take the task as a `papa.data.tasks.TaskSpec` (the command resolved it: papa.data.custom.resolve_task),
select `--max_*_samples` examples before tokenising, and validate their inputs before any heavy
work: bad input raises `PapaError`.
"""

import logging
import os

import torch
import transformers
from datasets import DatasetDict
from transformers import AutoModel, default_data_collator, set_seed

from ..method.attention import patch_model
from ..method.averaging import accumulate_attention, averages_info, averages_origin_notes, distributed_context, shard
from ..data.conll import load_token_task
from ..console import progress_bar, quiet_trainer, stage
from ..data.glue import load_sequence_task
from ..errors import PapaError
from ..evaluation.scoring import check_lm_eval_run, score_probing_model
from ..families import family_for
from ..method.rankers import LAMBDA_ON_DECODER, PAPER, RANKERS, check_ranker_data
from ..method.structured_averaging import CONSTANT_KINDS
from ..io import atomic_files, atomic_path
from ..data.lm import check_lm_flags, check_lm_run, lm_blocks, load_lm_texts
from ..data.retrieval import check_retrieval_flags, filler_sentences, retrieval_datasets
from .lm_evaluation import lm_trainer_class
from .metrics import trainer_metrics
from ..models.modeling import build_model, check_task_head, save_papa_model, set_trainable, training_mode
from .outputs import (check_checkpoint_matches, checkpoint_to_resume, save_results, write_sequence_predictions,
                      write_token_predictions)
from .predictions import predictions_file, write_eval_predictions
from ..models.pretrained import check_model_paths, load_config_and_tokenizer
from .ranking import (prepare_lambda_training, rank_heads, ranking_subset, ranking_units, save_lambda_ranking,
                      write_best_of, write_head_replacements)
from ..data.task_folders import resolve_data_dir
from .replacements import REPLACEMENT_FILES, check_heads_setup, heads_to_replace
from .structured_constants import structured_averager, write_sink_window, write_toeplitz
from ..data.tokenized_cache import tokenize_cached

logger = logging.getLogger("papa")
DEBUG_EXAMPLES = 100  # the original averaging scripts' --debug: the first 100 examples of each split


# ----------------------------------------------------------------------------- shared by both runs


def load_task_data(task, args, cache_dir, splits):
    """(DatasetDict of the requested splits, label list: id -> name, None for regression).

    `args`: DataArguments or AveragingArguments (data_dir, the files, --dataset_name, the column names).
    """
    # --data_dir: the task's folder, or a root holding it (../shared/data), as the sweep takes it
    data_dir = resolve_data_dir(args.data_dir, task, False) if args.data_dir else None
    sources = dict(data_dir=data_dir, train_file=args.train_file,
                   validation_file=getattr(args, "validation_file", None), cache_dir=cache_dir, splits=splits,
                   test_file=getattr(args, "test_file", None), dataset_name=args.dataset_name,
                   dataset_config_name=args.dataset_config_name)
    if task.retrieval:  # generated: only a natural filler's sentences are read
        return filler_sentences(args.filler, args.data_dir, [s for s in splits if s != "test"]), None
    if task.kind == "lm":
        return load_lm_texts(task, **{k: v for k, v in sources.items() if k != "test_file"}), None
    if task.kind == "token":
        return load_token_task(task, **sources, text_column_name=args.text_column_name,
                               label_column_name=args.label_column_name)
    datasets = load_sequence_task(task, **sources)
    return datasets, None if task.labels is None else list(task.labels)


def first_examples(dataset, max_samples):
    return dataset if max_samples is None else dataset.select(range(min(max_samples, len(dataset))))


# ----------------------------------------------------------------------------- averaging


def run_averaging(task, args):
    """The averaging pass (args: papa.runs.averaging_arguments.AveragingArguments): writes avgs.pt and the two sums (and,
    with --mean_outputs, mean_outputs.pt)."""
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Subset

    set_seed(args.seed)
    check_retrieval_flags(task, args.filler, args.retrieval_depths)
    if task.kind == "lm":
        check_lm_flags(args.use_papa_preprocess)
    check_model_paths(args.model_name_or_path, args.config_name, args.tokenizer_name)  # before the data (the hub)
    datasets, label_list = load_task_data(task, args, args.cache_dir, ("train",))
    path, config, tokenizer = load_config_and_tokenizer(
        args.model_name_or_path, args.cache_dir, task, label_list, args.max_length, config_name=args.config_name,
        tokenizer_name=args.tokenizer_name, revision=args.model_revision, token=args.token,
        use_fast=not args.use_slow_tokenizer, model_type=args.model_type)
    stage(f"averaging attention of {path or 'an untrained ' + args.model_type} on {task.name} (T={args.max_length})")

    train = datasets["train"]
    limits = [n for n in (DEBUG_EXAMPLES if args.debug else None, args.max_train_samples) if n is not None]
    if task.retrieval:  # examples of exactly T tokens, generated
        tokenized = retrieval_datasets(task, datasets, tokenizer, args.max_length, {"train": min(limits, default=None)},
                                       args.retrieval_depths)["train"]
    elif task.kind == "lm":  # the limits count blocks
        tokenized = lm_blocks(DatasetDict(train=train), tokenizer, args.max_length, {"train": min(limits, default=None)},
                              args.preprocessing_num_workers)["train"]
    else:
        train = DatasetDict(train=first_examples(train, min(limits, default=None)))
        tokenized = tokenize_cached(task, train, tokenizer, label_list, args.max_length, args.use_papa_preprocess,
                                    pad_to_max_length=True, original_token_types=args.original_token_types,
                                    num_proc=args.preprocessing_num_workers, causal=family_for(config).causal)["train"]
    columns = [c for c in ("input_ids", "attention_mask", "token_type_ids") if c in tokenized.column_names]
    tokenized = tokenized.with_format("torch", columns=columns)

    rank, world_size, device = distributed_context()
    if path is None:  # --model_type without a model: untrained weights, as the original's from_config
        model = AutoModel.from_config(config, attn_implementation="eager")
    else:
        model = AutoModel.from_pretrained(path, config=config, cache_dir=args.cache_dir, attn_implementation="eager")
    model.to(device)
    if not CONSTANT_KINDS[args.constants].averaged:  # sink_window: no averages, the pattern is the flags'
        return write_sink_window(args, config) if distributed_context()[0] == 0 else None
    # each process reads a disjoint shard: no example is counted twice, whatever the sizes
    loader = DataLoader(Subset(tokenized, shard(len(tokenized), rank, world_size)),
                        batch_size=args.per_device_train_batch_size, collate_fn=default_data_collator)
    progress = progress_bar(len(loader), "Averaging", disable=rank != 0)
    autocast_dtype = {"no": None, "fp16": torch.float16, "bf16": torch.bfloat16}[args.mixed_precision]
    if args.mean_corrections:  # the values are read through PAPA's modules (no head replaced)
        patch_model(model, torch.zeros(()).expand(config.num_hidden_layers, config.num_attention_heads,
                                                  args.max_length, args.max_length))
    averager = accumulate_attention(model, loader, args.max_length, device, progress, mean_outputs=args.mean_outputs,
                                    autocast_dtype=autocast_dtype, value_means=args.mean_corrections,
                                    averager=structured_averager(args, config, device))
    progress.close()
    averager.all_reduce()
    if rank == 0 and CONSTANT_KINDS[args.constants].structured:  # toeplitz: the structured averager's
        write_toeplitz(args, averager)
    elif rank == 0:
        averager.save(args.output_dir, averages_info(task.name, path or f"untrained {args.model_type}",
                                                     args.max_length, averager.num_examples))
        extra = (" with mean_outputs.pt, mean_values.pt and output_corrections.pt" if args.mean_corrections
                 else " and mean_outputs.pt" if args.mean_outputs else "")
        stage(f"wrote avgs.pt{extra} [{config.num_hidden_layers}, "
              f"{config.num_attention_heads}, {args.max_length}, {args.max_length}] from {averager.num_examples} "
              f"examples ({world_size} process(es)) to {args.output_dir}")
    if world_size > 1:
        dist.barrier()
        dist.destroy_process_group()


# ----------------------------------------------------------------------------- probing: checks


def requested_splits(training_args):
    splits = tuple(s for s, on in (("train", training_args.do_train), ("validation", training_args.do_eval),
                                   ("test", training_args.do_predict)) if on)
    if not splits:
        raise PapaError("nothing to do: pass --do_train, --do_eval and/or --do_predict")
    return splits


# ----------------------------------------------------------------------------- probing: pieces


def probing_datasets(task, datasets, tokenizer, label_list, data_args, pad, training_args, causal=False):
    """{"train": dataset or None, "eval": {metric prefix: dataset}, "test": {predictions suffix: dataset}},
    the sample limits applied before tokenising; `causal`: a decoder's layout."""
    limits = {"train": data_args.max_train_samples}
    limits.update({split: data_args.max_eval_samples for split, _, _ in task.eval_splits})
    limits.update({split: data_args.max_predict_samples for split, _, _ in task.test_splits})
    if task.kind == "lm":  # blocks of T tokens; the limits count blocks, as run_clm's (retrieval: examples)
        tokenized = (retrieval_datasets(task, datasets, tokenizer, data_args.max_seq_length, limits,
                                        data_args.retrieval_depths) if task.retrieval else
                     lm_blocks(datasets, tokenizer, data_args.max_seq_length, limits, data_args.preprocessing_num_workers))
        return {"train": tokenized["train"] if "train" in tokenized else None,
                "eval": {prefix: tokenized[split] for split, _, prefix in task.eval_splits if split in tokenized},
                "test": {}}
    selected = DatasetDict({split: first_examples(d, limits.get(split)) for split, d in datasets.items()})
    tokenized = tokenize_cached(task, selected, tokenizer, label_list, data_args.max_seq_length,
                                data_args.use_papa_preprocess, pad, data_args.label_all_tokens,
                                data_args.original_token_types, data_args.preprocessing_num_workers,
                                overwrite=data_args.overwrite_cache, causal=causal)
    return {"train": tokenized["train"] if training_args.do_train else None,
            "eval": {prefix: tokenized[split] for split, _, prefix in task.eval_splits
                     if training_args.do_eval and split in tokenized},
            "test": {suffix: tokenized[split] for split, _, suffix in task.test_splits
                     if training_args.do_predict and split in tokenized}}


def make_trainer(task, model, tokenizer, label_list, pad, train_dataset, eval_sets, data_args, training_args):
    from transformers import Trainer  # imported here: the averaging stage needs none of it (seconds at start-up)

    if pad or task.kind == "lm":  # lm blocks are full: nothing to pad
        collator = default_data_collator
    elif task.kind == "token":
        collator = transformers.DataCollatorForTokenClassification(tokenizer)
    else:
        collator = transformers.DataCollatorWithPadding(tokenizer)
    trainer_class = lm_trainer_class() if task.kind == "lm" else Trainer  # lm: per-example scores, no logits kept
    trainer = trainer_class(
        model=model, args=training_args, train_dataset=train_dataset,
        eval_dataset=eval_sets.get("eval"), processing_class=tokenizer, data_collator=collator,
        compute_metrics=trainer_metrics(task, label_list, data_args.return_entity_level_metrics),
    )
    return quiet_trainer(trainer)


def train_and_save(trainer, tokenizer, mix, training_args, checkpoint=None):
    """Train (from `checkpoint` when resuming); write the model (or its config only, with --save_total_limit 0),
    the train results and, in λ's ranking run (`mix`: the ranking units, papa.runs.ranking), the ranking."""
    model, output_dir = trainer.model, training_args.output_dir
    stage(f"training on {len(trainer.train_dataset)} examples for {training_args.num_train_epochs:g} epochs"
          + (f", resuming {checkpoint}" if checkpoint else ""))
    result = trainer.train(resume_from_checkpoint=checkpoint)
    train_metrics = dict(result.metrics, train_samples=len(trainer.train_dataset))
    if trainer.is_world_process_zero():
        if training_args.save_total_limit != 0:
            save_papa_model(model, output_dir, tokenizer)
        else:
            with atomic_files(output_dir) as tmp:
                model.config.save_pretrained(tmp)
        if mix:
            save_lambda_ranking(model, output_dir, mix)
            stage(f"wrote lambdas.npy, sorted_heads.json and head_scores.csv to {output_dir}")
    trainer.log_metrics("train", train_metrics)
    if trainer.is_world_process_zero():
        save_results("train", train_metrics, output_dir)
        with atomic_path(os.path.join(output_dir, "trainer_state.json")) as tmp:
            trainer.state.save_to_json(tmp)


def evaluate_and_save(trainer, eval_sets, output_dir, task, label_list):
    """Evaluate on every evaluation split (MNLI: matched and mismatched) into one eval_results.json, and write
    each split's per-example predictions (papa.runs.predictions: eval_predictions*.jsonl)."""
    all_eval = {}
    for prefix, dataset in eval_sets.items():
        results = trainer.evaluate(eval_dataset=dataset, metric_key_prefix=prefix)
        results[f"{prefix}_samples"] = len(dataset)
        all_eval.update(results)
        scored, trainer.compute_metrics.last = trainer.compute_metrics.last, None  # what that evaluation scored
        if scored is not None and trainer.is_world_process_zero():
            depths = dataset["depth"] if "depth" in dataset.column_names else None  # the retrieval tasks'
            write_eval_predictions(task, label_list, *scored, os.path.join(output_dir, predictions_file(prefix)),
                                   depths=depths)
    trainer.log_metrics("eval", all_eval)
    if trainer.is_world_process_zero():
        save_results("eval", all_eval, output_dir)
    stage("eval: " + ", ".join(f"{k}={v:.4f}" for k, v in all_eval.items()
                               if isinstance(v, float) and not k.endswith(("runtime", "per_second", "loss"))))


# ----------------------------------------------------------------------------- probing


def run_probing(task, model_args, data_args, training_args):
    """Train, evaluate and predict one PAPA configuration with the Trainer; writes the original's files."""
    mode = training_mode(model_args.sort_calculating, model_args.grad_for_classifier_only,
                         model_args.grad_for_classifier_and_static_only)
    check_retrieval_flags(task, data_args.filler, data_args.retrieval_depths)
    if model_args.sort_calculating:
        check_ranker_data([model_args.ranker], task.name, task.retrieval)
    if task.kind == "lm":
        check_lm_run(mode, data_args.use_papa_preprocess, model_args.use_freeze_extract_pooler, training_args)
    check_lm_eval_run(task, data_args)
    splits = requested_splits(training_args)
    if training_args.fp16 and training_args.device.type == "cpu":  # accelerate autocasts only bf16 on CPU
        stage("note: with --fp16 on CPU the Trainer runs in float32 (docs/precision.md); "
              "--bf16 --use_cpu true runs in bfloat16")
    checkpoint = checkpoint_to_resume(training_args)
    # a model path that leads nowhere is said before the data is read (which may wait on the hub)
    check_model_paths(model_args.model_name_or_path, model_args.config_name, model_args.tokenizer_name)
    datasets, label_list = load_task_data(task, data_args, model_args.cache_dir, splits)
    path, config, tokenizer = load_config_and_tokenizer(
        model_args.model_name_or_path, model_args.cache_dir, task, label_list, data_args.max_seq_length,
        config_name=model_args.config_name, tokenizer_name=model_args.tokenizer_name,
        revision=model_args.model_revision, token=model_args.token, use_fast=model_args.use_fast_tokenizer)
    check_task_head(task.model_class, config)
    heads = heads_to_replace(model_args, config, data_args.max_seq_length)
    check_heads_setup(heads.loaded, heads.mix_all_heads, mode, data_args.max_seq_length, training_args.do_train,
                      REPLACEMENT_FILES[model_args.replace_heads_with])
    if heads.loaded is not None and model_args.static_heads_dir:
        for note in averages_origin_notes(model_args.static_heads_dir, task.name, path):
            stage(f"warning: {note}")
    set_seed(training_args.seed)

    # constant matrices and the freeze-extract pooler are defined per position: pad everything to T
    pad = data_args.pad_to_max_length or heads.loaded is not None or model_args.use_freeze_extract_pooler
    data = probing_datasets(task, datasets, tokenizer, label_list, data_args, pad, training_args,
                            family_for(config).causal)

    num_replaced = sum(len(h) for h in heads.static_heads.values())
    doing = {"constant": "constant", "mean_output": "mean-output", "zero_output": "zero-output",
             "first_token": "first-token", "mean_corrected": "mean-corrected",
             "best_of": "best-of"}[model_args.replace_heads_with]
    replaced = f"{num_replaced} {doing} heads"
    stage(f"{task.name}: {path}, {'mixing all heads (ranking run)' if heads.mix_all_heads else replaced}, "
          f"mode={(mode or 'full fine-tuning') if training_args.do_train else 'evaluation only'}, T={data_args.max_seq_length}")
    model = build_model(task.model_class, config, path, heads.constant_matrices, heads.static_heads,
                        heads.mix_all_heads, data_args.max_seq_length if model_args.use_freeze_extract_pooler else None,
                        model_args.cache_dir, mean_outputs=heads.mean_outputs,
                        output_corrections=heads.output_corrections, structured=heads.structured)
    ranker = RANKERS[model_args.ranker] if heads.mix_all_heads else None
    if ranker is not None and ranker.name == PAPER and family_for(config).causal:
        stage(LAMBDA_ON_DECODER)
    scores_alone = ranker is not None and not ranker.in_trainer  # the probe trains at k = 0 first (papa.runs.ranking)
    if scores_alone:
        mode = "grad_for_classifier_only"
    logger.info("trainable parameters: %s", ", ".join(set_trainable(model, mode)))
    if training_args.do_train:
        check_checkpoint_matches(checkpoint, model)
    trainer = make_trainer(task, model, tokenizer, label_list, pad, data["train"], data["eval"], data_args,
                           training_args)

    if training_args.do_train and scores_alone:
        scored = rank_heads(trainer, task, model_args, training_args,
                            lambda: train_and_save(trainer, tokenizer, None, training_args, checkpoint), data_args)
        if scored is None:  # one part of a ranking (--ranker_part): the merge ranks and evaluates
            return trainer
    elif training_args.do_train:
        if ranker is not None:  # λ: trained with the probe
            prepare_lambda_training(trainer, model_args)
            if model_args.ranker_max_samples is not None:  # λ trains on the ranking data alone
                trainer.train_dataset = ranking_subset(data["train"], model_args.ranker_max_samples,
                                                       model_args.ranker_sample, training_args.seed)
        units = ranking_units(config, model_args) if ranker else None
        train_and_save(trainer, tokenizer, units, training_args, checkpoint)
    if model_args.best_of:  # after the ranking, on its data
        write_best_of(trainer, task, model_args, training_args)
    if model_args.head_replacements:  # after the ranking, at the stock model (every gate 0)
        write_head_replacements(trainer, task, model_args, training_args, next(iter(data["eval"].values()), None))
    if training_args.do_eval:
        evaluate_and_save(trainer, data["eval"], training_args.output_dir, task, label_list)
        if data_args.lm_eval_tasks and trainer.is_world_process_zero():  # papa.evaluation.scoring
            score_probing_model(trainer.model, tokenizer, data_args, training_args.output_dir)
    if training_args.do_predict and task.kind == "token":
        write_token_predictions(trainer, label_list, data["test"][""], training_args.output_dir)
    elif training_args.do_predict:
        write_sequence_predictions(trainer, task, label_list, data["test"], training_args.output_dir)
    return trainer
