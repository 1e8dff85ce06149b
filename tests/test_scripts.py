"""The four scripts end to end on slices of the real data, with the original README's commands."""

import json
import re
import shlex
import sys

import numpy as np
import pytest
import torch
from conftest import REPO, SCRIPTS, run_command, script

from papa.models.modeling import default_model_path, load_papa_model

pytestmark = pytest.mark.slow
FAST = ["--max_train_samples", "128", "--max_eval_samples", "64", "--num_train_epochs", "1"]


def original_commands():
    """The three bash blocks of docs/scripts.md's "The original commands, verbatim" section, as written."""
    text = (REPO / "docs" / "scripts.md").read_text()
    section = text.split("## The original commands, verbatim", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)```", section, flags=re.S)


def fill(command, **placeholders):
    """One README command with ${MODEL}, ${TASK}, <dirs> filled in, as argv for our scripts."""
    for name, value in placeholders.items():
        command = command.replace(name, str(value))
    argv = shlex.split(command)
    assert argv[0] == "python3"
    return [sys.executable, str(SCRIPTS / argv[1])] + argv[2:]


def run(argv, extra=()):
    return run_command(list(argv) + list(extra))


@pytest.fixture(scope="module")
def cola_run(tmp_path_factory, shared_data):
    """avgs → sort → k = 0 and all 72 heads, exactly as the README says (the sweep tests check that a rerun
    reproduces the ranking)."""
    out = tmp_path_factory.mktemp("cola")
    blocks = original_commands()
    assert len(blocks) == 3
    model = default_model_path()
    fills = {
        "${MODEL}": model, "${TASK}": "COLA", "<your_cache_dir>": out / "cache",
        "<dir_to_save_constant_matrices>": out / "avgs", "<dir_saves_constant_matrices>": out / "avgs",
        "<dir_saved_sorted_heads>": out / "sort",
    }
    data = ["--data_dir", str(shared_data / "glue" / "CoLA")]
    avgs_cmd = [line for line in blocks[0].splitlines() if line.startswith("python3")][0]
    run(fill(avgs_cmd, **fills), data + ["--max_train_samples", "128"])
    sort_cmd = [line for line in blocks[1].splitlines() if line.startswith("python3")][0]
    run(fill(sort_cmd, **fills, **{"<dir_to_save_sorted_heads>": out / "sort"}), data + FAST)
    loop = blocks[2]
    assert "for static_heads_num in 0 72 126 135 144" in loop  # BERT-base's 144 heads; MiniLM has 72
    loop_cmd = [line for line in loop.splitlines() if line.startswith("python3")][0]
    for k in (0, 72):
        argv = fill(loop_cmd, **fills, **{"${static_heads_num}": k, "<dir_to_save_results>": out / f"k_{k}"})
        run(argv, data + FAST)
    return out


def test_avgs_artifacts(cola_run):
    avgs = torch.load(cola_run / "avgs" / "avgs.pt", weights_only=True)
    sums = torch.load(cola_run / "avgs" / "attention_sums.pt", weights_only=True)
    patterns = torch.load(cola_run / "avgs" / "attention_patterns_sums.pt", weights_only=True)
    assert avgs.shape == sums.shape == (6, 12, 64, 64) and patterns.shape == (64, 64)
    assert avgs.dtype == torch.float32 and torch.isfinite(avgs).all()
    assert patterns[0, 0] == 128 and patterns[-1, -1] == 128  # [CLS] at 0 and [SEP] at T-1 in every example
    assert torch.equal(patterns, patterns.T)
    seen = patterns > 0
    torch.testing.assert_close(avgs[:, :, seen], (sums[:, :, seen] / patterns[seen]))
    assert (avgs[:, :, ~seen] == 0).all()  # middle positions no example reaches: 0, not NaN


def test_sorting_artifacts(cola_run):
    lambdas = np.load(cola_run / "sort" / "lambdas.npy")
    heads = json.loads((cola_run / "sort" / "sorted_heads.json").read_text())
    assert lambdas.shape == (6, 12) and lambdas.dtype == np.float32
    assert sorted(map(tuple, heads)) == [(l, h) for l in range(6) for h in range(12)]  # a permutation
    ordered = [lambdas[l, h] for l, h in heads]
    assert ordered == sorted(ordered)  # ascending λ: most constant-friendly head first
    assert not np.allclose(lambdas, 0)  # the lambdas did train


@pytest.mark.parametrize("k", [0, 72])
def test_probing_results(cola_run, k):
    folder = cola_run / f"k_{k}"
    results = json.loads((folder / "eval_results.json").read_text())
    assert "eval_matthews_correlation" in results and results["eval_samples"] == 64
    assert json.loads((folder / "train_results.json").read_text())["train_samples"] == 128
    assert "eval_matthews_correlation" in json.loads((folder / "all_results.json").read_text())
    assert json.loads((folder / "trainer_state.json").read_text())["log_history"]
    # --save_total_limit 0: the config and results only, no weights
    assert not (folder / "model.safetensors").exists()
    config = json.loads((folder / "config.json").read_text())
    assert len(config["papa"]["static_heads"]) == k


def test_mrpc_pairs_with_a_given_ranking(tmp_path, shared_data):
    data = ["--data_dir", str(shared_data / "glue" / "MRPC")]
    run(script("run_papa_glue_avgs_creator.py") + ["--task_name", "mrpc", "--max_length", "64",
         "--output_dir", str(tmp_path / "avgs"), "--use_papa_preprocess", "--max_train_samples", "64"] + data)
    ranking = [[l, h] for h in range(12) for l in range(6)]  # any permutation of the 72 heads
    (tmp_path / "sort").mkdir()
    (tmp_path / "sort" / "sorted_heads.json").write_text(json.dumps(ranking))
    run(script("run_papa_glue.py") + ["--task_name", "MRPC", "--do_train", "--do_eval",
         "--max_seq_length", "64", "--output_dir", str(tmp_path / "k_40"), "--use_papa_preprocess",
         "--grad_for_classifier_only", "true", "--use_freeze_extract_pooler", "true", "--static_heads_dir",
         str(tmp_path / "avgs"), "--sorting_heads_dir", str(tmp_path / "sort"), "--static_heads_num", "40",
         "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none"] + data + FAST)
    results = json.loads((tmp_path / "k_40" / "eval_results.json").read_text())
    assert {"eval_accuracy", "eval_f1", "eval_combined_score"} <= set(results)
    assert results["eval_combined_score"] == pytest.approx((results["eval_accuracy"] + results["eval_f1"]) / 2)
    # saved with weights this time: reloads into the same kind of model, pruned shapes included
    model = load_papa_model(str(tmp_path / "k_40"))
    assert sum(len(h) for h in [model.config.papa["static_heads"]]) == 40
    assert model.bert.encoder.layer[0].attention.self.query.out_features < 384


def test_sst2_probe_beats_majority_class(tmp_path, shared_data):
    data = shared_data / "glue" / "SST-2"
    run(script("run_papa_glue.py") + ["--task_name", "sst2", "--data_dir", str(data),
         "--do_train", "--do_eval", "--max_seq_length", "64", "--use_papa_preprocess",
         "--use_freeze_extract_pooler", "true", "--grad_for_classifier_only", "true",
         "--max_train_samples", "400", "--max_eval_samples", "300", "--num_train_epochs", "3",
         "--learning_rate", "1e-3", "--per_device_train_batch_size", "16", "--output_dir", str(tmp_path),
         "--save_strategy", "no", "--save_total_limit", "0", "--seed", "0"])
    labels = [line.rsplit("\t", 1)[1].strip() for line in (data / "dev.tsv").read_text().splitlines()[1:301]]
    majority = max(labels.count("0"), labels.count("1")) / len(labels)
    accuracy = json.loads((tmp_path / "eval_results.json").read_text())["eval_accuracy"]
    assert accuracy > majority + 0.1, (accuracy, majority)
