"""The original three commands (through the sweep) on tiny random models of every new family.

No pretrained DeBERTa, XLM-R, ELECTRA or ModernBERT is reachable offline: each test saves a tiny
random model with a tokenizer of its family's kind (tests/tiny_encoders.py) to a folder and runs
the sweep on it — averages → ranking run → probing with k constant heads — on the built-in
`repeat` task, then reloads the saved model of a probing run and checks that it reproduces the
run's own evaluation. A DeBERTa NER sweep covers the token scripts with byte-level BPE words.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tiny_encoders import save_tiny_pretrained

REPO = Path(__file__).resolve().parents[1]
SWEEP = REPO / "papa_scripts" / "run_papa_sweep.py"
QUICK = ["--max_train_samples", "48", "--max_eval_samples", "32", "--num_train_epochs", "1",
         "--sort_num_train_epochs", "1", "--max_seq_length", "32"]

pytestmark = pytest.mark.slow


def run(args, cwd):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    result = subprocess.run([sys.executable, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def reload_and_evaluate(model_dir, task_name, seq_len, max_eval_samples):
    """Accuracy of the saved PAPA model on the validation examples the run evaluated."""
    from transformers import AutoTokenizer

    from papa.modeling import load_papa_model
    from papa.preprocessing import tokenize_sequence_examples
    from papa.synthetic import make_repeat_dataset

    assert task_name == "repeat"
    validation = make_repeat_dataset()["validation"].select(range(max_eval_samples))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    batch = tokenize_sequence_examples(tokenizer, validation[:], "sentence", None, seq_len, papa_layout=True,
                                       pad_to_max_length=True)
    model = load_papa_model(model_dir)
    inputs = {k: torch.tensor(batch[k]) for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
    with torch.no_grad():
        predictions = model(**inputs).logits.argmax(-1).numpy()
    return float((predictions == np.array(batch["labels"])).mean())


@pytest.mark.parametrize("name", ["deberta", "deberta-v2", "xlm-roberta", "electra", "modernbert"])
def test_sweep_and_saved_model_on_a_tiny_family_model(tmp_path, name):
    model_dir = save_tiny_pretrained(name, tmp_path / "model")
    out = tmp_path / "sweep"
    # flags the sweep does not know go to the training runs: --save_total_limit 1 keeps their models
    run([SWEEP, "--model_name_or_path", model_dir, "--task_name", "repeat", "--output_dir", out,
         "--static_heads_nums", "7", *QUICK, "--save_total_limit", "1"], cwd=tmp_path)
    assert np.load(out / "sort" / "lambdas.npy").shape == (3, 4)
    assert torch.load(out / "avgs" / "avgs.pt", weights_only=True).shape == (3, 4, 32, 32)
    assert (out / "results.csv").is_file()
    # the saved k=7 model, reloaded, reproduces the run's own evaluation
    saved = out / "k_7"
    results = json.loads((saved / "eval_results.json").read_text())
    config = json.loads((saved / "config.json").read_text())
    assert len(config["papa"]["static_heads"]) == 7 and config["model_type"] == name
    assert reload_and_evaluate(saved, "repeat", 32, 32) == pytest.approx(results["eval_accuracy"])


def test_deberta_token_task_sweep(tmp_path, shared_data):
    """NER with DeBERTa's byte-level BPE: pre-split words need add_prefix_space (set by the scripts)."""
    model_dir = save_tiny_pretrained("deberta", tmp_path / "model")
    out = tmp_path / "sweep"
    run([SWEEP, "--model_name_or_path", model_dir, "--task_name", "ner", "--data_dir", shared_data / "conll2003",
         "--output_dir", out, "--static_heads_nums", "12", *QUICK], cwd=tmp_path)
    results = json.loads((out / "k_12" / "eval_results.json").read_text())
    assert "eval_f1" in results and "eval_accuracy" in results
