"""Per-example evaluation predictions: `eval_predictions.jsonl` (MNLI also `eval_predictions_mnli-mm.jsonl`).

Every probing run with --do_eval writes, per evaluation split, one JSON object per example in dataset
order, `{"index": i, "label": ..., "prediction": ...}`: label ids of the task for classification, floats
for regression (the float32 values the Trainer scored, written exactly), and for token tasks the lists
of tag names over the scored words (what seqeval scores); for the lm task `{"index": i, "nll_sum": ...,
"tokens": ..., "block": ...}` per block (its summed next-token negative log-likelihood, its number of predicted
tokens, so perplexity = exp(Σ nll_sum / Σ tokens), and a digest of its token ids, so two runs can be checked to
have read the same text). The run's metrics follow from the file alone
(`metrics_from_predictions`), exactly as in eval_results.json; the sweep's bootstrap intervals
(papa.reporting.intervals) resample these examples.
"""

import hashlib
import json
import os

import numpy as np

from ..errors import PapaError
from ..io import save_text
from .metrics import (compute_glue_metrics, compute_lm_metrics, compute_token_metrics, predicted_tokens,
                      token_predictions_to_tags)

EVAL_PREFIX = "eval"


def predictions_file(prefix=EVAL_PREFIX):
    """The file of an evaluation split, from its metric key prefix: eval -> eval_predictions.jsonl,
    eval_mnli-mm -> eval_predictions_mnli-mm.jsonl."""
    return f"eval_predictions{prefix[len(EVAL_PREFIX):]}.jsonl"


def metric_file(metric):
    """(file, metric name inside it) of an eval_results key: eval_mnli-mm_accuracy is accuracy in the -mm file."""
    name = metric[len("eval_"):] if metric.startswith("eval_") else metric
    if name.startswith("mnli-mm_"):
        return predictions_file("eval_mnli-mm"), name[len("mnli-mm_"):]
    return predictions_file(), name


def record_keys(task):
    """The two per-example fields of the task's records: (what is fixed by the data, what the model gives)."""
    return ("tokens", "nll_sum") if task.kind == "lm" else ("label", "prediction")


def scored_keys(task):
    """Further fields the model gives, beyond record_keys' second: the retrieval tasks' `correct` (scored tokens that
    are the argmax), which their exact_match and token_accuracy read."""
    return ("correct",) if task.retrieval else ()


def identity_keys(task):
    """Further fields fixed by the data, beyond record_keys' first (lm: each block's digest, as its token counts are
    all alike); runs evaluated on the same examples agree on them. Files written before them lack them."""
    return ("block",) if task.kind == "lm" else ()


def block_digest(label_ids):
    """A short digest of one lm block's label ids (T,): equal blocks give equal digests, others (almost surely) not."""
    return hashlib.blake2b(np.asarray(label_ids, dtype=np.int64).tobytes(), digest_size=8).hexdigest()


def prediction_records(task, label_list, logits, label_ids, depths=None):
    """[{"index", "label", "prediction"}] from the Trainer's logits and label ids, in dataset order; lm:
    [{"index", "nll_sum", "tokens", "block"}] from the per-example scores (papa.runs.lm_evaluation: nll sum, tokens,
    argmax hits) and the blocks' labels, with "correct" for a retrieval task and each example's "depth" where given."""
    if task.kind == "lm":
        scores, tokens = np.asarray(logits, dtype=np.float64).reshape(len(label_ids), -1), predicted_tokens(label_ids)
        records = [{"index": i, "nll_sum": float(row[0]), "tokens": int(n), "block": block_digest(labels)}
                   for i, (row, n, labels) in enumerate(zip(scores, tokens, label_ids))]
        for i, record in enumerate(records):
            if task.retrieval:
                record["correct"] = int(scores[i, 2])
            if depths is not None:
                record["depth"] = float(depths[i])
        return records
    if task.kind == "token":
        predicted, gold = token_predictions_to_tags(logits, label_ids, label_list)
    elif task.is_regression:
        predicted = [float(v) for v in np.asarray(logits, dtype=np.float32).reshape(-1)]
        gold = [float(v) for v in np.asarray(label_ids, dtype=np.float32).reshape(-1)]
    else:
        predicted = [int(v) for v in np.argmax(logits, axis=-1)]
        gold = [int(v) for v in np.asarray(label_ids).reshape(-1)]
    return [{"index": i, "label": g, "prediction": p} for i, (g, p) in enumerate(zip(gold, predicted))]


def write_eval_predictions(task, label_list, logits, label_ids, path, depths=None):
    """eval_predictions*.jsonl at `path`, atomically; returns the number of examples."""
    records = prediction_records(task, label_list, logits, label_ids, depths)
    save_text("".join(json.dumps(r) + "\n" for r in records), path)
    return len(records)


def read_predictions(path, keys=("label", "prediction"), optional=()):
    """(labels, predictions) lists from an eval_predictions*.jsonl, checked to be complete and in order; `keys`:
    the fields read as the two (record_keys: lm's tokens and nll_sum). Each `optional` field (identity_keys) adds
    a list, None where a record lacks it (files written before it)."""
    if not os.path.isfile(path):
        raise PapaError(f"{path} does not exist (runs before per-example predictions existed have none: delete "
                        f"the run's folder to redo it)")
    columns = tuple([] for _ in (*keys, *optional))
    with open(path) as f:
        for number, line in enumerate(f):
            try:
                record = json.loads(line)
                if record["index"] != number:
                    raise ValueError(f"index {record['index']} where {number} belongs")
                values = [record[key] for key in keys] + [record.get(key) for key in optional]
                for column, value in zip(columns, values):
                    column.append(value)
            except (ValueError, KeyError, TypeError) as err:
                raise PapaError(f"{path}:{number + 1}: not an eval_predictions line ({err}); delete the run's folder "
                                "to redo it") from None
    if not columns[0]:
        raise PapaError(f"{path} has no examples; delete the run's folder to redo it")
    return columns


def as_arrays(task, labels, predictions):
    """The arrays the Trainer scored: float32 for regression (as its logits and labels), int ids otherwise."""
    dtype = np.float32 if task.is_regression else np.int64
    return np.asarray(predictions, dtype=dtype), np.asarray(labels, dtype=dtype)


def metrics_from_predictions(task, path, entity_level=False):
    """The metrics of one eval_predictions*.jsonl, as eval_results.json names them without the prefix."""
    labels, predictions, *scored = read_predictions(path, record_keys(task), scored_keys(task))
    if task.kind == "lm":
        return compute_lm_metrics(predictions, labels, *scored)
    if task.kind == "token":
        return compute_token_metrics(predictions, labels, entity_level=entity_level)
    return compute_glue_metrics(task, *as_arrays(task, labels, predictions))
