"""Bad input: one clear message, exit status 2, no traceback, nothing written; atomic artifacts."""

import json
import os
import re
import runpy
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import SCRIPTS


L, H = 6, 12  # the bundled MiniLM


def run_script(script, args, capsys, monkeypatch):
    """Run a script in-process as `python script args`; returns (exit status, stderr), 0 for a run that returns."""
    monkeypatch.setattr(sys, "argv", [str(SCRIPTS / script)] + [str(a) for a in args])
    monkeypatch.delenv("PAPA_DEBUG", raising=False)
    try:
        runpy.run_path(str(SCRIPTS / script), run_name="__main__")
    except SystemExit as exit_info:
        return exit_info.code, capsys.readouterr().err
    return 0, capsys.readouterr().err


@pytest.fixture
def expect_error(capsys, monkeypatch, tmp_path):
    """Assert a script fails with status 2, one `error:` line matching `pattern`, no traceback, no files."""

    def check(script, args, pattern):
        out = tmp_path / "out"
        code, err = run_script(script, list(args) + ["--output_dir", out], capsys, monkeypatch)
        lines = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == 2, err
        assert "Traceback" not in err and len(lines) == 1, err
        assert any(re.search(pattern, line) for line in lines), err
        assert not out.exists(), list(out.iterdir())  # a failed command leaves no folder it made
        return lines[0]

    return check


@pytest.fixture
def cola_dir(shared_data):
    return shared_data / "glue" / "CoLA"


def write_avgs(folder, tensor):
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(tensor, folder / "avgs.pt")
    return folder


def probing_args(data_dir, *extra):
    return ["--task_name", "cola", "--data_dir", data_dir, "--do_train", "--do_eval", "--max_seq_length", "16",
            "--use_freeze_extract_pooler", "true", "--grad_for_classifier_only", "true", *extra]


# ------------------------------------------------------------------ data


def test_data_errors(expect_error, tmp_path, cola_dir):
    avgs = ["run_papa_glue_avgs_creator.py", "--max_length", "16"]
    expect_error(avgs[0], avgs[1:] + ["--task_name", "cola", "--data_dir", tmp_path / "nowhere"], r"nowhere")
    expect_error(avgs[0], avgs[1:] + ["--task_name", "cola", "--train_file", tmp_path / "missing.tsv"], r"missing.tsv")
    expect_error(avgs[0], avgs[1:] + ["--task_name", "colla", "--data_dir", cola_dir], r"colla.*cola.*sst2")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "train.tsv").write_text("gj04\t1\t\tok sentence\ngj04\t1\tonly three fields\n")
    expect_error(avgs[0], avgs[1:] + ["--task_name", "cola", "--data_dir", bad], r"train.tsv:2")
    (bad / "train.tsv").write_text("gj04\t1\t\tok sentence\ngj04\t7\t\tbad label\n")
    expect_error(avgs[0], avgs[1:] + ["--task_name", "cola", "--data_dir", bad], r"train.tsv:2.*7")
    (bad / "train.tsv").write_text("")
    expect_error(avgs[0], avgs[1:] + ["--task_name", "cola", "--data_dir", bad], r"[Ee]mpty|no data rows|no examples")
    conll = tmp_path / "conll"
    conll.mkdir()
    (conll / "train.txt").write_text("EU NNP B-NP B-ORG\nrejects VBZ B-VP\n")
    expect_error("run_papa_ner_avgs_creator.py", ["--task_name", "ner", "--data_dir", conll, "--max_length", "16"],
                 r"train.txt:2")
    (conll / "train.txt").write_text("EU NNP B-NP B-ORG\nrejects VBZ B-VP O\n")
    (conll / "valid.txt").write_text("Peter NNP B-NP B-PERSON\n")
    expect_error("run_papa_ner.py", ["--task_name", "ner", "--data_dir", conll, "--do_train", "--do_eval"],
                 r"valid.txt: B-PERSON is not a CoNLL-2003 ner tag")


def test_offline_without_files_names_the_flag(expect_error, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    expect_error("run_papa_glue_avgs_creator.py", ["--task_name", "sst2"], r"--data_dir")


# ------------------------------------------------------------------ constant matrices


def test_constant_matrix_errors(expect_error, tmp_path, cola_dir):
    expect_error("run_papa_glue.py", probing_args(cola_dir, "--sort_calculating", "true", "--grad_for_classifier_only",
                                                  "false", "--static_heads_dir", tmp_path / "empty"), r"avgs.pt")
    wrong_heads = write_avgs(tmp_path / "heads", torch.rand(L, H + 1, 16, 16))
    expect_error("run_papa_glue.py", probing_args(cola_dir, "--static_heads_dir", wrong_heads), r"6 x 12|another model")
    wrong_t = write_avgs(tmp_path / "len", torch.rand(L, H, 32, 32))
    expect_error("run_papa_glue.py", probing_args(cola_dir, "--static_heads_dir", wrong_t), r"length 32.*16")
    nan = torch.rand(L, H, 16, 16)
    nan[2, 3, 4, 5] = float("inf")
    expect_error("run_papa_glue.py", probing_args(cola_dir, "--static_heads_dir", write_avgs(tmp_path / "nan", nan)),
                 r"NaN or infinite")
    not_tensor = write_avgs(tmp_path / "dict", {"avgs": [1, 2]})
    expect_error("run_papa_glue.py", probing_args(cola_dir, "--static_heads_dir", not_tensor), r"not a")
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "avgs.pt").write_bytes(b"this is not a torch file")
    expect_error("run_papa_glue.py", probing_args(cola_dir, "--static_heads_dir", garbage), r"not a readable tensor")


# ------------------------------------------------------------------ head ranking


def test_ranking_errors(expect_error, tmp_path, cola_dir):
    avgs = write_avgs(tmp_path / "avgs", torch.rand(L, H, 16, 16))
    sort = tmp_path / "sort"
    sort.mkdir()
    k = lambda n: ["--static_heads_dir", avgs, "--sorting_heads_dir", sort, "--static_heads_num", n]
    expect_error("run_papa_glue.py", probing_args(cola_dir, "--static_heads_num", 3), r"--static_heads_dir and --sorting_heads_dir")
    expect_error("run_papa_glue.py", probing_args(cola_dir, "--static_heads_num", 3, "--static_heads_dir", avgs),
                 r"--sorting_heads_dir")
    expect_error("run_papa_glue.py", probing_args(cola_dir, *k(3)), r"sorted_heads.json does not exist")
    (sort / "sorted_heads.json").write_text("[[0, 1], [0, 2")
    expect_error("run_papa_glue.py", probing_args(cola_dir, *k(3)), r"cannot read .*sorted_heads.json \(.*\); rerun the ranking run")
    (sort / "sorted_heads.json").write_text("[[0, 1], [0, 1], [0, 2]]")
    expect_error("run_papa_glue.py", probing_args(cola_dir, *k(3)), r"twice")
    (sort / "sorted_heads.json").write_text("[[0, 1], [6, 0], [0, 2]]")
    expect_error("run_papa_glue.py", probing_args(cola_dir, *k(3)), r"\[6, 0\].*lacks")
    (sort / "sorted_heads.json").write_text("[[0, 1], [0, 2]]")
    expect_error("run_papa_glue.py", probing_args(cola_dir, *k(3)), r"fewer")
    expect_error("run_papa_glue.py", probing_args(cola_dir, *k(-1)), r"between 0 and 72")
    expect_error("run_papa_glue.py", probing_args(cola_dir, *k(73)), r"between 0 and 72")


# ------------------------------------------------------------------ modes and models


def test_mode_and_model_errors(expect_error, tmp_path, cola_dir):
    expect_error("run_papa_glue.py", probing_args(cola_dir, "--sort_calculating", "true"), r"one training mode")
    expect_error("run_papa_glue.py", probing_args(cola_dir, "--max_seq_length", "600"), r"600.*512")
    avgs = write_avgs(tmp_path / "avgs", torch.rand(L, H, 16, 16))
    expect_error("run_papa_glue.py", ["--task_name", "cola", "--data_dir", cola_dir, "--do_eval", "--max_seq_length", "16",
                                      "--sort_calculating", "true", "--static_heads_dir", avgs], r"add --do_train")
    expect_error("run_papa_glue.py", ["--task_name", "cola", "--data_dir", cola_dir], r"--do_train")
    expect_error("run_papa_glue.py", probing_args(cola_dir, "--not_a_flag", "1"), r"not_a_flag")
    expect_error("run_papa_glue.py", probing_args(cola_dir, "--model_name_or_path", tmp_path / "no_model"),
                 r"no such folder: .*no_model \(--model_name_or_path")
    expect_error("run_papa_glue.py", probing_args(cola_dir, "--max_train_samples", "0"), r"--max_train_samples must be positive")
    expect_error("run_papa_glue_avgs_creator.py", ["--task_name", "cola", "--data_dir", cola_dir, "--max_length", "0"],
                 r"--max_length must be positive")
    expect_error("run_papa_glue_avgs_creator.py", ["--task_name", "cola", "--data_dir", cola_dir, "--max_length", "513"],
                 r"513.*512")
    from transformers import OPTConfig  # a family PAPA does not support

    opt = tmp_path / "opt"
    OPTConfig(num_hidden_layers=1, num_attention_heads=2, hidden_size=8, ffn_dim=8,
              word_embed_proj_dim=8).save_pretrained(opt)
    expect_error("run_papa_glue.py", probing_args(cola_dir, "--model_name_or_path", opt),
                 r"model types bert, roberta.*'opt'")


def test_values_out_of_range_stop_before_any_work(expect_error, capsys, monkeypatch, tmp_path, cola_dir):
    """What would otherwise fail deep inside the Trainer or numpy, after the averaging pass, or run zero steps."""
    avgs = ["run_papa_glue_avgs_creator.py", "--task_name", "cola", "--data_dir", cola_dir, "--max_length", "16"]
    expect_error("run_papa_glue.py", probing_args(cola_dir, "--seed", "-1"), r"--seed must be between 0 and 4294967295")
    expect_error(avgs[0], avgs[1:] + ["--seed", str(2**32)], r"--seed must be between 0 and 4294967295")
    expect_error("run_papa_glue.py", probing_args(cola_dir, "--per_device_eval_batch_size", "0"),
                 r"--per_device_eval_batch_size must be positive")
    expect_error("run_papa_glue.py", probing_args(cola_dir, "--num_train_epochs", "0"),
                 r"--num_train_epochs must be positive")
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    for script, args in (("run_papa_glue.py", probing_args(cola_dir)), (avgs[0], avgs[1:])):
        for out in (a_file, a_file / "below"):
            code, err = run_script(script, args + ["--output_dir", out], capsys, monkeypatch)
            assert code == 2 and "Traceback" not in err, err
            assert f"error: --output_dir {out}: {a_file} is a file, not a folder; pass a folder" in err
    assert a_file.read_text() == "not a folder"


def test_resuming_a_checkpoint_of_other_heads_is_a_clear_error(capsys, monkeypatch, tmp_path, cola_dir):
    """The original README's loop over k reuses one --output_dir: a checkpoint left by k = 3 must not be resumed
    into k = 0 (its pruned Q/K do not fit); the same k resumes."""
    avgs = write_avgs(tmp_path / "avgs", torch.rand(L, H, 16, 16))
    sort = tmp_path / "sort"
    sort.mkdir()
    (sort / "sorted_heads.json").write_text(json.dumps([[0, h] for h in range(H)]))
    out = tmp_path / "out"

    run = lambda k: run_script("run_papa_glue.py", probing_args(
        cola_dir, "--static_heads_dir", avgs, "--sorting_heads_dir", sort, "--static_heads_num", k,
        "--max_train_samples", "8", "--max_eval_samples", "8", "--per_device_train_batch_size", "4",
        "--num_train_epochs", "1", "--output_dir", out), capsys, monkeypatch)

    assert run(3)[0] in (0, None)
    assert any(p.name.startswith("checkpoint-") for p in out.iterdir())
    code, err = run(0)
    assert code == 2 and "Traceback" not in err, err
    assert re.search(r"error: the checkpoint .*checkpoint-\d+ does not fit this model \(.*constant_matrices"
                     r".*--static_heads_num; pass another --output_dir", err)
    assert run(3)[0] in (0, None)  # the same configuration resumes


def test_debug_shows_the_traceback(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PAPA_DEBUG", "1")
    monkeypatch.setattr(sys, "argv", ["x", "--task_name", "nope", "--output_dir", str(tmp_path)])
    with pytest.raises(Exception, match="nope"):
        runpy.run_path(str(SCRIPTS / "run_papa_glue_avgs_creator.py"), run_name="__main__")


# ------------------------------------------------------------------ atomic writes

KILL_MID_WRITE = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np, torch
    from papa import io
    kind, path = sys.argv[1], sys.argv[2]
    real_open = open

    class Dying:
        # a file object that writes a few bytes, then the process is killed mid-write
        def __init__(self, f): self.f = f
        def write(self, data):
            self.f.write(data[: max(1, len(data) // 2)]); self.f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        def __getattr__(self, name): return getattr(self.f, name)
        def __enter__(self): return self
        def __exit__(self, *a): return self.f.__exit__(*a)

    def dying_open(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        return Dying(f) if "w" in mode and os.path.basename(str(file)).startswith(".") else f

    import builtins
    builtins.open = dying_open
    if kind == "tensor":
        torch.save = lambda obj, f: f.write(b"x" * 1000)  # save_tensor hands torch.save its open temp file
        io.save_tensor(torch.ones(100, 100), path)
    elif kind == "json":
        io.save_json([[0, 1]] * 1000, path)
    else:
        io.save_npy(np.ones((100, 100)), path)
    """
)


@pytest.mark.parametrize("kind, name", [("tensor", "avgs.pt"), ("json", "sorted_heads.json"), ("npy", "lambdas.npy")])
@pytest.mark.parametrize("previous", [True, False])
def test_killed_mid_write_leaves_previous_file_or_none(tmp_path, kind, name, previous):
    path = tmp_path / name
    if previous:
        path.write_bytes(b"previous complete file")
    script = tmp_path / "die.py"
    script.write_text(KILL_MID_WRITE)
    result = subprocess.run([sys.executable, str(script), kind, str(path)], capture_output=True)
    assert result.returncode == -signal.SIGKILL, result.stderr.decode()
    if previous:
        assert path.read_bytes() == b"previous complete file"
    else:
        assert not path.exists()


def test_atomic_writes_leave_no_temp_files_and_usual_permissions(tmp_path):
    from papa import io

    io.save_json({"a": 1}, tmp_path / "x.json")
    io.save_npy(np.zeros(3), tmp_path / "x.npy")
    io.save_tensor(torch.zeros(3), tmp_path / "x.pt")
    assert sorted(os.listdir(tmp_path)) == ["x.json", "x.npy", "x.pt"]
    assert json.loads((tmp_path / "x.json").read_text()) == {"a": 1}
    assert all(os.stat(tmp_path / f).st_mode & 0o044 for f in os.listdir(tmp_path))  # readable by others, as usual
    with pytest.raises(RuntimeError):
        with io.atomic_path(tmp_path / "y.pt") as tmp:
            Path(tmp).write_text("half")
            raise RuntimeError("crash")
    assert sorted(os.listdir(tmp_path)) == ["x.json", "x.npy", "x.pt"]


def test_saved_tensors_are_byte_identical_for_equal_tensors(tmp_path):
    """The sweep fingerprints avgs.pt by its sha256: re-saving the same averages must not change it."""
    from papa import io

    tensor = torch.rand(2, 3, 4, 4)
    io.save_tensor(tensor, tmp_path / "a.pt")
    io.save_tensor(tensor.clone(), tmp_path / "b.pt")
    assert (tmp_path / "a.pt").read_bytes() == (tmp_path / "b.pt").read_bytes()
    assert torch.equal(torch.load(tmp_path / "a.pt", weights_only=True), tensor)


def test_permissions_follow_the_umask_read_without_changing_it(tmp_path):
    from papa import io

    previous = os.umask(0o027)
    try:
        assert io.current_umask() == 0o027
        assert os.umask(0o027) == 0o027  # reading it left it as it was
        io.save_json({}, tmp_path / "x.json")
        with io.atomic_files(tmp_path / "folder") as tmp:
            Path(tmp, "config.json").write_text("{}")
    finally:
        os.umask(previous)
    assert os.stat(tmp_path / "x.json").st_mode & 0o777 == 0o640
    assert os.stat(tmp_path / "folder" / "config.json").st_mode & 0o777 == 0o640


def test_atomic_files_move_every_file_weights_last_or_none(tmp_path, monkeypatch):
    from papa import io

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "eval_results.json").write_text("kept")  # another file of the run's folder stays
    (folder / "config.json").write_text("previous")
    moved = []
    real_replace = os.replace
    monkeypatch.setattr(io.os, "replace", lambda a, b: (moved.append(os.path.basename(b)), real_replace(a, b)))
    with io.atomic_files(folder) as tmp:
        assert Path(tmp).parent == folder and Path(tmp).name.startswith(".tmp-")
        for name in ("model.safetensors", "config.json", "vocab.txt"):
            Path(tmp, name).write_text(f"new {name}")
    assert moved == ["config.json", "vocab.txt", "model.safetensors"]
    assert sorted(os.listdir(folder)) == ["config.json", "eval_results.json", "model.safetensors", "vocab.txt"]
    assert (folder / "config.json").read_text() == "new config.json"
    with pytest.raises(RuntimeError):
        with io.atomic_files(folder) as tmp:
            Path(tmp, "config.json").write_text("half")
            raise RuntimeError("crash")
    assert (folder / "config.json").read_text() == "new config.json"  # nothing moved, no temp folder left
    assert sorted(os.listdir(folder)) == ["config.json", "eval_results.json", "model.safetensors", "vocab.txt"]


@pytest.mark.parametrize("script", ["run_papa_glue.py", "run_papa_glue_avgs_creator.py"])
def test_a_model_path_to_nowhere_is_said_before_the_data_is_read(expect_error, tmp_path, script):
    """No --data_dir: reading cola would fall back to the hub (minutes of retries online, an error offline); the
    missing model folder is said first."""
    extra = ["--do_eval"] if script == "run_papa_glue.py" else []
    expect_error(script, ["--model_name_or_path", tmp_path / "nowhere", "--task_name", "cola", *extra],
                 r"no such folder: .*nowhere \(--model_name_or_path")


def test_the_data_root_works_in_the_single_scripts(shared_data, tmp_path, capsys, monkeypatch):
    """--data_dir ../shared/data (the root the sweep takes) finds CoLA's folder in the averaging script too."""
    code, err = run_script("run_papa_glue_avgs_creator.py", ["--task_name", "cola", "--data_dir", shared_data,
                                                              "--max_train_samples", "8", "--max_length", "16",
                                                              "--output_dir", tmp_path / "avgs"], capsys, monkeypatch)
    assert code == 0, err
    assert (tmp_path / "avgs" / "avgs.pt").is_file()
