"""`--constants toeplitz | sink_window` through the scripts and the sweep, on a tiny Llama's language modelling:
the averaging script writes structured_constants.pt, the probing runs use it at any length."""

import csv
import json
import math

import pytest
import torch
import transformers

from conftest import run_command, script
from lm_fixtures import save_tiny_lm, write_text
from papa.data import lm as lm_data
from papa.data.lm import lm_blocks
from papa.data.tasks import get_task
from papa.method.attention import load_constant_matrices, patch_model
from papa.method.ranking import first_k_heads, load_sorted_heads
from papa.method.structured_averaging import STRUCTURED_NAME, fit_full_averages, read_structured

T = 12
LM = get_task("lm")


@pytest.fixture(scope="module")
def lm_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("structured_lm")
    return (save_tiny_lm("llama", root / "model"), write_text(root / "train.txt", 40, seed=0),
            write_text(root / "valid.txt", 20, seed=1))


def averaging(model, train, out, *extra):
    from papa.cli.glue_avgs import main

    main(["--model_name_or_path", model, "--task_name", "lm", "--train_file", train, "--max_length", str(T),
          "--output_dir", str(out), *extra])


def patched_perplexity(model_path, structured_file, static, valid, seq_len):
    """exp of the mean next-token loss over the validation blocks of `seq_len`, computed here on a model patched
    by hand."""
    model = transformers.AutoModelForCausalLM.from_pretrained(model_path).eval()
    patch_model(model, static_heads=static, structured=structured_file)
    blocks = lm_blocks(lm_data.load_lm_texts(LM, ["validation"], validation_file=valid),
                       transformers.AutoTokenizer.from_pretrained(model_path), seq_len)["validation"]["input_ids"]
    total = count = 0
    with torch.no_grad():
        for ids in blocks:
            ids = torch.tensor([ids])
            total += model(input_ids=ids, labels=ids).loss.item() * (ids.shape[1] - 1)
            count += ids.shape[1] - 1
    return math.exp(total / count)


def test_toeplitz_averages_are_the_fit_of_the_full_averages(lm_files, tmp_path):
    model, train, _ = lm_files
    averaging(model, train, tmp_path / "full")
    averaging(model, train, tmp_path / "toeplitz", "--constants", "toeplitz", "--sink_tokens", "2")
    record = read_structured(tmp_path / "toeplitz" / STRUCTURED_NAME)
    assert record["kind"] == "toeplitz" and record["seq_len"] == T and record["sink"].shape == (3, 4, 2)
    assert not (tmp_path / "toeplitz" / "avgs.pt").exists()
    full = load_constant_matrices(tmp_path / "full").full()
    counts = torch.load(tmp_path / "full" / "attention_patterns_sums.pt")
    sink, profile = fit_full_averages(full, counts, 2)
    torch.testing.assert_close(record["sink"], sink, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(record["profile"], profile, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seq_len", [T, 2 * T])
def test_probing_runs_use_structured_constants_at_any_length(lm_files, tmp_path, seq_len):
    """Averaged at T, evaluated at T and 2T: the script's perplexity equals a model patched here."""
    from papa.cli.glue import main as glue

    model, train, valid = lm_files
    averaging(model, train, tmp_path / "avgs", "--constants", "toeplitz")
    run = ["--model_name_or_path", model, "--task_name", "lm", "--report_to", "none", "--validation_file", valid,
           "--do_eval", "--per_device_eval_batch_size", "4", "--static_heads_dir", str(tmp_path / "avgs"),
           "--constants", "toeplitz"]
    glue([*run, "--train_file", train, "--do_train", "--sort_calculating", "True", "--output_dir",
          str(tmp_path / "sort"), "--max_seq_length", str(T), "--num_train_epochs", "1",
          "--per_device_train_batch_size", "4", "--save_strategy", "no"])
    glue([*run, "--max_seq_length", str(seq_len), "--static_heads_num", "6", "--sorting_heads_dir",
          str(tmp_path / "sort"), "--output_dir", str(tmp_path / "k_6")])
    got = json.loads((tmp_path / "k_6" / "eval_results.json").read_text())["eval_perplexity"]
    static = first_k_heads(load_sorted_heads(tmp_path / "sort", 3, 4), 6, 3, 4)
    expected = patched_perplexity(model, tmp_path / "avgs" / STRUCTURED_NAME, static, valid, seq_len)
    assert got == pytest.approx(expected, rel=1e-4)


def test_toeplitz_constants_of_a_shorter_reach(lm_files, tmp_path):
    """--window D cuts the Toeplitz profile to its first D distances: written so by the averaging script, and applied
    so by a probing run reading the whole profile (its perplexity against a model patched here with the cut
    profile)."""
    from papa.cli.glue import main as glue

    model, train, valid = lm_files
    averaging(model, train, tmp_path / "whole", "--constants", "toeplitz")
    averaging(model, train, tmp_path / "cut", "--constants", "toeplitz", "--window", "4")
    whole = read_structured(tmp_path / "whole" / STRUCTURED_NAME)
    cut = read_structured(tmp_path / "cut" / STRUCTURED_NAME)
    assert whole["profile"].shape == (3, 4, T) and cut["profile"].shape == (3, 4, 4)
    assert torch.equal(cut["profile"], whole["profile"][..., :4]) and torch.equal(cut["sink"], whole["sink"])
    static = {layer: [0, 1, 2, 3] for layer in range(3)}
    sorting = tmp_path / "sort"
    sorting.mkdir()
    (sorting / "sorted_heads.json").write_text(json.dumps([[layer, head] for layer in range(3) for head in range(4)]))
    glue(["--model_name_or_path", model, "--task_name", "lm", "--report_to", "none", "--validation_file", valid,
          "--do_eval", "--per_device_eval_batch_size", "4", "--static_heads_dir", str(tmp_path / "whole"),
          "--constants", "toeplitz", "--window", "5", "--max_seq_length", str(T), "--static_heads_num", "12",
          "--sorting_heads_dir", str(sorting), "--output_dir", str(tmp_path / "k_12")])
    got = json.loads((tmp_path / "k_12" / "eval_results.json").read_text())["eval_perplexity"]
    expected = patched_perplexity(model, (whole["sink"], whole["profile"][..., :5]), static, valid, T)
    assert got == pytest.approx(expected, rel=1e-4)
    assert got != pytest.approx(patched_perplexity(model, tmp_path / "whole" / STRUCTURED_NAME, static, valid, T),
                                rel=1e-4)  # the cut changes what the heads read


def test_sink_window_constants_and_clear_errors(lm_files, tmp_path, capsys):
    from papa.cli.glue import main as glue

    model, train, valid = lm_files
    averaging(model, train, tmp_path / "sw", "--constants", "sink_window", "--sink_tokens", "2", "--window", "3")
    record = read_structured(tmp_path / "sw" / STRUCTURED_NAME)
    assert record["kind"] == "sink_window" and record["profile"].shape == (3, 4, 3)
    assert torch.equal(record["sink"], torch.ones(3, 4, 2))
    with pytest.raises(SystemExit):
        glue(["--model_name_or_path", model, "--task_name", "lm", "--validation_file", valid, "--do_eval",
              "--max_seq_length", str(T), "--static_heads_dir", str(tmp_path / "sw"), "--constants", "toeplitz",
              "--output_dir", str(tmp_path / "bad"), "--report_to", "none"])
    assert "holds sink_window constants, not toeplitz: pass --constants sink_window" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        averaging(model, train, tmp_path / "bad2", "--window", "3")
    assert "--window is the structured constants' reach" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        glue(["--model_name_or_path", model, "--task_name", "lm", "--validation_file", valid, "--do_eval",
              "--max_seq_length", str(T), "--static_heads_dir", str(tmp_path / "sw"), "--constants", "sink_window",
              "--window", "5", "--output_dir", str(tmp_path / "bad4"), "--report_to", "none"])
    assert "holds sink_window constants of window 3, not 5: pass --window 3" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        glue(["--model_name_or_path", model, "--task_name", "lm", "--train_file", train, "--do_train",
              "--sort_calculating", "True", "--head_replacements", "true", "--static_heads_dir", str(tmp_path / "sw"),
              "--constants", "sink_window", "--output_dir", str(tmp_path / "bad3"), "--report_to", "none"])
    assert "does not go with --head_replacements, which needs full constant matrices" in capsys.readouterr().err


def test_an_encoder_gets_one_clear_message(tmp_path):
    proc = run_command(script("run_papa_glue_avgs_creator.py") + [
        "--task_name", "repeat", "--max_train_samples", "8", "--max_length", "16", "--constants", "toeplitz",
        "--output_dir", str(tmp_path / "enc")], check=False)
    assert proc.returncode != 0
    assert "is an encoder: use --constants full" in proc.stderr and "Traceback" not in proc.stderr


def test_sweep_with_toeplitz_constants(lm_files, tmp_path):
    model, train, valid = lm_files
    out = tmp_path / "sweep"
    run_command(script("run_papa_sweep.py") + [
        "--task_name", "lm", "--model_name_or_path", model, "--train_file", train, "--validation_file", valid,
        "--max_seq_length", str(T), "--static_heads_nums", "0", "6", "12", "--controls", "random_order",
        "--bootstrap_samples", "50", "--output_dir", out, "--constants", "toeplitz", "--ranker", "lambda", "taylor"])
    assert (out / "avgs" / STRUCTURED_NAME).exists() and not (out / "avgs" / "avgs.pt").exists()
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert [r["k"] for r in rows] == ["0", "6", "12"] and rows[1]["random_order_eval_perplexity"]
    assert rows[1]["ranker_taylor_eval_perplexity"] and (out / "sort_taylor" / "head_scores.csv").exists()
    proc = run_command(script("run_papa_sweep.py") + [
        "--task_name", "lm", "--model_name_or_path", model, "--train_file", train, "--output_dir", tmp_path / "bad",
        "--controls", "uniform", "--constants", "toeplitz"], check=False)
    assert proc.returncode != 0 and "does not go with the uniform control" in proc.stderr
