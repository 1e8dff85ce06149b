"""A --model_name_or_path (or --config_name, --tokenizer_name) that can only be a local path and leads nowhere: one
`error: no such folder: …` line from every command, before anything runs; hub ids still go to the hub."""

import os

import pytest

from papa.cli import benchmark, glue, glue_avgs, ner, ner_avgs, sweep
from papa.errors import PapaError
from papa.models.bundled import check_model_path, local_model_path, path_reason

COMMANDS = {"glue": glue.main, "glue_avgs": glue_avgs.main, "ner": ner.main, "ner_avgs": ner_avgs.main,
            "sweep": sweep.main, "benchmark": benchmark.main}


@pytest.mark.parametrize("name", ["./no_such_model", "../no_such_model", "/no/such/model", "~/no_such_model",
                                  ".hidden", "a/b/c", "org/", "a//b"])
def test_what_can_only_be_a_path(name):
    assert path_reason(name) is not None
    with pytest.raises(PapaError, match=rf"^no such folder: {name} \(--model_name_or_path; read as a local path"):
        check_model_path(name)


@pytest.mark.parametrize("name", ["bert-base-uncased", "google-bert/bert-base-uncased", "smollm2", "minilm"])
def test_hub_ids_and_bundled_names_are_not_paths(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert path_reason(name) is None
    check_model_path(name)  # no error: the hub (or the bundled model) decides


def test_an_org_name_whose_org_is_a_folder_here_is_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    with pytest.raises(PapaError, match=r"no such folder: models/bert .*its first part models/ is a folder here"):
        local_model_path("models/bert")
    (tmp_path / "models" / "bert").mkdir()
    assert local_model_path("models/bert") == "models/bert"


def test_a_home_path_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "m").mkdir()
    assert local_model_path("~/m") == str(tmp_path / "m")


@pytest.mark.parametrize("command, extra", [
    ("glue", ["--task_name", "cola", "--do_eval"]), ("glue", []), ("glue_avgs", ["--task_name", "cola"]),
    ("ner", ["--do_eval"]), ("ner_avgs", []), ("sweep", ["--task_name", "sst2"]), ("benchmark", [])])
@pytest.mark.parametrize("flag", ["--model_name_or_path", "--tokenizer_name"])
def test_every_command_says_no_such_folder_first(command, extra, flag, tmp_path, capsys, monkeypatch):
    """No --data_dir and no --output_dir: the missing folder is said before any other check or the hub."""
    if flag == "--tokenizer_name" and command in ("sweep", "benchmark"):
        pytest.skip("no such flag")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PAPA_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_:
        COMMANDS[command]([flag, "./no_such_model", *extra])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err, err
    assert err.splitlines() == [f"error: no such folder: ./no_such_model ({flag}; read as a local path since it "
                                f"starts with '.', '/' or '~'); pass an existing model folder or .gguf file, or a "
                                f"hub id (name or org/name)"], err
    assert os.listdir(tmp_path) == []  # nothing written
