"""The NER scripts and the averaging script under torchrun, end to end on slices of the real data (the
rest of test_scripts.py's kind, in a file of its own so that pytest's workers share the load)."""

import json
import sys

import pytest
import torch
from conftest import SCRIPTS, run_command, script

pytestmark = pytest.mark.slow
FAST = ["--max_train_samples", "128", "--max_eval_samples", "64", "--num_train_epochs", "1"]


def run(argv, extra=()):
    return run_command(list(argv) + list(extra))


def test_ner_pipeline(tmp_path, shared_data):
    data = ["--data_dir", str(shared_data / "conll2003")]
    common = ["--task_name", "ner", "--max_seq_length", "64", "--use_papa_preprocess",
              "--use_freeze_extract_pooler", "true", "--static_heads_dir", str(tmp_path / "avgs"),
              "--do_train", "--do_eval", "--learning_rate", "1e-3", "--disable_tqdm", "true",
              "--evaluation_strategy", "epoch", "--save_strategy", "no", "--save_total_limit", "0"]
    run(script("run_papa_ner_avgs_creator.py") + ["--task_name", "ner", "--max_length", "64",
         "--output_dir", str(tmp_path / "avgs"), "--use_papa_preprocess", "true", "--pad_to_max_length",
         "--max_train_samples", "96"] + data)
    run(script("run_papa_ner.py") + ["--output_dir", str(tmp_path / "sort"),
         "--sort_calculating", "True"] + common + data + FAST)
    run(script("run_papa_ner.py") + ["--output_dir", str(tmp_path / "k_72"),
         "--grad_for_classifier_only", "true", "--sorting_heads_dir", str(tmp_path / "sort"),
         "--static_heads_num", "72", "--return_entity_level_metrics"] + common + data + FAST)
    assert json.loads((tmp_path / "sort" / "sorted_heads.json").read_text())
    results = json.loads((tmp_path / "k_72" / "eval_results.json").read_text())
    assert {"eval_precision", "eval_recall", "eval_f1", "eval_accuracy", "eval_PER_f1", "eval_LOC_f1"} <= set(results)
    assert torch.load(tmp_path / "avgs" / "avgs.pt", weights_only=True).shape == (6, 12, 64, 64)


def test_averaging_under_torchrun_equals_one_process(tmp_path, shared_data):
    """37 examples over 2 processes: each counted once, the same averages as one process."""
    common = ["--task_name", "cola", "--data_dir", str(shared_data / "glue" / "CoLA"), "--max_length", "32",
              "--use_papa_preprocess", "--max_train_samples", "37", "--per_device_train_batch_size", "4"]
    avgs_script = str(SCRIPTS / "run_papa_glue_avgs_creator.py")
    run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", avgs_script,
         "--output_dir", str(tmp_path / "two")] + common)
    run(script("run_papa_glue_avgs_creator.py") + ["--output_dir", str(tmp_path / "one")] + common)
    two = {f: torch.load(tmp_path / "two" / f, weights_only=True) for f in ("avgs.pt", "attention_patterns_sums.pt")}
    one = {f: torch.load(tmp_path / "one" / f, weights_only=True) for f in ("avgs.pt", "attention_patterns_sums.pt")}
    assert two["attention_patterns_sums.pt"][0, 0] == 37
    assert torch.equal(two["attention_patterns_sums.pt"], one["attention_patterns_sums.pt"])
    torch.testing.assert_close(two["avgs.pt"], one["avgs.pt"])
