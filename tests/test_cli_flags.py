"""Every flag of the four original scripts parses, and each HF example-script flag has its effect (or one clear
error): model/tokenizer names, revision and token, --dataset_name, --debug, --traceback, the output-dir guard."""

import json
import os
import runpy
import sys

import datasets
import pytest
import torch
from cli_fixtures import T, command_error, run_command, tiny_bert, write_cola  # noqa: F401
from conftest import SCRIPTS

from papa.models import pretrained
from papa.runs.arguments import json_to_argv, parse_training_args
from papa.runs.averaging_arguments import parse_averaging_args
from papa.data.custom import resolve_task
from papa.errors import PapaError
from papa.data.tasks import get_task

# every flag of the original run_papa_glue.py / run_papa_ner.py (their dataclasses), with a value
ORIGINAL_TRAINING_FLAGS = {
    "use_papa_preprocess": "true", "task_name": "ner", "dataset_name": "conll2003", "dataset_config_name": "conll2003",
    "max_seq_length": "64", "overwrite_cache": "true", "pad_to_max_length": "true", "max_train_samples": "8",
    "max_eval_samples": "8", "max_predict_samples": "8", "train_file": "t.json", "validation_file": "v.json",
    "test_file": "p.json", "model_name_or_path": "m", "config_name": "c", "tokenizer_name": "k", "cache_dir": "d",
    "use_fast_tokenizer": "false", "model_revision": "v1", "use_auth_token": "true", "use_freeze_extract_pooler": "true",
    "grad_for_classifier_only": "true", "static_heads_dir": "a", "sorting_heads_dir": "s", "static_heads_num": "3",
    "text_column_name": "words", "label_column_name": "tags", "preprocessing_num_workers": "2",
    "label_all_tokens": "true", "return_entity_level_metrics": "true", "overwrite_output_dir": "true",
    "do_predict": "true", "resume_from_checkpoint": "ck", "debug": "underflow_overflow",
}
# every flag of the original run_papa_glue_avgs_creator.py and run_papa_ner_avgs_creator.py (argparse)
ORIGINAL_AVERAGING_FLAGS = {
    "task_name": "ner", "use_papa_preprocess": "true", "cache_dir": "d", "train_file": "t.json",
    "validation_file": "v.json", "max_length": "64", "model_name_or_path": "m", "use_slow_tokenizer": "true",
    "per_device_train_batch_size": "8", "per_device_eval_batch_size": "8", "learning_rate": "5e-5",
    "weight_decay": "0.0", "num_train_epochs": "3", "max_train_steps": "10", "gradient_accumulation_steps": "1",
    "lr_scheduler_type": "linear", "num_warmup_steps": "0", "output_dir": "o", "seed": "1", "hub_model_id": "h",
    "hub_token": "x", "dataset_name": "conll2003", "dataset_config_name": "conll2003", "text_column_name": "words",
    "label_column_name": "tags", "config_name": "c", "tokenizer_name": "k", "sort_output_dir": "s",
    "model_type": "bert", "label_all_tokens": "true", "return_entity_level_metrics": "true", "debug": "true",
    "pad_to_max_length": "true",
}


def argv_of(flags):
    return [token for name, value in flags.items() for token in (f"--{name}", value)]


def test_every_original_training_flag_parses():
    model, data, training = parse_training_args(argv_of(ORIGINAL_TRAINING_FLAGS) + ["--output_dir", "o"])
    assert (model.config_name, model.tokenizer_name, model.model_revision) == ("c", "k", "v1")
    assert model.use_fast_tokenizer is False and model.token is True  # --use_auth_token true: the stored token
    assert (data.dataset_name, data.test_file, data.max_predict_samples) == ("conll2003", "p.json", 8)
    assert (data.text_column_name, data.label_column_name, data.preprocessing_num_workers) == ("words", "tags", 2)
    assert training.overwrite_output_dir and training.do_predict and training.resume_from_checkpoint == "ck"
    assert [str(option.value) for option in training.debug] == ["underflow_overflow"]  # HF's --debug, untouched
    assert parse_training_args(["--output_dir", "o", "--token", "hf_abc"])[0].token == "hf_abc"


def test_every_original_averaging_flag_parses():
    args = parse_averaging_args(argv_of(ORIGINAL_AVERAGING_FLAGS))
    assert args.debug and args.use_slow_tokenizer and args.model_type == "bert" and args.dataset_name == "conll2003"
    assert (args.config_name, args.tokenizer_name, args.text_column_name) == ("c", "k", "words")
    with pytest.raises(PapaError, match="--push_to_hub is not supported.*hf upload"):
        parse_averaging_args(["--output_dir", "o", "--push_to_hub"])


def test_json_argument_files(tmp_path):
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"task_name": "cola", "do_train": True, "max_seq_length": 64, "cache_dir": None,
                                "evaluation_strategy": "epoch", "output_dir": "o"}))
    assert json_to_argv(path) == ["--task_name", "cola", "--do_train", "true", "--max_seq_length", "64",
                                  "--evaluation_strategy", "epoch", "--output_dir", "o"]
    model, data, training = parse_training_args([str(path)])
    assert data.task_name == "cola" and training.do_train and training.eval_strategy == "epoch"
    path.write_text("[1, 2]")
    with pytest.raises(PapaError, match="one JSON object"):
        parse_training_args([str(path)])


@pytest.mark.parametrize("command", ["glue", "glue_avgs"])
def test_model_flags_reach_the_loaders(command, tmp_path, tiny_bert, monkeypatch):
    """--model_revision, --use_auth_token, --config_name, --tokenizer_name and the slow tokenizer reach the hub
    loaders, in the probing script and in the averaging script alike (which must average the same weights)."""
    calls = []

    def spy(kind, real):
        def load(name, **kwargs):
            calls.append((kind, str(name), kwargs.get("revision"), kwargs.get("token"), kwargs.get("use_fast")))
            return real(name, **kwargs)
        return load

    monkeypatch.setattr(pretrained.AutoConfig, "from_pretrained", spy("config", pretrained.AutoConfig.from_pretrained))
    monkeypatch.setattr(pretrained.AutoTokenizer, "from_pretrained",
                        spy("tokenizer", pretrained.AutoTokenizer.from_pretrained))
    fetched = []
    monkeypatch.setattr("huggingface_hub.snapshot_download",
                        lambda repo, **kw: fetched.append((repo, kw["revision"], kw["token"])) or tiny_bert)
    common = ["--model_name_or_path", "someone/tiny-bert", "--model_revision", "v2", "--use_auth_token",
              "--config_name", tiny_bert, "--tokenizer_name", tiny_bert, "--task_name", "cola",
              "--data_dir", write_cola(tmp_path / "cola"), "--output_dir", tmp_path / "out"]
    if command == "glue":
        run_command("glue", common + ["--use_fast_tokenizer", "false", "--do_eval", "--max_seq_length", T,
                                      "--report_to", "none"])
    else:
        run_command("glue_avgs", common + ["--use_slow_tokenizer", "--max_length", T])
    assert fetched == [("someone/tiny-bert", "v2", True)]  # the weights: a snapshot at the revision, with the token
    assert ("config", tiny_bert, "v2", True, None) in calls and ("tokenizer", tiny_bert, "v2", True, False) in calls
    if command == "glue":
        assert "eval_matthews_correlation" in json.loads((tmp_path / "out" / "eval_results.json").read_text())
    else:
        assert (tmp_path / "out" / "avgs.pt").is_file()


def test_model_type_and_slow_tokenizer_errors(tiny_bert):
    path, config, tokenizer = pretrained.load_config_and_tokenizer(None, None, get_task("cola"), ["a", "b"], T,
                                                                   tokenizer_name=tiny_bert, model_type="bert")
    assert path is None and config.model_type == "bert" and config.num_labels == 2  # untrained: no weights folder
    with pytest.raises(PapaError, match="--model_type builds an untrained model.*--tokenizer_name"):
        pretrained.load_config_and_tokenizer(None, None, get_task("cola"), ["a", "b"], T, model_type="bert")
    with pytest.raises(PapaError, match="token tasks need a fast tokenizer"):
        pretrained.load_config_and_tokenizer(tiny_bert, None, get_task("ner"), ["O"], T, use_fast=False)


def test_dataset_name_offline_and_online(tmp_path, tiny_bert, monkeypatch, capsys):
    common = ["--model_name_or_path", tiny_bert, "--dataset_name", "someone/reviews", "--do_eval", "--max_seq_length",
              T, "--report_to", "none"]
    error = command_error("glue", common + ["--output_dir", tmp_path / "off"], capsys)
    assert "hub is offline" in error and "--dataset_name someone/reviews" in error and "--train_file" in error
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
    loaded = []

    def fake_hub(path, name=None, cache_dir=None):
        loaded.append((path, name))
        split = datasets.Dataset.from_dict({"review": ["good film", "bad film", "fine"], "label": [1, 0, 1]},
                                           features=datasets.Features({"review": datasets.Value("string"),
                                                                       "label": datasets.ClassLabel(names=["neg", "pos"])}))
        return datasets.DatasetDict(train=split, validation=split)

    monkeypatch.setattr(datasets, "load_dataset", fake_hub)
    run_command("glue", common + ["--dataset_config_name", "en", "--output_dir", tmp_path / "on"])
    assert set(loaded) == {("someone/reviews", "en")}
    assert json.loads((tmp_path / "on" / "eval_results.json").read_text())["eval_samples"] == 3
    task = resolve_task("sequence", None, dataset_name="someone/reviews", dataset_config_name="en")
    assert task.custom and task.text_columns == ("review",) and task.labels == ("neg", "pos")  # ClassLabel names
    assert resolve_task("token", "ner", dataset_name="someone/reviews") is get_task("ner")


def test_averaging_debug_uses_100_examples(tmp_path, tiny_bert, shared_data):
    run_command("glue_avgs", ["--model_name_or_path", tiny_bert, "--task_name", "cola", "--data_dir",
                              shared_data / "glue" / "CoLA", "--max_length", T, "--use_papa_preprocess", "true",
                              "--debug", "--per_device_train_batch_size", 50, "--output_dir", tmp_path])
    patterns = torch.load(tmp_path / "attention_patterns_sums.pt", weights_only=True)
    assert patterns[0, 0] == 100 and patterns[-1, -1] == 100  # [CLS] and the final [SEP] of each example


def test_averages_record_their_origin_and_another_tasks_are_named(tmp_path, tiny_bert, shared_data, capsys):
    """avgs_info.json says which task and model avgs.pt was averaged over; a probing run of another task (a
    cross-task run may be meant, so it runs) prints a warning naming both tasks."""
    avgs = tmp_path / "avgs"
    run_command("glue_avgs", ["--model_name_or_path", tiny_bert, "--task_name", "cola", "--data_dir",
                              shared_data / "glue" / "CoLA", "--max_length", T, "--max_train_samples", 12,
                              "--per_device_train_batch_size", 8, "--output_dir", avgs])
    info = json.loads((avgs / "avgs_info.json").read_text())
    assert info["task"] == "cola" and info["max_length"] == T and info["num_examples"] == 12
    assert os.path.samefile(info["model"], tiny_bert)
    capsys.readouterr()

    def probe(task, folder):
        run_command("glue", ["--model_name_or_path", tiny_bert, "--task_name", task, "--data_dir",
                             shared_data / "glue" / folder, "--do_eval", "--max_eval_samples", 4,
                             "--max_seq_length", T, "--static_heads_dir", avgs, "--output_dir",
                             tmp_path / f"run{len(list(tmp_path.iterdir()))}"])
        return capsys.readouterr().out

    assert f"[papa] warning: the averages in {avgs} are cola's, but this run is sst2" in probe("sst2", "SST-2")
    assert "warning" not in probe("cola", "CoLA")
    (avgs / "avgs_info.json").unlink()  # averages of the original code, or of an earlier version: nothing to say
    assert "warning" not in probe("sst2", "SST-2")


def test_traceback_switch(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPA_DEBUG", "0")  # restored afterwards, though --traceback sets it to 1
    monkeypatch.setattr(sys, "argv", ["x", "--task_name", "nope", "--output_dir", str(tmp_path), "--traceback"])
    with pytest.raises(PapaError, match="unknown task 'nope'"):
        runpy.run_path(str(SCRIPTS / "run_papa_glue_avgs_creator.py"), run_name="__main__")


def test_output_dir_guard_and_bad_checkpoint(tmp_path, capsys):
    cola = write_cola(tmp_path / "cola")
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("x")
    argv = ["--task_name", "cola", "--data_dir", cola, "--do_train", "--max_seq_length", T]
    error = command_error("glue", argv + ["--output_dir", out], capsys)
    assert "already exists and is not empty; use --overwrite_output_dir" in error
    error = command_error("glue", argv + ["--output_dir", tmp_path / "new", "--resume_from_checkpoint",
                                          tmp_path / "nowhere"], capsys)
    assert "--resume_from_checkpoint" in error and "nowhere" in error
    assert not (tmp_path / "new").exists() and sorted(p.name for p in out.iterdir()) == ["old.txt"]


def test_data_errors_name_the_fix(tmp_path, capsys):
    error = command_error("glue", ["--do_eval", "--output_dir", tmp_path / "o"], capsys)
    assert "--task_name is required" in error and "--train_file/--validation_file" in error
    tsv = tmp_path / "train.tsv"
    tsv.write_text("sentence\tlabel\nx\t1\n")
    error = command_error("glue", ["--train_file", tsv, "--do_train", "--output_dir", tmp_path / "o"], capsys)
    assert "must be CSV or JSON" in error and "pass --task_name" in error
    error = command_error("ner", ["--task_name", "mytags", "--do_eval", "--output_dir", tmp_path / "o"], capsys)
    assert "unknown task 'mytags'" in error and "needs --train_file" in error
    error = command_error("glue", ["--task_name", "repeat", "--do_predict", "--output_dir", tmp_path / "o"], capsys)
    assert "has no test split" in error


@pytest.mark.parametrize("parse", ["papa.sweep.arguments:parse_sweep_args", "papa.runs.arguments:parse_training_args",
                                   "papa.runs.averaging_arguments:parse_averaging_args"])
def test_help_does_not_contradict_itself(parse, capsys):
    """A flag whose help names its default, or whose default is None, gets no "(default: None)" after it."""
    import importlib

    module, name = parse.split(":")
    with pytest.raises(SystemExit):
        getattr(importlib.import_module(module), name)(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: None)" not in text
    assert "Default: the bundled" in text
    assert "(default: " in text  # the other defaults are still shown
