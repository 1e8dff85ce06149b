"""papa.runs.metrics against values counted and computed by hand."""

import math
import warnings

import numpy as np
import pytest

from papa.errors import PapaError
from papa.runs.metrics import compute_glue_metrics, compute_token_metrics, token_predictions_to_tags

# 10 examples: TP = 3, FN = 1, FP = 2, TN = 4
REFS = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
PREDS = [1, 1, 1, 0, 1, 1, 0, 0, 0, 0]


def test_cola_matthews_by_formula():
    tp, tn, fp, fn = 3, 4, 2, 1
    mcc = (tp * tn - fp * fn) / math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))  # 10 / sqrt(600)
    result = compute_glue_metrics("cola", PREDS, REFS)
    assert result == {"matthews_correlation": pytest.approx(mcc)}
    assert mcc == pytest.approx(0.4082482905)
    assert type(result["matthews_correlation"]) is float


def test_mrpc_accuracy_f1_combined():
    accuracy = 7 / 10
    f1 = 2 * 3 / (2 * 3 + 2 + 1)  # 2 TP / (2 TP + FP + FN) = 2/3
    result = compute_glue_metrics("MRPC", np.array(PREDS), np.array(REFS))
    assert set(result) == {"accuracy", "f1", "combined_score"}
    assert result["accuracy"] == pytest.approx(accuracy)
    assert result["f1"] == pytest.approx(f1)
    assert result["combined_score"] == pytest.approx((accuracy + f1) / 2)
    assert set(compute_glue_metrics("qqp", PREDS, REFS)) == {"accuracy", "f1", "combined_score"}
    assert all(type(v) is float for v in result.values())


def test_stsb_pearson_spearman_by_hand():
    predictions = [1.0, 2.0, 3.0, 4.0]
    references = [2.0, 1.0, 4.0, 30.0]
    # Pearson: dx = (-1.5, -.5, .5, 1.5), dy = (-7.25, -8.25, -5.25, 20.75) around means 2.5 and 9.25
    pearson = 43.5 / math.sqrt(5 * 578.75)
    # Spearman: ranks (1,2,3,4) vs (2,1,3,4), sum d^2 = 2: 1 - 6*2 / (4 * (16 - 1))
    spearman = 1 - 6 * 2 / (4 * 15)
    result = compute_glue_metrics("sts-b", predictions, references)
    assert result["pearson"] == pytest.approx(pearson)
    assert result["spearmanr"] == pytest.approx(spearman)  # 0.8
    assert result["combined_score"] == pytest.approx((pearson + spearman) / 2)
    assert set(result) == {"pearson", "spearmanr", "combined_score"}


@pytest.mark.parametrize("task", ["sst2", "qnli", "rte", "wnli", "repeat"])
def test_accuracy_tasks(task):
    assert compute_glue_metrics(task, [1, 0, 1, 1, 0], [1, 0, 0, 1, 0]) == {"accuracy": pytest.approx(4 / 5)}


def test_mnli_three_classes():
    assert compute_glue_metrics("mnli", [0, 1, 2, 2], [0, 1, 1, 2]) == {"accuracy": 0.75}


def test_glue_metric_shape_errors():
    with pytest.raises(PapaError, match="equal length"):
        compute_glue_metrics("sst2", [1, 0], [1])
    with pytest.raises(PapaError, match="unknown task"):
        compute_glue_metrics("glue", [1], [1])


REF_TAGS = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O", "B-PER"]]
PRED_TAGS = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "O", "O"]]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.UndefinedMetricWarning")
def test_seqeval_overall_and_entity_level_by_hand():
    # gold entities: PER(0-1), LOC(3), ORG(s2 0), PER(s2 2) = 4; predicted: PER(0-1), ORG(3), ORG(s2 0) = 3
    # correct: PER(0-1), ORG(s2 0) = 2; tokens right: 5 of 7
    precision, recall = 2 / 3, 2 / 4
    f1 = 2 * precision * recall / (precision + recall)  # 4/7
    overall = compute_token_metrics(PRED_TAGS, REF_TAGS)
    assert overall == pytest.approx({"precision": precision, "recall": recall, "f1": f1, "accuracy": 5 / 7})

    detailed = compute_token_metrics(PRED_TAGS, REF_TAGS, entity_level=True)
    assert detailed == pytest.approx({
        "precision": precision, "recall": recall, "f1": f1, "accuracy": 5 / 7,
        # PER: 2 gold, 1 predicted, 1 right
        "PER_precision": 1.0, "PER_recall": 0.5, "PER_f1": 2 / 3, "PER_number": 2,
        # LOC: 1 gold, none predicted
        "LOC_precision": 0.0, "LOC_recall": 0.0, "LOC_f1": 0.0, "LOC_number": 1,
        # ORG: 1 gold, 2 predicted, 1 right
        "ORG_precision": 0.5, "ORG_recall": 1.0, "ORG_f1": 2 / 3, "ORG_number": 1,
    })


def test_pos_tags_do_not_warn():
    # POS tags are not IOB: seqeval reads "NN" as tag "N" of type "N" and would warn for each
    refs, preds = [["NN", "VBZ", "DT", "NN"]], [["NN", "VBD", "DT", "NN"]]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = compute_token_metrics(preds, refs)
    assert not [w for w in caught if "NE tag" in str(w.message)]
    assert result["accuracy"] == pytest.approx(3 / 4)


def test_token_predictions_to_tags_drops_ignored_positions():
    labels = ["B-PER", "I-PER", "O"]
    logits = np.array([[[9, 0, 0], [0, 9, 0], [0, 0, 9], [9, 0, 0]],
                       [[0, 0, 9], [9, 0, 0], [0, 9, 0], [0, 0, 9]]], dtype=float)
    label_ids = np.array([[-100, 1, 2, -100], [-100, 0, 0, -100]])
    want = ([["I-PER", "O"], ["B-PER", "I-PER"]], [["I-PER", "O"], ["B-PER", "B-PER"]])
    assert token_predictions_to_tags(logits, label_ids, labels) == want
    assert token_predictions_to_tags(logits.argmax(-1), label_ids, labels) == want
    with pytest.raises(PapaError, match="differ in shape"):
        token_predictions_to_tags(logits[:, :3], label_ids, labels)
