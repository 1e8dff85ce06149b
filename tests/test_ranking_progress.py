"""A long ranking killed late resumes (papa.method.ranking_progress): every ranker, interrupted after some saves and
re-run, gives the uninterrupted ranking to the bit and skips the work already done; real runs of the ranking
script are killed (SIGKILL) mid-way and re-run with the same command; the sweep keeps the progress of a stage it
redoes (a Slurm requeue runs the stage again the same way)."""

import copy
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from papa.method.attention import patch_model
from papa.method.rankers import rank
from papa.method.scorers import Objective, make_units
from papa.method.ranking_progress import PROGRESS_FILE, NoProgress, Progress, fingerprint
from tiny_decoders import H, L, T, tiny_decoder


class Killed(Exception):
    pass


class KilledAfter(Progress):
    """Progress that writes every save and stops the ranking after `saves` of them, as a kill would."""

    def __init__(self, path, digest, saves):
        super().__init__(path, digest, every_s=0)
        self.left = saves

    def save(self, scope, value, force=False):
        super().save(scope, value, force=True)
        self.left -= 1
        if self.left == 0:
            raise Killed


def ranking_setup():
    g = torch.Generator().manual_seed(0)
    model = patch_model(tiny_decoder("llama").double(), torch.rand(L, H, T, T, generator=g, dtype=torch.float64),
                        mix_all_heads=True)
    batches = []
    for b in range(5):
        ids = torch.randint(3, 120, (2, T), generator=g)
        batches.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids})
    return model, batches


OPTIONS = {"taylor": {}, "loo": {}, "iterative_taylor": {}, "iterative": {}, "gates": {"steps": 12}}


@pytest.mark.parametrize("ranker, kill_after", [("taylor", 2), ("loo", 6), ("iterative_taylor", 4),
                                                ("iterative", 7), ("gates", 5)])
def test_an_interrupted_ranking_resumes_to_the_uninterrupted_one(ranker, kill_after, tmp_path):
    model, batches = ranking_setup()
    units = make_units(L, H, 2)  # K/V groups
    objective = Objective(model, batches, "lm")
    whole = rank(ranker, objective, units, progress=NoProgress(), **OPTIONS[ranker])
    digest = fingerprint({"ranker": ranker}, units, batches, model)
    path = tmp_path / PROGRESS_FILE
    with pytest.raises(Killed):
        rank(ranker, objective, units, progress=KilledAfter(path, digest, kill_after), **OPTIONS[ranker])
    assert path.is_file()
    seen = []  # the resumed run's work: it starts after what was saved
    log = {"loo": lambda done, total: seen.append(done), "gates": lambda step, loss, alpha: seen.append(step)}
    progress = Progress(path, digest, every_s=0)
    resumed = rank(ranker, objective, units, progress=progress, **OPTIONS[ranker],
                   **({"log": log[ranker]} if ranker in log else {}))
    assert resumed.units == whole.units and resumed.scores == whole.scores and resumed.extra == whole.extra
    if ranker == "gates":
        assert seen[0] == kill_after
    elif ranker == "loo":  # a save after each of the L layers of a batch and one at its end: killed inside batch 2
        assert seen[0] == 2
    progress.finish()
    assert not path.exists()


@pytest.mark.parametrize("kill_after", [1, 2])
def test_a_one_batch_loo_ranking_killed_inside_its_batch_resumes_there(kill_after, tmp_path):
    """One batch (a long context's ranking): killed after the units of `kill_after` of its L layers, the re-run
    scores only the other layers' units (and the batch's own losses once more) and ranks as the uninterrupted run."""
    model, batches = ranking_setup()
    batches = batches[:1]
    units = make_units(L, H, 2)
    objective = Objective(model, batches, "lm")
    forwards = []
    hook = model.register_forward_hook(lambda *_: forwards.append(1))
    whole = rank("loo", objective, units, progress=NoProgress())
    uninterrupted = len(forwards)
    digest = fingerprint({"ranker": "loo"}, units, batches, model)
    path = tmp_path / PROGRESS_FILE
    with pytest.raises(Killed):
        rank("loo", objective, units, progress=KilledAfter(path, digest, kill_after))
    assert torch.load(path, weights_only=True)["state"]["loss changes"]["layers"] == kill_after
    forwards.clear()
    resumed = rank("loo", objective, units, progress=Progress(path, digest, every_s=0))
    hook.remove()
    assert resumed.units == whole.units and resumed.scores == whole.scores  # to the bit
    per_layer = (uninterrupted - 1) // L  # forwards of one layer's units (all layers have as many units)
    assert len(forwards) == 1 + (L - kill_after) * per_layer


def test_progress_of_another_ranking_is_set_aside(tmp_path):
    model, batches = ranking_setup()
    units = make_units(L, H)
    path = tmp_path / PROGRESS_FILE
    Progress(path, fingerprint({"ranker": "loo"}, units, batches, model), every_s=0).save("loo", {"batches": 1},
                                                                                      force=True)
    other = copy.deepcopy(batches)
    other[0]["input_ids"][0, 0] += 1  # other data: another fingerprint
    progress = Progress(path, fingerprint({"ranker": "loo"}, units, other, model), every_s=0)
    assert progress.get("loo") is None and (tmp_path / f"{PROGRESS_FILE}.other").is_file() and not path.exists()
    assert fingerprint({"ranker": "loo"}, units, batches, model) != fingerprint({"ranker": "gates"}, units, batches,
                                                                                model)


# ----------------------------------------------------------------------------- real runs, killed


@pytest.fixture(scope="module")
def lm_files(tmp_path_factory):
    from lm_fixtures import save_tiny_lm, write_text

    from conftest import run_command

    folder = tmp_path_factory.mktemp("lm")
    model = save_tiny_lm("llama", folder / "model")
    train = write_text(folder / "train.txt", 60, 0)
    valid = write_text(folder / "valid.txt", 10, 1)
    run_command([sys.executable, "-m", "papa.cli.glue_avgs", "--model_name_or_path", model, "--task_name", "lm",
                 "--train_file", train, "--max_length", "32", "--output_dir", folder / "avgs"])
    return model, train, valid, folder / "avgs"


def ranking_command(files, out, ranker):
    model, train, valid, avgs = files
    return [sys.executable, "-m", "papa.cli.glue", "--model_name_or_path", model, "--task_name", "lm", "--train_file",
            train, "--validation_file", valid, "--do_train", "--do_eval", "--max_seq_length", "32",
            "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "2", "--sort_calculating", "True",
            "--ranker", ranker, "--static_heads_dir", avgs, "--output_dir", out, "--report_to", "none",
            "--save_strategy", "no", "--num_train_epochs", "1", "--rank_kv_groups", "true"]


@pytest.mark.slow
@pytest.mark.parametrize("ranker", ["loo", "gates"])
def test_a_killed_ranking_run_resumes_when_run_again(lm_files, tmp_path, ranker):
    from conftest import OFFLINE, run_command

    whole = tmp_path / "whole"
    run_command(ranking_command(lm_files, whole, ranker))
    out = tmp_path / "killed"
    env = {**os.environ, **OFFLINE, "PAPA_PROGRESS_EVERY_S": "0", "PAPA_PROGRESS_PAUSE_S": "3"}
    proc = subprocess.Popen([str(a) for a in ranking_command(lm_files, out, ranker)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not (out / PROGRESS_FILE).is_file() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before its first save"
    os.kill(proc.pid, signal.SIGKILL)  # during the pause after a save
    proc.wait()
    saved = torch.load(out / PROGRESS_FILE, weights_only=True)["state"]
    assert not (out / "sorted_heads.json").exists() and saved
    again = run_command(ranking_command(lm_files, out, ranker))  # the same command, as a user or a requeue runs it
    assert "resuming the ranking" in again.stdout + again.stderr
    for name in ("sorted_heads.json", "head_scores.csv"):
        assert (out / name).read_text() == (whole / name).read_text()
    assert not (out / PROGRESS_FILE).exists()


def test_the_sweep_keeps_a_rankings_progress_when_it_redoes_the_stage(tmp_path):
    from papa.sweep.stages import Stage, execute_stage

    folder = tmp_path / "sort"
    folder.mkdir()
    (folder / PROGRESS_FILE).write_bytes(b"saved")
    (folder / "partial.txt").write_text("stale")
    stage = Stage("sort", "ranking", str(folder), "papa.cli.glue", "run_papa_glue.py", [], [], [])
    check = (f"import os, sys; f = {str(folder)!r}; "
             f"sys.exit(0 if open(os.path.join(f, {PROGRESS_FILE!r}), 'rb').read() == b'saved' and "
             "not os.path.exists(os.path.join(f, 'partial.txt')) else 3)")
    run = execute_stage(stage, str(tmp_path), dict(os.environ), lambda *a: None, command=[sys.executable, "-c", check])
    assert run.returncode == 0 and json.loads((folder / "stage.json").read_text())["stage"] == "sort"
