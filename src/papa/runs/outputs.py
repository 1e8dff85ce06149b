"""What a probing run leaves in --output_dir besides the model, as HF's run_glue.py / run_ner.py leave it.

- `<split>_results.json` and the merged `all_results.json` (save_results);
- --do_predict: `predict_results_<task>.txt` (sequence tasks: `index<TAB>prediction`, a label name, or a
  score with 3 decimals for regression; MNLI also `predict_results_mnli-mm.txt`), or `predictions.txt`
  (token tasks: each sentence's predicted tags, space-separated) and `predict_results.json`;
- the output-directory guard: a non-empty --output_dir without a checkpoint stops a training run,
  one with a checkpoint is resumed from the last one if its tensors fit the model (--overwrite_output_dir
  skips all of it).

Everything is written atomically (papa.io) by the main process only.
"""

import os

import numpy as np
from transformers.trainer_utils import get_last_checkpoint

from ..method.ranking_progress import PROGRESS_FILE
from ..console import stage
from ..errors import PapaError
from ..families import block_triangle
from ..families.block_triangle import block_triangle_size
from ..io import load_json_object, save_json, save_text
from .metrics import token_predictions_to_tags


def save_results(split, results, output_dir):
    """HF's `<split>_results.json` and merged `all_results.json`, written atomically."""
    save_json(results, os.path.join(output_dir, f"{split}_results.json"), indent=4, sort_keys=True)
    combined_path = os.path.join(output_dir, "all_results.json")
    combined = {}
    if os.path.exists(combined_path):
        combined = load_json_object(combined_path, "delete it (HF's merged results; it is written again)")
    save_json({**combined, **results}, combined_path, indent=4, sort_keys=True)


def checkpoint_to_resume(training_args):
    """The checkpoint a training run starts from (None: from scratch), with HF run_glue's output-directory guard. A
    folder holding only a killed ranking's progress passes the guard: the ranking resumes it (with or without
    --overwrite_output_dir: it is resumed only where it is this ranking's own, and gives the same ranking as a run
    from scratch, papa.method.ranking_progress)."""
    resume = training_args.resume_from_checkpoint
    if resume is not None and training_args.do_train and not os.path.isdir(resume):
        raise PapaError(f"--resume_from_checkpoint {resume} is not a folder (a checkpoint-<step> folder of a run "
                        f"saved with --save_strategy steps or epoch)")
    out = training_args.output_dir
    if not (training_args.do_train and os.path.isdir(out) and not training_args.overwrite_output_dir):
        return resume
    last = get_last_checkpoint(out)
    if last is None and set(os.listdir(out)) - {PROGRESS_FILE}:  # a ranking's own progress: it resumes it
        raise PapaError(f"output directory {out} already exists and is not empty; use --overwrite_output_dir to "
                        f"train in it anyway, or another --output_dir")
    if last is not None and resume is None:
        stage(f"checkpoint detected, resuming training at {last}; to train from scratch, change --output_dir "
              f"or add --overwrite_output_dir")
    return resume or last


PAPA_PARAMETERS = ("constant_matrices", "lambdas", "mean_outputs", "output_corrections")


def same_tensor_shape(saved, ours):
    """Whether a saved tensor of shape `saved` loads into one of shape `ours`: equal, or a decoder's (S, T, T)
    constants saved before layers held them as strips (S, N), which loading packs (papa.method.attention)."""
    if saved == ours:
        return True
    return (len(saved) == 3 and len(ours) == 2 and saved[0] == ours[0]
            and ours[1] == block_triangle_size(saved[-1], block_triangle.BLOCK))


def check_checkpoint_matches(checkpoint, model):
    """A clear error before resuming `checkpoint` into a model patched otherwise (other heads replaced, another mode
    or T, another model): its tensors would not fit. The original README's loop over k reuses one --output_dir."""
    if checkpoint is None:
        return
    path = os.path.join(checkpoint, "model.safetensors")
    if not os.path.isfile(path):
        return  # another format, whose own loading reports a mismatch
    from safetensors import safe_open

    ours = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    with safe_open(path, "pt") as saved:
        shapes = {name: tuple(saved.get_slice(name).get_shape()) for name in saved.keys()}
    differing = [name for name in shapes if name in ours and not same_tensor_shape(shapes[name], ours[name])]
    differing += [name for name in set(shapes) ^ set(ours) if name.endswith(PAPA_PARAMETERS)]
    if differing:
        more = f" and {len(differing) - 1} more" if len(differing) > 1 else ""
        raise PapaError(f"the checkpoint {checkpoint} does not fit this model ({sorted(differing)[0]}{more} differ): it "
                        "was trained with other settings, e.g. another --static_heads_num; pass another --output_dir "
                        "for this run, or --overwrite_output_dir to train from scratch")


def predictions_of(trainer, dataset):
    """The model's outputs on `dataset` (logits, or the first of several outputs), and the PredictionOutput."""
    output = trainer.predict(dataset, metric_key_prefix="predict")
    logits = output.predictions[0] if isinstance(output.predictions, tuple) else output.predictions
    return logits, output


def write_sequence_predictions(trainer, task, label_list, test_sets, output_dir):
    """predict_results_<task><suffix>.txt per test split, as run_glue writes them ({suffix: dataset})."""
    for suffix, dataset in test_sets.items():
        logits, _ = predictions_of(trainer, dataset)
        if task.is_regression:
            lines = [f"{i}\t{score:3.3f}" for i, score in enumerate(logits.reshape(-1))]
        else:
            lines = [f"{i}\t{label_list[p]}" for i, p in enumerate(np.argmax(logits, axis=1))]
        path = os.path.join(output_dir, f"predict_results_{task.name}{suffix}.txt")
        if trainer.is_world_process_zero():
            save_text("index\tprediction\n" + "".join(line + "\n" for line in lines), path)
            stage(f"wrote {len(lines)} predictions to {path}")


def write_token_predictions(trainer, label_list, dataset, output_dir):
    """predictions.txt (each sentence's predicted tags where it has a label) and predict_results.json, as run_ner."""
    logits, output = predictions_of(trainer, dataset)
    predicted, _ = token_predictions_to_tags(logits, output.label_ids, label_list)
    trainer.log_metrics("predict", output.metrics)
    if trainer.is_world_process_zero():
        save_results("predict", output.metrics, output_dir)
        path = os.path.join(output_dir, "predictions.txt")
        save_text("".join(" ".join(tags) + "\n" for tags in predicted), path)
        stage(f"wrote the predicted tags of {len(predicted)} sentences to {path}")
