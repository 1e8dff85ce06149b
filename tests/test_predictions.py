"""Per-example evaluation predictions (papa.runs.predictions): every --do_eval run writes eval_predictions.jsonl
(MNLI also eval_predictions_mnli-mm.jsonl), and the metrics computed from the file alone are exactly the
ones in eval_results.json, for each kind of task: classification, regression, token tasks, MNLI's two splits.

The runs are in-process on the tiny random BERT (tests/cli_fixtures.py), a few seconds each.
"""

import json

import numpy as np
import pytest
from cli_fixtures import (COLA_ROWS, CONLL_SENTENCES, T, papa_flags, run_command, tiny_bert, write_cola,  # noqa: F401
                          write_conll, write_papa_inputs)

from papa.errors import PapaError
from papa.runs.metrics import trainer_metrics
from papa.runs.predictions import metric_file, metrics_from_predictions, predictions_file, read_predictions, \
    write_eval_predictions
from papa.data.tasks import get_task

EVAL = ["--do_eval", "--max_seq_length", T, "--report_to", "none", "--per_device_eval_batch_size", 3]


def assert_reproduces(out, task, prefixes=("eval",)):
    """Each split's metrics from its predictions file equal eval_results.json's, key for key, exactly."""
    results = json.loads((out / "eval_results.json").read_text())
    for prefix in prefixes:
        path = out / predictions_file(prefix)
        from_file = metrics_from_predictions(task, path)
        reported = {key[len(prefix) + 1:]: value for key, value in results.items() if key.startswith(prefix + "_")
                    and key[len(prefix) + 1:] in from_file}
        assert reported and reported == from_file, (prefix, reported, from_file)
        lines = path.read_text().splitlines()
        assert len(lines) == results[f"{prefix}_samples"]
        assert [json.loads(line)["index"] for line in lines] == list(range(len(lines)))
    return results


def train_and_evaluate(tmp_path, tiny_bert, command, task_name, data_dir):
    """A one-epoch PAPA probing run with --do_eval; its output folder."""
    avgs, sort = write_papa_inputs(tmp_path)
    out = tmp_path / "out"
    run_command(command, ["--model_name_or_path", tiny_bert, "--task_name", task_name, "--data_dir", data_dir,
                          "--do_train", "--num_train_epochs", 1, "--output_dir", out, *papa_flags(avgs, sort),
                          "--do_eval"])
    assert_reproduces(out, get_task(task_name))
    return out


def test_classification_after_training(tmp_path, tiny_bert):
    out = train_and_evaluate(tmp_path, tiny_bert, "glue", "cola", write_cola(tmp_path / "cola"))
    record = json.loads((out / "eval_predictions.jsonl").read_text().splitlines()[0])
    assert record["label"] == int(COLA_ROWS[0][0]) and record["prediction"] in (0, 1)


def test_regression_stsb(tmp_path, tiny_bert):
    folder = tmp_path / "STS-B"
    folder.mkdir()
    rows = "".join(f"{i}\tmain\t{text}\ta short one {i} .\t{(i * 0.7) % 5:.3f}\n"
                   for i, (_, text) in enumerate(COLA_ROWS))
    for name in ("train.tsv", "dev.tsv"):
        (folder / name).write_text("index\tgenre\tsentence1\tsentence2\tscore\n" + rows)
    out = tmp_path / "out"
    run_command("glue", ["--model_name_or_path", tiny_bert, "--task_name", "stsb", "--data_dir", folder,
                         "--output_dir", out, *EVAL])
    results = assert_reproduces(out, get_task("stsb"))
    assert {"eval_pearson", "eval_spearmanr"} <= set(results)
    labels, predictions = read_predictions(out / "eval_predictions.jsonl")
    assert labels[1] == pytest.approx(0.7) and all(isinstance(p, float) for p in predictions)


def test_mnli_writes_both_files(tmp_path, tiny_bert):
    header = "index\tgenre\tsentence1\tsentence2\tgold_label\n"
    gold = get_task("mnli").labels
    for name, n in (("train.tsv", 4), ("dev_matched.tsv", 5), ("dev_mismatched.tsv", 4)):
        (tmp_path / name).write_text(header + "".join(f"{i}\tfiction\tA man {i}.\tA dog {name}.\t{gold[i % 3]}\n"
                                                      for i in range(n)))
    out = tmp_path / "out"
    run_command("glue", ["--model_name_or_path", tiny_bert, "--task_name", "mnli", "--data_dir", tmp_path,
                         "--output_dir", out, *EVAL])
    assert_reproduces(out, get_task("mnli"), prefixes=("eval", "eval_mnli-mm"))
    assert [json.loads(line)["label"] for line in (out / "eval_predictions_mnli-mm.jsonl").read_text().splitlines()] \
        == [0, 1, 2, 0]


def test_token_task_lists_tag_names_of_the_scored_words(tmp_path, tiny_bert):
    out = train_and_evaluate(tmp_path, tiny_bert, "ner", "ner", write_conll(tmp_path / "c"))
    labels, predictions = read_predictions(out / "eval_predictions.jsonl")
    assert labels == [[t[3] for t in s] for s in CONLL_SENTENCES]
    assert [len(p) for p in predictions] == [len(s) for s in CONLL_SENTENCES]


@pytest.mark.parametrize("task_name", ["cola", "mrpc", "stsb", "ner"])
def test_records_reproduce_the_trainer_metrics_on_random_outputs(tmp_path, task_name):
    """Without a model: the Trainer's compute_metrics on random logits, and the file written from the same ones."""
    from transformers import EvalPrediction

    task, rng = get_task(task_name), np.random.default_rng(0)
    if task.kind == "token":
        logits = rng.normal(size=(6, 9, len(task.labels))).astype(np.float32)
        label_ids = rng.integers(0, len(task.labels), size=(6, 9))
        label_ids[:, 0] = label_ids[:, -2:] = -100  # special tokens and padding
    elif task.is_regression:
        logits, label_ids = rng.normal(size=(20, 1)).astype(np.float32), rng.uniform(0, 5, 20).astype(np.float32)
    else:
        logits, label_ids = rng.normal(size=(20, 2)).astype(np.float32), rng.integers(0, 2, 20)
    compute = trainer_metrics(task, None if task.labels is None else list(task.labels))
    reported = compute(EvalPrediction(predictions=logits, label_ids=label_ids))
    assert compute.last[0] is logits
    write_eval_predictions(task, task.labels, logits, label_ids, tmp_path / "p.jsonl")
    assert metrics_from_predictions(task, tmp_path / "p.jsonl") == reported


def test_metric_files_and_bad_files(tmp_path):
    assert predictions_file("eval") == "eval_predictions.jsonl"
    assert predictions_file("eval_mnli-mm") == "eval_predictions_mnli-mm.jsonl"
    assert metric_file("eval_mnli-mm_accuracy") == ("eval_predictions_mnli-mm.jsonl", "accuracy")
    assert metric_file("eval_f1") == ("eval_predictions.jsonl", "f1")
    with pytest.raises(PapaError, match="does not exist"):
        read_predictions(tmp_path / "none.jsonl")
    (tmp_path / "bad.jsonl").write_text('{"index": 0, "label": 1, "prediction": 1}\n{"index": 5}\n')
    with pytest.raises(PapaError, match="bad.jsonl:2"):
        read_predictions(tmp_path / "bad.jsonl")
