"""`--sort_calculating True --ranker NAME` in the scripts: every ranker writes sorted_heads.json in the original's
format and head_scores.csv; a probe task's ranker scores with the probe trained at k = 0 (checked against loo
computed here on the saved probe); lm ranks on the LM loss; λ gets its own learning rate and logs its spread."""

import csv
import json

import numpy as np
import pytest
import torch
from cli_fixtures import HEADS, LAYERS, T, command_error, run_command, tiny_bert, write_cola, write_papa_inputs  # noqa: F401
from lm_fixtures import save_tiny_lm, write_text

RANKING = ["--do_train", "--do_eval", "--sort_calculating", "True", "--num_train_epochs", 1,
           "--save_strategy", "no", "--report_to", "none", "--per_device_train_batch_size", 4,
           "--per_device_eval_batch_size", 4, "--learning_rate", "1e-2", "--seed", 3]


def _cola_ranking(model, tmp_path, out, *flags):
    avgs, _ = write_papa_inputs(tmp_path)
    cola = write_cola(tmp_path / "cola", test=False)
    run_command("glue", ["--model_name_or_path", model, "--task_name", "cola", "--data_dir", cola,
                         "--max_seq_length", T, "--use_papa_preprocess", "--use_freeze_extract_pooler", "true",
                         "--static_heads_dir", avgs, "--output_dir", out, *RANKING, *flags])
    return avgs, cola


def _scores(folder):
    with open(folder / "head_scores.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("ranker", ["lambda", "taylor", "loo", "iterative", "iterative_taylor", "gates"])
def test_every_ranker_writes_the_originals_format(tiny_bert, tmp_path, ranker):
    out = tmp_path / "ranked"
    _cola_ranking(tiny_bert, tmp_path, out, "--ranker", ranker)
    ranking = json.loads((out / "sorted_heads.json").read_text())
    assert sorted(map(tuple, ranking)) == [(l, h) for l in range(LAYERS) for h in range(HEADS)]
    rows = _scores(out)
    assert [[int(r["layer"]), int(r["head"])] for r in rows] == ranking
    assert [int(r["rank"]) for r in rows] == list(range(LAYERS * HEADS))
    assert all(r["profile"] in ("first token", "previous token", "self", "broad") for r in rows)
    assert (out / "eval_results.json").is_file()
    if ranker in ("lambda", "taylor", "loo", "gates"):  # ascending scores (iterative: the order of choice)
        scores = [float(r["score"]) for r in rows]
        assert scores == sorted(scores)
    assert (out / "lambdas.npy").is_file() == (ranker == "lambda")


def test_loo_script_scores_with_the_probe_trained_at_k0(tiny_bert, tmp_path):
    """The script's loo equals loo computed here on the probe it trained (saved with the run) and the same data."""
    from transformers import AutoTokenizer

    from papa.data.glue import load_sequence_task
    from papa.data.tasks import get_task
    from papa.data.tokenized_cache import tokenize_cached
    from papa.method.scorers import Objective, loo_scores, make_units
    from papa.models.modeling import load_papa_model

    out = tmp_path / "ranked"
    avgs, cola = _cola_ranking(tiny_bert, tmp_path, out, "--ranker", "loo", "--save_total_limit", 1)
    probe = load_papa_model(str(out)).double()  # the mix-mode model with the probe trained at k = 0
    rows = _scores(out)
    # the training split, tokenised as the run did, in its order and batches of 4 (--per_device_eval_batch_size)
    task = get_task("cola")
    train = load_sequence_task(task, data_dir=str(cola), splits=("train",))
    tokenized = tokenize_cached(task, train, AutoTokenizer.from_pretrained(tiny_bert), list(task.labels), T, True,
                                True)["train"]
    batch = {k: torch.tensor(tokenized[k]) for k in ("input_ids", "attention_mask", "token_type_ids", "labels")}
    batches = [{k: v[i:i + 4] for k, v in batch.items()} for i in range(0, len(batch["labels"]), 4)]
    deltas = loo_scores(Objective(probe.eval(), batches, "sequence"), make_units(LAYERS, HEADS))
    by_head = {(int(r["layer"]), int(r["head"])): float(r["score"]) for r in rows}
    for u, ((layer, head),) in enumerate(make_units(LAYERS, HEADS)):
        assert by_head[(layer, head)] == pytest.approx(float(deltas[u]), rel=1e-4, abs=1e-6)


def test_lambda_learning_rate_and_spread(tiny_bert, tmp_path):
    slow, fast = tmp_path / "slow", tmp_path / "fast"
    _cola_ranking(tiny_bert, tmp_path, slow)
    _cola_ranking(tiny_bert, tmp_path, fast, "--lambda_learning_rate", "1.0")
    spread = [np.abs(np.load(folder / "lambdas.npy")).max() for folder in (slow, fast)]
    assert spread[1] > 10 * spread[0]  # λ moved further with a learning rate of its own
    history = json.loads((fast / "trainer_state.json").read_text())["log_history"]
    assert any("sigma_lambda_std" in entry for entry in history)


def test_lm_rankers_rank_on_the_lm_loss(tmp_path):
    model = save_tiny_lm("llama", tmp_path / "lm")
    train, valid = write_text(tmp_path / "train.txt", 12), write_text(tmp_path / "valid.txt", 6, seed=1)
    from papa.cli.glue_avgs import main as glue_avgs
    from papa.cli.glue import main as glue

    glue_avgs(["--model_name_or_path", str(model), "--task_name", "lm", "--train_file", str(train), "--max_length",
               "16", "--output_dir", str(tmp_path / "avgs")])
    for ranker, extra in (("loo", ["--rank_kv_groups", "true"]), ("gates", ["--ranker_loss", "distill"]),
                          ("taylor", [])):
        out = tmp_path / ranker
        glue(["--model_name_or_path", str(model), "--task_name", "lm", "--train_file", str(train),
              "--validation_file", str(valid), "--max_seq_length", "16", "--static_heads_dir", str(tmp_path / "avgs"),
              "--output_dir", str(out), "--ranker", ranker, *map(str, RANKING), *extra])
        ranking = json.loads((out / "sorted_heads.json").read_text())
        assert len(ranking) == 12
        if ranker == "loo":  # K/V groups rank as units: a group's two query heads side by side
            assert all(ranking[i][1] // 2 == ranking[i + 1][1] // 2 for i in range(0, 12, 2))


@pytest.mark.parametrize("flags, message", [
    (["--ranker", "taylor"], "add --sort_calculating True"),
    (["--sort_calculating", "True", "--ranker", "taylor", "--ranker_loss", "distill"], "no signal"),
    (["--sort_calculating", "True", "--lambda_learning_rate", "0"], "must be positive"),
    (["--sort_calculating", "True", "--ranker", "taylor", "--ranker_sample", "seeded"], "add --ranker_max_samples"),
])
def test_ranker_flag_errors(tmp_path, capsys, flags, message):
    line = command_error("glue", ["--output_dir", tmp_path / "o", "--task_name", "cola", *flags], capsys)
    assert message in line


def test_ranking_subset_first_or_seeded():
    """--ranker_sample: the first N examples, or N drawn without replacement with the seed, in the data's order."""
    import datasets

    from papa.runs.ranking import ranking_subset

    data = datasets.Dataset.from_dict({"i": list(range(20))})
    assert ranking_subset(data, 5)["i"] == [0, 1, 2, 3, 4]
    assert ranking_subset(data, None, "seeded", 1)["i"] == list(range(20))
    drawn = {seed: ranking_subset(data, 5, "seeded", seed)["i"] for seed in (1, 2)}
    for seed, rows in drawn.items():
        assert rows == sorted(np.random.default_rng(seed).choice(20, size=5, replace=False).tolist())
        assert ranking_subset(data, 5, "seeded", seed)["i"] == rows  # the same seed, the same examples
    assert drawn[1] != drawn[2]


def test_seeded_ranking_ranks_on_the_drawn_blocks(tmp_path):
    """The script's taylor with --ranker_sample seeded equals taylor computed here, on the saved model, over the
    blocks the seed draws; two seeds rank on different blocks."""
    from transformers import AutoTokenizer

    from papa.cli.glue import main as glue
    from papa.cli.glue_avgs import main as glue_avgs
    from papa.data.lm import lm_blocks, load_lm_texts
    from papa.data.tasks import get_task
    from transformers import AutoModelForCausalLM

    from papa.method.attention import patch_model
    from papa.method.scorers import Objective, make_units, taylor_scores

    model = save_tiny_lm("llama", tmp_path / "lm")
    train, valid = write_text(tmp_path / "train.txt", 24), write_text(tmp_path / "valid.txt", 6, seed=1)
    glue_avgs(["--model_name_or_path", model, "--task_name", "lm", "--train_file", train, "--max_length", "16",
               "--output_dir", str(tmp_path / "avgs")])
    scores = {}
    for seed in (3, 4):
        out = tmp_path / f"seed_{seed}"
        flags = [*map(str, RANKING[:-1]), str(seed)]
        glue(["--model_name_or_path", model, "--task_name", "lm", "--train_file", train, "--validation_file", valid,
              "--max_seq_length", "16", "--static_heads_dir", str(tmp_path / "avgs"), "--output_dir", str(out),
              "--ranker", "taylor", "--ranker_max_samples", "5", "--ranker_sample", "seeded", *flags])
        scores[seed] = {(int(r["layer"]), int(r["head"])): float(r["score"]) for r in _scores(out)}
        blocks = lm_blocks(load_lm_texts(get_task("lm"), ["train"], train_file=train),
                           AutoTokenizer.from_pretrained(model), 16)["train"]
        assert len(blocks) > 5
        rows = sorted(np.random.default_rng(seed).choice(len(blocks), size=5, replace=False).tolist())
        ids = torch.tensor(blocks.select(rows)["input_ids"])
        batches = [{"input_ids": ids[i:i + 4], "attention_mask": torch.ones_like(ids[i:i + 4]),
                    "labels": ids[i:i + 4]} for i in range(0, 5, 4)]
        mixed = patch_model(AutoModelForCausalLM.from_pretrained(model), str(tmp_path / "avgs"), mix_all_heads=True)
        units = make_units(mixed.config.num_hidden_layers, mixed.config.num_attention_heads)
        expected, _ = taylor_scores(Objective(mixed.double().eval(), batches, "lm"), units)
        for u, ((layer, head),) in enumerate(units):
            assert scores[seed][(layer, head)] == pytest.approx(float(expected[u]), rel=1e-4, abs=1e-7)
    assert scores[3] != scores[4]
