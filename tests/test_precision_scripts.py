"""The scripts in reduced precision: --fp16 / --bf16 training runs (ranking and probing) and the averaging scripts'
--mixed_precision, in-process on a tiny BERT.

On CPU the Trainer (accelerate) autocasts only bf16: `--fp16 --use_cpu` trains in float32 (checked below, so the day
that changes the test says so). The float16 forward and backward themselves are tested directly in test_precision.py.
"""

import json
import unittest.mock

import numpy as np
import pytest
import torch
from cli_fixtures import (T, command_error, papa_flags, run_command, tiny_bert, write_cola,  # noqa: F401
                          write_conll, write_papa_inputs)

from papa.sweep.defaults import averaging_flags
from papa.sweep.run import parse_passthrough


def finite_metrics(folder):
    for name in ("train_results.json", "eval_results.json"):
        results = json.loads((folder / name).read_text())
        assert all(np.isfinite(v) for v in results.values() if isinstance(v, (int, float))), (name, results)
    return results


@pytest.mark.parametrize("flag", ["--fp16", "--bf16"])
def test_ranking_and_probing_runs_in_half_precision(tmp_path, tiny_bert, flag):
    avgs, sort = write_papa_inputs(tmp_path)
    data = write_cola(tmp_path / "cola", test=False)
    common = ["--model_name_or_path", tiny_bert, "--task_name", "cola", "--data_dir", data, "--do_train", "--do_eval",
              "--num_train_epochs", 1, "--use_cpu", "true", flag, "true"]
    run_command("glue", [*common, "--output_dir", tmp_path / "rank", *papa_flags(avgs, sort, k=0)[:-2], "--seed", 3,
                         "--sort_calculating", "True", "--grad_for_classifier_only", "false"])
    finite_metrics(tmp_path / "rank")
    assert np.isfinite(np.load(tmp_path / "rank" / "lambdas.npy")).all()
    run_command("glue", [*common, "--output_dir", tmp_path / "k6", *papa_flags(avgs, tmp_path / "rank", k=6)])
    finite_metrics(tmp_path / "k6")


def test_token_probing_in_bf16(tmp_path, tiny_bert):
    avgs, sort = write_papa_inputs(tmp_path)
    data = write_conll(tmp_path / "conll", splits=("train", "valid"))
    run_command("ner", ["--model_name_or_path", tiny_bert, "--task_name", "ner", "--data_dir", data, "--do_train",
                        "--do_eval", "--num_train_epochs", 1, "--use_cpu", "true", "--bf16", "true", "--output_dir",
                        tmp_path / "out", *papa_flags(avgs, sort, k=6)])
    finite_metrics(tmp_path / "out")


def test_cpu_trainer_autocasts_bf16_but_not_fp16(tmp_path):
    """What each flag gets on this device: the dtype a Linear computes in during a Trainer step."""
    from datasets import Dataset
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    seen = {}
    for flag in ("fp16", "bf16"):
        model = BertForSequenceClassification(BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1,
                                                         num_attention_heads=2, intermediate_size=8))
        model.bert.encoder.layer[0].attention.self.query.register_forward_hook(
            lambda module, args, out, flag=flag: seen.setdefault(flag, out.dtype) and None)
        data = Dataset.from_dict({"input_ids": [[1, 2, 3]] * 4, "labels": [0, 1] * 2})
        args = TrainingArguments(str(tmp_path / flag), use_cpu=True, max_steps=1, per_device_train_batch_size=4,
                                 report_to=[], save_strategy="no", **{flag: True})
        Trainer(model=model, args=args, train_dataset=data).train()
    assert seen == {"fp16": torch.float32, "bf16": torch.bfloat16}


@pytest.mark.parametrize("precision,tolerance", [("fp16", 2e-3), ("bf16", 1.5e-2)])
def test_averages_under_mixed_precision_match_fp32(tmp_path, tiny_bert, precision, tolerance):
    data = write_cola(tmp_path / "cola", test=False)
    common = ["--model_name_or_path", tiny_bert, "--task_name", "cola", "--data_dir", data, "--max_length", T,
              "--use_papa_preprocess", "true", "--mean_outputs"]
    run_command("glue_avgs", [*common, "--output_dir", tmp_path / "fp32"])
    run_command("glue_avgs", [*common, "--output_dir", tmp_path / precision, "--mixed_precision", precision])
    for name in ("avgs.pt", "attention_sums.pt", "mean_outputs.pt"):
        want, got = (torch.load(tmp_path / d / name) for d in ("fp32", precision))
        assert got.dtype == torch.float32 and not torch.equal(got, want)  # it did run in another precision
        torch.testing.assert_close(got, want, atol=tolerance * want.abs().max().item(), rtol=0)
    counts = [torch.load(tmp_path / d / "attention_patterns_sums.pt") for d in ("fp32", precision)]
    assert torch.equal(*counts)


def test_mixed_precision_is_checked(tmp_path, capsys):
    line = command_error("glue_avgs", ["--task_name", "cola", "--output_dir", tmp_path, "--mixed_precision", "fp8"],
                         capsys)
    assert "--mixed_precision must be one of no, fp16, bf16" in line


@pytest.mark.parametrize("passthrough,expected", [
    ([], []), (["--fp16"], ["--mixed_precision", "fp16"]), (["--fp16", "false"], []),
    (["--bf16=true", "--use_cpu", "true", "--seed", "1"], ["--mixed_precision", "bf16"]), (["--fp16", "--gradient_checkpointing"],
                                                                       ["--mixed_precision", "fp16"]),
])
def test_the_sweep_runs_the_averaging_in_the_training_runs_precision(passthrough, expected, tmp_path):
    assert averaging_flags(parse_passthrough(passthrough, str(tmp_path))) == expected


def test_the_averaging_stage_reads_what_the_training_runs_read(tmp_path):
    """The passed-through flags parsed once (the training runs' parser); the averaging stage gets those that decide
    what is averaged, in its own spelling, and none other."""
    flags = parse_passthrough(["--tokenizer_name", "tok", "--original_token_types", "--use_fast_tokenizer", "false",
                               "--dataset_config_name=c", "--weight_decay", "0.1", "--use_auth_token"], str(tmp_path))
    assert averaging_flags(flags) == ["--original_token_types", "true", "--dataset_config_name", "c",
                                      "--tokenizer_name", "tok", "--use_auth_token", "true", "--use_slow_tokenizer",
                                      "true"]


@pytest.mark.slow
def test_probing_run_with_torch_compile(tmp_path, tiny_bert):
    """--torch_compile true (the Trainer compiles the model with inductor): a probing run with constant heads in
    training mode (attention dropout on: the probabilities path) and evaluation gives the eager run's metrics."""
    avgs, sort = write_papa_inputs(tmp_path)
    data = write_cola(tmp_path / "cola", test=False)
    common = ["--model_name_or_path", tiny_bert, "--task_name", "cola", "--data_dir", data, "--do_train", "--do_eval",
              "--num_train_epochs", 1, "--use_cpu", "true", *papa_flags(avgs, sort, k=6)]
    run_command("glue", [*common, "--output_dir", tmp_path / "eager"])
    torch._dynamo.reset()
    import torch._inductor.config as inductor

    with unittest.mock.patch.object(inductor, "fallback_random", True):  # dropout draws as eager's, for the comparison
        run_command("glue", [*common, "--output_dir", tmp_path / "compiled", "--torch_compile", "true"])
    eager, compiled = (finite_metrics(tmp_path / name) for name in ("eager", "compiled"))
    scores = [k for k in eager if k.startswith("eval_") and not k.endswith(("runtime", "per_second"))]
    assert "eval_matthews_correlation" in scores
    for key in scores:
        assert compiled[key] == pytest.approx(eager[key], rel=1e-4, abs=1e-6), key
