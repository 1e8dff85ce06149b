"""A sweep that cannot get its data says so at once where the hub is offline, and a failed first run leaves no
folder behind (a run with a finished stage keeps it, to resume)."""

import os

import pytest

from papa.cli import sweep
from papa.errors import PapaError
from papa.io import missing_folders, removed_on_failure
from papa.models.bundled import default_model_path
from papa.sweep import run as sweep_run
from papa.sweep.stages import STAMP, RunFailed, removed_unless_finished


def sweep_error(argv, capsys, monkeypatch):
    """The one `error:` line of a sweep that must fail cleanly (status 2, no traceback)."""
    monkeypatch.delenv("PAPA_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_:
        sweep.main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("argv, fix", [
    (["--task_name", "sst2"], "pass --data_dir (a folder with the official GLUE TSVs: train.tsv, dev.tsv) or "
                              "--train_file/--validation_file"),
    (["--task_name", "ner", "cola"], "pass --data_dir (a folder with CoNLL-2003 train.txt and valid.txt) or "
                                     "--train_file/--validation_file"),
    (["--task_name", "lm", "--model_name_or_path", "smollm2"], "pass --train_file/--validation_file"),
])
def test_offline_a_task_without_its_data_is_said_at_once(argv, fix, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    line = sweep_error(argv, capsys, monkeypatch)
    assert "no local data for" in line and "the hub is offline (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE)" in line, line
    assert fix in line
    assert os.listdir(tmp_path) == []


def test_lm_on_glue_sentences_needs_data_dir_even_online(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    line = sweep_error(["--task_name", "lm_mrpc", "--model_name_or_path", "smollm2"], capsys, monkeypatch)
    assert line == ("error: lm_mrpc reads the sentences of GLUE's MRPC TSVs: pass --data_dir (that folder, or a "
                    "root holding it, e.g. ../shared/data)")
    assert os.listdir(tmp_path) == []


def test_missing_folders_and_removed_on_failure(tmp_path):
    target = tmp_path / "a" / "b" / "c"
    assert missing_folders(target) == [str(tmp_path / "a"), str(tmp_path / "a" / "b"), str(target)]
    with pytest.raises(ValueError), removed_on_failure(target) as removed:
        os.makedirs(target)
        raise ValueError
    assert removed == [str(tmp_path / "a")] and os.listdir(tmp_path) == []
    with removed_on_failure(target):  # success: kept
        os.makedirs(target)
    assert target.is_dir()


def test_a_folder_that_was_there_or_holds_a_finished_stage_is_kept(tmp_path):
    (tmp_path / "there").mkdir()
    with pytest.raises(PapaError, match="^boom$"), removed_unless_finished(tmp_path / "there" / "run"):
        (tmp_path / "there" / "run" / "avgs").mkdir(parents=True)
        (tmp_path / "there" / "run" / "avgs" / STAMP).write_text("{}")
        raise PapaError("boom")
    assert (tmp_path / "there" / "run" / "avgs" / STAMP).is_file()
    with pytest.raises(PapaError, match="^boom$"), removed_unless_finished(tmp_path / "there"):
        raise PapaError("boom")
    assert (tmp_path / "there").is_dir()


def fail_first_stage(stage, index, total, output_dir, env, verbose=False):
    """run_stage's stand-in: the first stage fails as a stage does, with its log in its folder."""
    os.makedirs(stage.folder)
    log = os.path.join(stage.folder, "log.txt")
    open(log, "w").write("error: no data\n")
    raise RunFailed(f"{stage.description} failed: no data (exit status 2; its log: {log}). Fix the cause and "
                    f"re-run the sweep: finished stages are kept", f"{stage.description} failed: no data (exit status 2)")


@pytest.mark.parametrize("models", [[], ["minilm", default_model_path()]])  # a sweep; a grid of two
def test_a_failed_first_run_leaves_no_folder(models, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sweep_run, "run_stage", fail_first_stage)
    monkeypatch.setattr(sweep_run, "start_fork_server", lambda: None)
    model_flags = ["--model_name_or_path", *models] if models else []
    line = sweep_error(["--output_dir", "runs/first", *model_flags], capsys, monkeypatch)
    assert "failed" in line and "log.txt" not in line, line
    assert line.endswith(f"nothing had finished, so {tmp_path / 'runs'}, which this run made, is removed again")
    assert os.listdir(tmp_path) == []
