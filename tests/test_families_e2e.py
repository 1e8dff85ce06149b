"""The original three commands and the sweep on tiny random models of every new family.

No pretrained DeBERTa, XLM-R, ELECTRA or ModernBERT is reachable offline: each test saves a tiny
random model with a tokenizer of its family's kind (tests/tiny_encoders.py) to a folder, runs
averages → ranking run → probing with k = 7 of its 12 heads constant on the built-in `repeat`
task, then reloads the probing run's saved model and checks that it reproduces the run's own
evaluation. Every family goes through the sweep (as a user runs it); XLM-R, ELECTRA and ModernBERT
also through the three commands called in-process (the same code as the scripts, without the
interpreter start-up).
A DeBERTa NER run covers the token scripts with byte-level BPE words (add_prefix_space).
"""

import json

import numpy as np
import pytest
import torch
from conftest import run_command, script

from tiny_encoders import save_tiny_pretrained

pytestmark = pytest.mark.slow

QUICK = ["--max_train_samples", "48", "--max_eval_samples", "32", "--seed", "42"]
T = "32"


def reload_and_evaluate(model_dir, max_eval_samples):
    """Accuracy of the saved PAPA model on the repeat validation examples the run evaluated."""
    from transformers import AutoTokenizer

    from papa.models.modeling import load_papa_model
    from papa.data.preprocessing import tokenize_sequence_examples
    from papa.data.synthetic import make_repeat_dataset

    validation = make_repeat_dataset()["validation"].select(range(max_eval_samples))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    batch = tokenize_sequence_examples(tokenizer, validation[:], "sentence", None, int(T), papa_layout=True,
                                       pad_to_max_length=True)
    model = load_papa_model(str(model_dir))
    inputs = {k: torch.tensor(batch[k]) for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
    with torch.no_grad():
        predictions = model(**inputs).logits.argmax(-1).numpy()
    return float((predictions == np.array(batch["labels"])).mean())


def check_saved_probing_run(folder, name):
    results = json.loads((folder / "eval_results.json").read_text())
    config = json.loads((folder / "config.json").read_text())
    assert len(config["papa"]["static_heads"]) == 7 and config["model_type"] == name
    assert reload_and_evaluate(folder, 32) == pytest.approx(results["eval_accuracy"])


def training_flags(model_dir, out, *mode):
    return ["--model_name_or_path", model_dir, "--task_name", "repeat", "--do_train", "--do_eval",
            "--max_seq_length", T, "--per_device_train_batch_size", "16", "--num_train_epochs", "1",
            "--learning_rate", "1e-3", "--evaluation_strategy", "no", "--save_strategy", "no", "--use_papa_preprocess",
            "--use_freeze_extract_pooler", "true", "--static_heads_dir", out / "avgs", "--output_dir", out / mode[0],
            *QUICK, *mode[1:]]


@pytest.mark.parametrize("name", ["xlm-roberta", "electra", "modernbert"])
def test_three_commands_on_a_tiny_family_model(tmp_path, name):
    from papa.cli import glue, glue_avgs

    model_dir = save_tiny_pretrained(name, tmp_path / "model")
    out = tmp_path / "run"
    argv = lambda items: [str(item) for item in items]  # noqa: E731
    glue_avgs.main(argv(["--model_name_or_path", model_dir, "--task_name", "repeat", "--max_length", T,
                         "--per_device_train_batch_size", "16", "--output_dir", out / "avgs",
                         "--use_papa_preprocess", "true", "--pad_to_max_length", "--max_train_samples", "48"]))
    assert torch.load(out / "avgs" / "avgs.pt", weights_only=True).shape == (3, 4, 32, 32)
    glue.main(argv(training_flags(model_dir, out, "sort", "--sort_calculating", "True", "--save_total_limit", "0")))
    assert json.loads((out / "sort" / "sorted_heads.json").read_text())
    glue.main(argv(training_flags(model_dir, out, "k_7", "--grad_for_classifier_only", "true", "--static_heads_num",
                                  "7", "--sorting_heads_dir", out / "sort", "--save_total_limit", "1")))
    check_saved_probing_run(out / "k_7", name)


@pytest.mark.parametrize("name", ["deberta", "deberta-v2", "xlm-roberta", "electra", "modernbert"])
def test_sweep_on_a_tiny_family_model(tmp_path, name):
    model_dir = save_tiny_pretrained(name, tmp_path / "model")
    out = tmp_path / "sweep"
    # flags the sweep does not know go to the training runs: --save_total_limit 1 keeps their models
    run_command(script("run_papa_sweep.py") + [
        "--model_name_or_path", model_dir, "--task_name", "repeat", "--output_dir", out, "--static_heads_nums", "7",
        "--max_seq_length", T, "--num_train_epochs", "1", "--sort_num_train_epochs", "1", *QUICK,
        "--save_total_limit", "1"], cwd=tmp_path)
    assert np.load(out / "sort" / "lambdas.npy").shape == (3, 4)
    assert torch.load(out / "avgs" / "avgs.pt", weights_only=True).shape == (3, 4, 32, 32)
    assert (out / "results.csv").is_file() and (out / "results.png").is_file()
    check_saved_probing_run(out / "k_7", name)


def test_deberta_token_task(tmp_path, shared_data):
    """NER with DeBERTa's byte-level BPE: pre-split words need add_prefix_space (the scripts set it)."""
    from papa.cli import ner, ner_avgs

    model_dir = save_tiny_pretrained("deberta", tmp_path / "model")
    out = tmp_path / "run"
    data = ["--task_name", "ner", "--data_dir", str(shared_data / "conll2003"), "--max_train_samples", "48"]
    ner_avgs.main(["--model_name_or_path", model_dir, *data, "--max_length", T, "--output_dir", str(out / "avgs"),
                   "--use_papa_preprocess", "true", "--pad_to_max_length"])
    (out / "sorted_heads.json").write_text(json.dumps([[layer, head] for layer in range(3) for head in range(4)]))
    ner.main(["--model_name_or_path", model_dir, *data, "--do_train", "--do_eval", "--max_eval_samples", "32",
              "--max_seq_length", T, "--num_train_epochs", "1", "--use_papa_preprocess", "--use_freeze_extract_pooler",
              "true", "--static_heads_dir", str(out / "avgs"), "--grad_for_classifier_only", "true",
              "--static_heads_num", "12", "--sorting_heads_dir", str(out), "--output_dir", str(out / "k_12"),
              "--save_strategy", "no", "--save_total_limit", "0"])
    results = json.loads((out / "k_12" / "eval_results.json").read_text())
    assert "eval_f1" in results and "eval_accuracy" in results
