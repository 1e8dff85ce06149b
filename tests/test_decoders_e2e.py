"""The four scripts and the sweep on tiny random decoders saved with tokenizers as the real ones are.

GPT-2 (byte-level BPE, no pad token) and a Llama with grouped K/V (4 query heads on 2 K/V heads; a
tokenizer without a pad token that pads on the left): averages → ranking run → probing with 7 of 12
heads constant, on the synthetic `repeat` task (single texts), an MRPC slice (pairs, the second text
at T//2) and CoNLL NER. Each probing run writes its eval metric and eval_predictions.jsonl, its saved
model (config.pad_token_id = eos) reproduces its evaluation when reloaded. The sweep runs with its
three controls on the Llama; Mistral, Qwen2, Qwen3 and Gemma2 run as a grid of models.
"""

import json

import numpy as np
import pytest
import torch
from conftest import run_command, script
from tiny_decoders import save_tiny_decoder

from papa.cli import glue, glue_avgs, ner, ner_avgs
from papa.method.attention import load_constant_matrices

pytestmark = pytest.mark.slow

T = 32
QUICK = ["--max_train_samples", 48, "--max_eval_samples", 32, "--seed", 42]


def argv(items):
    return [str(item) for item in items]


def three_commands(avgs_main, probe_main, model_dir, data, out, freeze_extract):
    """avgs → ranking → k = 7; the probing run with the freeze-extract probe or the model's own classifier."""
    avgs_main(argv(["--model_name_or_path", model_dir, *data, "--max_length", T, "--output_dir", out / "avgs",
                    "--use_papa_preprocess", "true", "--pad_to_max_length", "--max_train_samples", 48]))
    avgs = load_constant_matrices(out / "avgs").full()  # a decoder's: lower triangles on disk (layout 2)
    assert avgs.shape == (3, 4, T, T)  # query heads, not the 2 K/V heads
    assert (avgs.triu(1) == 0).all()  # causal: no attention to the future
    common = ["--model_name_or_path", model_dir, *data, "--do_train", "--do_eval", "--max_seq_length", T,
              "--per_device_train_batch_size", 16, "--num_train_epochs", 1, "--learning_rate", "1e-3",
              "--eval_strategy", "no", "--save_strategy", "no", "--use_papa_preprocess", "--static_heads_dir",
              out / "avgs", *QUICK]
    probe_main(argv(common + ["--output_dir", out / "sort", "--sort_calculating", "True", "--save_total_limit", 0,
                              "--use_freeze_extract_pooler", "true"]))
    assert len(json.loads((out / "sort" / "sorted_heads.json").read_text())) == 12
    probe_main(argv(common + ["--output_dir", out / "k_7", "--grad_for_classifier_only", "true", "--static_heads_num",
                              7, "--sorting_heads_dir", out / "sort", "--save_total_limit", 1,
                              "--use_freeze_extract_pooler", str(freeze_extract).lower()]))
    folder = out / "k_7"
    config = json.loads((folder / "config.json").read_text())
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["pad_token_id"] is not None and tokenizer_config.get("padding_side", "right") == "right"
    assert len(config["papa"]["static_heads"]) == 7
    predictions = (folder / "eval_predictions.jsonl").read_text().splitlines()
    assert len(predictions) == 32
    return json.loads((folder / "eval_results.json").read_text()), folder


def reload_and_score(folder, task_name, examples, columns):
    """Accuracy of the saved model (through load_papa_model, its saved tokenizer and config) on `examples`."""
    from transformers import AutoTokenizer

    from papa.models.modeling import load_papa_model
    from papa.data.preprocessing import tokenize_sequence_examples

    tokenizer = AutoTokenizer.from_pretrained(folder)
    batch = tokenize_sequence_examples(tokenizer, examples, *columns, T, papa_layout=True, pad_to_max_length=True,
                                       causal=True)
    model = load_papa_model(str(folder))
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(batch["input_ids"]),
                       attention_mask=torch.tensor(batch["attention_mask"])).logits
    return float((logits.argmax(-1).numpy() == np.array(batch["labels"])).mean())


def test_gpt2_sequence_commands_on_repeat(tmp_path):
    from papa.data.synthetic import make_repeat_dataset

    model_dir = save_tiny_decoder("gpt2", tmp_path / "model")
    results, folder = three_commands(glue_avgs.main, glue.main, model_dir, ["--task_name", "repeat"], tmp_path / "run",
                                     freeze_extract=True)
    assert 0 <= results["eval_accuracy"] <= 1 and results["eval_samples"] == 32
    validation = make_repeat_dataset()["validation"].select(range(32))[:]
    assert reload_and_score(folder, "repeat", validation, ("sentence", None)) == pytest.approx(results["eval_accuracy"])


def test_llama_gqa_sequence_commands_on_mrpc_pairs(tmp_path, shared_data):
    """Pairs, and the model's own last-token classifier (`score`) as the probe: config.pad_token_id must be saved."""
    from papa.data.glue import load_sequence_task

    model_dir = save_tiny_decoder("llama", tmp_path / "model")
    data = ["--task_name", "mrpc", "--data_dir", shared_data / "glue" / "MRPC"]
    results, folder = three_commands(glue_avgs.main, glue.main, model_dir, data, tmp_path / "run",
                                     freeze_extract=False)
    assert {"eval_accuracy", "eval_f1"} <= set(results)
    # the second text starts at T//2 in every example (the averaging pass saw position T//2 filled 48 times)
    patterns = torch.load(tmp_path / "run" / "avgs" / "attention_patterns_sums.pt", weights_only=True)
    assert patterns[T // 2, T // 2] == 48
    validation = load_sequence_task("mrpc", data_dir=shared_data / "glue" / "MRPC",
                                    splits=("validation",))["validation"].select(range(32))[:]
    score = reload_and_score(folder, "mrpc", validation, ("sentence1", "sentence2"))
    assert score == pytest.approx(results["eval_accuracy"])


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_ner_commands(tmp_path, shared_data, name):
    model_dir = save_tiny_decoder(name, tmp_path / "model")
    data = ["--task_name", "ner", "--data_dir", shared_data / "conll2003"]
    results, folder = three_commands(ner_avgs.main, ner.main, model_dir, data, tmp_path / "run", freeze_extract=True)
    assert {"eval_f1", "eval_accuracy"} <= set(results)
    if name == "gpt2":  # byte-level BPE reads pre-split words with a prefix space, as RoBERTa's does
        assert json.loads((folder / "tokenizer_config.json").read_text())["add_prefix_space"] is True


def test_sweep_with_controls_on_a_gqa_llama(tmp_path):
    model_dir = save_tiny_decoder("llama", tmp_path / "model")
    out = tmp_path / "sweep"
    run_command(script("run_papa_sweep.py") + [
        "--model_name_or_path", model_dir, "--task_name", "repeat", "--output_dir", out, "--static_heads_nums", 0, 6,
        "--max_seq_length", T, "--num_train_epochs", 1, "--sort_num_train_epochs", 1, "--max_train_samples", 32,
        "--max_eval_samples", 16, "--controls", "uniform", "random_order", "mean_output", "zero_output", "first_token",
        "trained_constant"], cwd=tmp_path)
    assert torch.load(out / "avgs" / "mean_outputs.pt", weights_only=True).shape == (3, 4, T, 8)
    for folder in ("k_0", "k_6", "uniform_k_6", "random_k_6", "mean_k_6", "zero_k_6", "first_k_6", "trained_k_6"):
        results = json.loads((out / folder / "eval_results.json").read_text())
        assert 0 <= results["eval_accuracy"] <= 1, folder
        assert (out / folder / "eval_predictions.jsonl").is_file(), folder
    assert (out / "results.csv").is_file() and (out / "results.md").is_file()


def test_grid_of_the_other_llama_like_families(tmp_path):
    """Mistral, Qwen2, Qwen3 and Gemma2 (soft-capping, query scaling) as a grid of models × `repeat`: each through
    the averaging script, the ranking run, probing at k = 0 and 6, and the uniform control, and into the summary."""
    names = ["mistral", "qwen2", "qwen3", "gemma2"]
    models = [save_tiny_decoder(name, tmp_path / name) for name in names]
    out = tmp_path / "grid"
    run_command(script("run_papa_sweep.py") + [
        "--model_name_or_path", *models, "--task_name", "repeat", "--output_dir", out, "--static_heads_nums", 0, 6,
        "--max_seq_length", T, "--num_train_epochs", 1, "--sort_num_train_epochs", 1, "--max_train_samples", 32,
        "--max_eval_samples", 16, "--controls", "uniform"], cwd=tmp_path)
    import csv

    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert {r["model"] for r in rows} == set(names)
    assert {r["status"] for r in rows} == {"ok"}
    for name in names:
        pair = out / name / "repeat"
        assert load_constant_matrices(pair / "avgs").shape == (3, 4, T, T), name
        for folder in ("k_0", "k_6", "uniform_k_6"):
            assert 0 <= json.loads((pair / folder / "eval_results.json").read_text())["eval_accuracy"] <= 1
        assert len(json.loads((pair / "k_6" / "config.json").read_text())["papa"]["static_heads"]) == 6
