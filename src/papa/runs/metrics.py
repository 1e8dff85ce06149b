"""GLUE and CoNLL metrics computed locally (no `evaluate`, no hub), with HF's key names and values.

compute_glue_metrics matches HF's glue metric plus run_glue's "combined_score" (which metrics a
task reports is its TaskSpec's `metrics`, keys of SEQUENCE_METRICS; a custom task has no combined score),
compute_token_metrics matches HF's seqeval metric as run_ner reports it; compute_lm_metrics gives the lm
task's loss (nats per predicted token) and perplexity from per-block sums; `trainer_metrics` makes the
Trainer's compute_metrics for a task. Values are plain Python numbers so they go straight into JSON.
"""

import math
import warnings

import numpy as np

from ..errors import PapaError
from ..data.tasks import get_task

IGNORE_INDEX = -100

# metric name -> f(predictions, references); predictions are class ids (scores for regression)
# (scipy and sklearn are imported when a metric runs: they cost a second at every stage's start)
def _f1(p, r):
    from sklearn.metrics import f1_score
    return float(f1_score(r, p))


def _matthews(p, r):
    from sklearn.metrics import matthews_corrcoef
    return float(matthews_corrcoef(r, p))


def _pearson(p, r):
    from scipy.stats import pearsonr
    return float(pearsonr(p, r)[0])


def _spearman(p, r):
    from scipy.stats import spearmanr
    return float(spearmanr(p, r)[0])


SEQUENCE_METRICS = {
    "accuracy": lambda p, r: float((p == r).mean()),
    "f1": _f1,
    "matthews_correlation": _matthews,
    "pearson": _pearson,
    "spearmanr": _spearman,
    "mse": lambda p, r: float(((p - r) ** 2).mean()),  # custom regression tasks, as run_glue reports them
}


def compute_glue_metrics(task, predictions, references) -> dict[str, float]:
    """HF glue metric for `task` (a TaskSpec or a name): predictions are class ids (scores for stsb)."""
    task = get_task(task, "sequence")
    predictions, references = np.asarray(predictions), np.asarray(references)
    if predictions.shape != references.shape or predictions.ndim != 1:
        raise PapaError(f"{task.name} metrics need two flat arrays of equal length, got shapes "
                        f"{predictions.shape} and {references.shape}")
    if len(references) == 0:
        raise PapaError(f"{task.name} metrics need at least one example")
    result = {name: SEQUENCE_METRICS[name](predictions, references) for name in task.metrics}
    if len(result) > 1 and not task.custom:  # as HF run_glue adds for a GLUE metric with several values
        result["combined_score"] = float(np.mean(list(result.values())))
    return result


def compute_token_metrics(predictions: list[list[str]], references: list[list[str]],
                          entity_level: bool = False) -> dict[str, float]:
    """Overall seqeval precision/recall/f1 (micro average over entities) and token accuracy.

    With `entity_level`, also "<TYPE>_precision/_recall/_f1/_number" per entity type, as HF run_ner's
    --return_entity_level_metrics flattens them ("_number" = count of gold entities, an int).
    """
    from seqeval.metrics import accuracy_score, classification_report

    if len(predictions) != len(references) or any(len(p) != len(r) for p, r in zip(predictions, references)):
        raise PapaError("token predictions and references must have the same sentences and lengths")
    with warnings.catch_warnings():
        # POS/chunk tags like "NN" are not IOB entity tags; seqeval warns once per tag, uselessly
        warnings.filterwarnings("ignore", message=".*seems not to be NE tag")
        report = classification_report(references, predictions, output_dict=True)
        accuracy = accuracy_score(references, predictions)
    overall = report.pop("micro avg")
    report.pop("macro avg")
    report.pop("weighted avg")
    result = {"precision": float(overall["precision"]), "recall": float(overall["recall"]),
              "f1": float(overall["f1-score"]), "accuracy": float(accuracy)}
    if entity_level:
        for entity_type, scores in report.items():
            result[f"{entity_type}_precision"] = float(scores["precision"])
            result[f"{entity_type}_recall"] = float(scores["recall"])
            result[f"{entity_type}_f1"] = float(scores["f1-score"])
            result[f"{entity_type}_number"] = int(scores["support"])
    return result


def compute_lm_metrics(nll_sums, tokens, correct=None) -> dict[str, float]:
    """{"loss": Σ nll / Σ tokens, "perplexity": exp(loss)} from each block's summed next-token negative
    log-likelihood and its number of predicted tokens (exact sums, math.fsum: any order gives the same bits). With
    `correct` (the retrieval tasks: each example's scored tokens that are the argmax) also "exact_match", the fraction
    of examples whose every scored token is (greedy decoding gives the answer), and "token_accuracy"."""
    total = math.fsum(int(t) for t in tokens)
    if total == 0:
        raise PapaError("lm metrics need at least one predicted token")
    loss = math.fsum(float(v) for v in nll_sums) / total
    result = {"loss": loss, "perplexity": math.exp(loss) if loss < 709 else math.inf}
    if correct is not None:
        pairs = [(int(c), int(t)) for c, t in zip(correct, tokens)]
        result = {"exact_match": sum(c == t for c, t in pairs) / len(pairs),
                  "token_accuracy": sum(c for c, _ in pairs) / total, **result}
    return result


def predicted_tokens(label_ids):
    """(N,) how many next-token predictions each block of labels (N, T) scores."""
    return (np.asarray(label_ids)[:, 1:] != IGNORE_INDEX).sum(1)


def token_predictions_to_tags(predictions, label_ids, label_list) -> tuple[list[list[str]], list[list[str]]]:
    """(predicted tags, gold tags) per sentence from logits [N,T,C] or ids [N,T], dropping -100 positions."""
    predictions, label_ids = np.asarray(predictions), np.asarray(label_ids)
    if predictions.ndim == 3:
        predictions = predictions.argmax(axis=-1)
    if predictions.shape != label_ids.shape:
        raise PapaError(f"predictions {predictions.shape} and labels {label_ids.shape} differ in shape")
    predicted_tags, gold_tags = [], []
    for predicted_row, gold_row in zip(predictions, label_ids):
        keep = gold_row != IGNORE_INDEX
        predicted_tags.append([label_list[int(p)] for p in predicted_row[keep]])
        gold_tags.append([label_list[int(g)] for g in gold_row[keep]])
    return predicted_tags, gold_tags


def trainer_metrics(task, label_list, entity_level=False):
    """A Trainer `compute_metrics` for `task` (a TaskSpec); `label_list`: id -> label name (None: regression).

    It keeps the last (logits, label ids) it scored (lm: per-example scores and the examples' labels) as
    `compute.last`, so the run can write the very predictions behind its metrics (papa.runs.predictions) without a
    second pass over the evaluation set.
    """
    def compute(prediction):
        logits = prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
        compute.last = (logits, prediction.label_ids)
        if task.kind == "lm":  # the predictions are per-example scores (papa.runs.lm_evaluation)
            return compute_lm_metrics(logits[:, 0], predicted_tokens(prediction.label_ids),
                                      logits[:, 2] if task.retrieval else None)
        if task.kind == "token":
            predicted, gold = token_predictions_to_tags(logits, prediction.label_ids, label_list)
            return compute_token_metrics(predicted, gold, entity_level=entity_level)
        predicted = logits.reshape(-1) if task.is_regression else np.argmax(logits, axis=-1)
        return compute_glue_metrics(task, predicted, prediction.label_ids)
    compute.last = None
    return compute
