"""The original scripts' HF behaviours, run in-process on a tiny BERT: --do_predict files checked against the
saved model's outputs, resuming a checkpoint to the uninterrupted run's result, the canonical CoNLL labels on
real data, custom CSV/JSON tasks (also through the sweep), JSON argument files."""

import json
import os
import shutil

import numpy as np
import torch
from cli_fixtures import (COLA_ROWS, CONLL_SENTENCES, T, papa_flags, run_command, tiny_bert, write_cola,  # noqa: F401
                          write_conll, write_papa_inputs)
from safetensors.torch import load_file
from transformers import AutoTokenizer

from papa.models.modeling import load_papa_model
from papa.data.preprocessing import tokenize_sequence_examples, tokenize_token_examples
from papa.data.tasks import get_task


def logits_of(model_dir, batch):
    model = load_papa_model(str(model_dir))
    inputs = {k: torch.tensor(batch[k]) for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
    with torch.no_grad():
        return model(**inputs).logits.numpy()


def test_glue_predictions_are_the_saved_models(tmp_path, tiny_bert):
    avgs, sort = write_papa_inputs(tmp_path)
    data = write_cola(tmp_path / "cola")
    out = tmp_path / "out"
    run_command("glue", ["--model_name_or_path", tiny_bert, "--task_name", "cola", "--data_dir", data, "--do_train",
                         "--do_predict", "--max_predict_samples", 5, "--num_train_epochs", 1, "--output_dir", out,
                         *papa_flags(avgs, sort)])
    lines = (out / "predict_results_cola.txt").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 6
    sentences = [text for _, text in COLA_ROWS[:5]]
    batch = tokenize_sequence_examples(AutoTokenizer.from_pretrained(out), {"sentence": sentences}, "sentence", None,
                                       T, papa_layout=True, pad_to_max_length=True)
    names = get_task("cola").labels
    assert lines[1:] == [f"{i}\t{names[p]}" for i, p in enumerate(logits_of(out, batch).argmax(-1))]
    assert not (out / "eval_results.json").exists()


def test_mnli_predicts_matched_and_mismatched(tmp_path, tiny_bert):
    header = "index\tpromptID\tpairID\tgenre\tsentence1\tsentence2\n"
    for name, n in (("test_matched.tsv", 3), ("test_mismatched.tsv", 2)):
        (tmp_path / name).write_text(header + "".join(f"{i}\t1\t1e\tfiction\tA man {i}.\tA dog.\n" for i in range(n)))
    run_command("glue", ["--model_name_or_path", tiny_bert, "--task_name", "mnli", "--data_dir", tmp_path,
                         "--do_predict", "--output_dir", tmp_path / "out", "--max_seq_length", T, "--report_to", "none"])
    for name, n in (("predict_results_mnli.txt", 3), ("predict_results_mnli-mm.txt", 2)):
        lines = (tmp_path / "out" / name).read_text().splitlines()
        assert len(lines) == n + 1 and all(line.split("\t")[1] in get_task("mnli").labels for line in lines[1:])


def test_token_predictions_and_workers(tmp_path, tiny_bert, monkeypatch):
    import datasets

    calls = []
    real_map = datasets.Dataset.map
    monkeypatch.setattr(datasets.Dataset, "map", lambda self, *a, **kw: calls.append(kw.get("num_proc"))
                        or real_map(self, *a, **kw))
    avgs, sort = write_papa_inputs(tmp_path)
    out = tmp_path / "out"
    run_command("ner", ["--model_name_or_path", tiny_bert, "--task_name", "ner", "--data_dir", write_conll(tmp_path / "c"),
                        "--do_train", "--do_predict", "--num_train_epochs", 1, "--output_dir", out,
                        "--preprocessing_num_workers", 2, "--label_all_tokens", *papa_flags(avgs, sort)])
    assert 2 in calls  # --preprocessing_num_workers reached datasets.map
    tokenizer = AutoTokenizer.from_pretrained(out)
    labels = list(get_task("ner").labels)
    words = {"tokens": [[w for w, *_ in s] for s in CONLL_SENTENCES],
             "tags": [[labels.index(t[3]) for t in s] for s in CONLL_SENTENCES]}
    batch = tokenize_token_examples(tokenizer, words, T, True, True, True, labels)
    predicted = logits_of(out, batch).argmax(-1)
    want = [" ".join(labels[p] for p, g in zip(row, gold) if g != -100) for row, gold in zip(predicted, batch["labels"])]
    assert (out / "predictions.txt").read_text().splitlines() == want
    results = json.loads((out / "predict_results.json").read_text())
    assert {"predict_f1", "predict_precision", "predict_recall", "predict_accuracy"} <= set(results)


def test_resume_equals_the_uninterrupted_run(tmp_path, tiny_bert):
    """A PAPA probe (trainable constant matrices) saved at epoch 1 of 2 resumes to the same weights and metrics."""
    avgs, sort = write_papa_inputs(tmp_path)
    data = write_cola(tmp_path / "cola", test=False)
    argv = ["--model_name_or_path", tiny_bert, "--task_name", "cola", "--data_dir", data, "--do_train", "--do_eval",
            "--num_train_epochs", 2, "--save_strategy", "epoch", *papa_flags(avgs, sort),
            "--grad_for_classifier_only", "false", "--grad_for_classifier_and_static_only", "true"]
    out = tmp_path / "run"
    run_command("glue", argv + ["--output_dir", out])
    assert sorted(p for p in os.listdir(out) if p.startswith("checkpoint-")) == ["checkpoint-2", "checkpoint-4"]
    uninterrupted = json.loads((out / "eval_results.json").read_text())
    weights = load_file(out / "model.safetensors")
    for name in os.listdir(out):  # "interrupted" after epoch 1: only its checkpoint is left
        if name != "checkpoint-2":
            shutil.rmtree(out / name) if (out / name).is_dir() else os.remove(out / name)
    run_command("glue", argv + ["--output_dir", out])  # finds checkpoint-2 by itself
    resumed = json.loads((out / "eval_results.json").read_text())
    for key in ("eval_loss", "eval_matthews_correlation", "epoch"):
        assert resumed[key] == uninterrupted[key], key
    again = load_file(out / "model.safetensors")
    assert "pooler.weights_per_layer" in again and any("constant_matrices" in k for k in again)
    assert all(torch.equal(weights[k], again[k]) for k in weights)
    # --resume_from_checkpoint names the checkpoint explicitly, into a fresh folder
    run_command("glue", argv + ["--output_dir", tmp_path / "explicit", "--resume_from_checkpoint", out / "checkpoint-2"])
    explicit = load_file(tmp_path / "explicit" / "model.safetensors")
    assert all(torch.equal(weights[k], explicit[k]) for k in weights)


def test_pos_validation_tag_missing_from_the_training_slice(tmp_path, tiny_bert, shared_data):
    from papa.data.conll import read_conll

    train_tags = {t for s in read_conll(shared_data / "conll2003/train.txt", 1)[1][:4] for t in s}
    valid_tags = {t for s in read_conll(shared_data / "conll2003/valid.txt", 1)[1][:16] for t in s}
    assert valid_tags - train_tags  # the slice lacks tags the validation sentences have
    out = tmp_path / "pos"
    run_command("ner", ["--model_name_or_path", tiny_bert, "--task_name", "pos", "--data_dir", shared_data / "conll2003",
                        "--do_train", "--do_eval", "--max_train_samples", 4, "--max_eval_samples", 16,
                        "--num_train_epochs", 1, "--max_seq_length", T, "--output_dir", out, "--report_to", "none"])
    assert "eval_accuracy" in json.loads((out / "eval_results.json").read_text())
    config = json.loads((out / "config.json").read_text())
    assert [config["id2label"][str(i)] for i in range(47)] == list(get_task("pos").labels)


def write_csv(path, header, rows):
    path.write_text(header + "\n" + "".join(",".join(map(str, row)) + "\n" for row in rows))
    return path


def test_custom_csv_classification_from_a_json_arguments_file(tmp_path, tiny_bert):
    rows = [(text.replace(",", ""), "good" if label == "1" else "bad") for label, text in COLA_ROWS]
    files = {split: write_csv(tmp_path / f"{split}.csv", "text,label", rows) for split in ("train", "dev", "test")}
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("a file that was there before")  # non-empty: needs --overwrite_output_dir
    args = {"model_name_or_path": tiny_bert, "train_file": str(files["train"]), "validation_file": str(files["dev"]),
            "test_file": str(files["test"]), "do_train": True, "do_eval": True, "do_predict": True,
            "max_seq_length": T, "num_train_epochs": 1, "output_dir": str(out), "overwrite_output_dir": True,
            "evaluation_strategy": "no", "report_to": "none", "learning_rate": 1e-3}
    (tmp_path / "args.json").write_text(json.dumps(args))
    run_command("glue", [tmp_path / "args.json"])
    results = json.loads((out / "eval_results.json").read_text())
    assert "eval_accuracy" in results and "eval_combined_score" not in results
    assert json.loads((out / "config.json").read_text())["id2label"] == {"0": "bad", "1": "good"}  # sorted values
    lines = (out / "predict_results_custom.txt").read_text().splitlines()
    assert len(lines) == 9 and {line.split("\t")[1] for line in lines[1:]} <= {"bad", "good"}


def test_custom_csv_regression_with_original_token_types(tmp_path, tiny_bert):
    rows = [(text.replace(",", ""), "a short one .", float(i) / 4) for i, (_, text) in enumerate(COLA_ROWS)]
    header = "sentence1,sentence2,label"
    files = {split: write_csv(tmp_path / f"{split}.csv", header, rows) for split in ("train", "dev", "test")}
    out = tmp_path / "out"
    run_command("glue", ["--model_name_or_path", tiny_bert, "--train_file", files["train"], "--validation_file",
                         files["dev"], "--test_file", files["test"], "--do_train", "--do_eval", "--do_predict",
                         "--num_train_epochs", 1, "--max_seq_length", T, "--use_papa_preprocess", "--output_dir", out,
                         "--use_freeze_extract_pooler", "true", "--original_token_types", "--report_to", "none"])
    results = json.loads((out / "eval_results.json").read_text())
    assert {"eval_mse", "eval_pearson"} <= set(results) and "eval_combined_score" not in results
    lines = (out / "predict_results_custom.txt").read_text().splitlines()[1:]
    examples = {"sentence1": [r[0] for r in rows], "sentence2": [r[1] for r in rows]}
    tokenizer = AutoTokenizer.from_pretrained(out)

    def scores(original_token_types):
        batch = tokenize_sequence_examples(tokenizer, examples, "sentence1", "sentence2", T, True, True,
                                           original_token_types)
        return [f"{i}\t{s:3.3f}" for i, s in enumerate(logits_of(out, batch).reshape(-1))]

    assert lines == scores(True) and lines != scores(False)  # the switch reached the tokenisation


def test_custom_json_token_task_with_column_names(tmp_path, tiny_bert, capsys):
    from cli_fixtures import command_error

    def write_json(name, sentences):
        path = tmp_path / name
        path.write_text("".join(json.dumps({"id": i, "words": [w for w, *_ in s], "labels": [t[2] for t in s]}) + "\n"
                                for i, s in enumerate(sentences)))
        return path

    train, dev = write_json("train.json", CONLL_SENTENCES), write_json("dev.json", CONLL_SENTENCES[:2])
    common = ["--model_name_or_path", tiny_bert, "--task_name", "chunks", "--train_file", train, "--text_column_name",
              "words", "--label_column_name", "labels", "--max_seq_length", T, "--report_to", "none"]
    run_command("ner", common + ["--validation_file", dev, "--do_train", "--do_eval", "--num_train_epochs", 1,
                                 "--output_dir", tmp_path / "out"])
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert list(config["label2id"]) == ["B-NP", "B-VP", "I-NP"]  # the training file's tags, sorted
    unseen = write_json("unseen.json", [[("x", "NN", "B-PP", "O")]])
    error = command_error("ner", common + ["--validation_file", unseen, "--do_eval", "--output_dir", tmp_path / "e"],
                          capsys)
    assert "unseen.json: tag(s) B-PP do not occur in the training data" in error


def test_custom_csv_through_the_sweep(tmp_path, tiny_bert, monkeypatch):
    """No --task_name, CSV files: every stage (run in-process here) reads the task off --train_file."""
    import importlib

    from papa.sweep.arguments import parse_sweep_args
    from papa.data.custom import resolve_task
    from papa.sweep import run_sweep, stages

    def in_process(command, env, log_path, on_progress, echo=None):
        module, argv = command[2], command[3:]
        assert "--task_name" not in argv and "--train_file" in argv
        try:
            importlib.import_module(module).main(argv)
        except SystemExit as exit_:
            return exit_.code, []
        open(log_path, "w").close()
        return 0, []

    monkeypatch.setattr(stages, "run_logged", in_process)
    rows = [(text.replace(",", ""), label) for label, text in COLA_ROWS]
    train = write_csv(tmp_path / "train.csv", "sentence,label", rows)
    args, passthrough = parse_sweep_args(["--model_name_or_path", tiny_bert, "--train_file", str(train),
                                          "--validation_file", str(train), "--output_dir", str(tmp_path / "sweep"),
                                          "--static_heads_nums", "12", "--num_train_epochs", "1",
                                          "--max_seq_length", str(T), "--report_to", "none"])
    task = resolve_task(None, args.task_name, args.train_file)
    assert task.custom and task.text_columns == ("sentence",) and task.labels == ("0", "1")
    results = run_sweep(args, task, passthrough)
    header = open(results).read().splitlines()[0].split(",")
    assert header[:4] == ["k", "fraction_constant", "n_seeds", "eval_accuracy"]
    assert np.isfinite(json.loads((tmp_path / "sweep" / "k_12" / "eval_results.json").read_text())["eval_accuracy"])
