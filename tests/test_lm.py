"""The language-modelling task (`--task_name lm`), against independent computations: run_clm's chunking on a
hand-made example and on text files tokenised line by line; the probing run's eval_loss against a manual loop
over the stock HF model's own loss (k = 0 = the stock perplexity) and against its per-block predictions file;
the ranking run changes only the λ; the sign convention (a rise in perplexity is a negative change in
performance) in results, intervals, bands and summary; the clear errors (encoders, no text offline, flags that
do not apply). Tiny random decoders saved with a byte-level BPE tokenizer without a pad token (lm_fixtures).
"""

import json
import math

import numpy as np
import pytest
import torch
import transformers
from datasets import Dataset, DatasetDict

from lm_fixtures import make_tokenizer, save_tiny_lm, write_text
from papa.data import lm as lm_data
from papa.runs.arguments import parse_training_args
from papa.errors import PapaError
from papa.method.attention import load_constant_matrices
from papa.data.lm import group_texts, lm_blocks
from papa.runs.predictions import block_digest
from papa.runs.run import run_probing
from papa.data.tasks import get_task

LM = get_task("lm")
T = 12  # tiny_decoders' T: the block length of every run here


# ----------------------------------------------------------------------------- chunking


def test_group_texts_on_a_hand_made_example():
    examples = {"input_ids": [[1, 2, 3], [4, 5], [6, 7, 8, 9]], "attention_mask": [[1, 1, 1], [1, 1], [1, 1, 1, 1]]}
    out = group_texts(examples, 4)
    assert out == {"input_ids": [[1, 2, 3, 4], [5, 6, 7, 8]], "attention_mask": [[1] * 4, [1] * 4],
                   "labels": [[1, 2, 3, 4], [5, 6, 7, 8]]}  # 9 dropped: run_clm drops the remainder
    assert group_texts({"input_ids": [[1, 2]], "attention_mask": [[1, 1]]}, 4)["input_ids"] == []


def test_blocks_of_text_files_as_run_clm_cuts_them(tmp_path, monkeypatch):
    """Each line tokenised with its line break; every GROUP_BATCH lines concatenated and cut, remainder dropped;
    the sample limit counts blocks."""
    monkeypatch.setattr(lm_data, "GROUP_BATCH", 7)
    path = write_text(tmp_path / "train.txt", 30)
    tokenizer = make_tokenizer()
    lines = open(path, encoding="utf-8").read().splitlines(keepends=True)
    expected = []
    for start in range(0, len(lines), 7):  # by hand: a batch's tokens, cut into blocks of T
        ids = [i for line in lines[start:start + 7] for i in tokenizer(line)["input_ids"]]
        expected += [ids[i:i + T] for i in range(0, len(ids) // T * T, T)]
    texts = lm_data.load_lm_texts(LM, ["train"], train_file=path)
    blocks = lm_blocks(texts, tokenizer, T)["train"]
    assert blocks["input_ids"] == expected and blocks["labels"] == expected
    assert all(mask == [1] * T for mask in blocks["attention_mask"])
    limited = lm_blocks(texts, tokenizer, T, {"train": 3})["train"]
    assert limited["input_ids"] == expected[:3]


def test_documents_are_lines_as_datasets_text_builder_reads_them(tmp_path):
    """Lines break at "\n" (and "\r\n") only: a form feed or a Unicode line separator stays inside its document."""
    from datasets import load_dataset

    path = tmp_path / "odd.txt"
    path.write_bytes("first doc\x0cwith a form feed\nsecond\u2028same doc\x85too\r\nthird\x1c\n".encode("utf-8"))
    texts = lm_data.load_lm_texts(LM, ["train"], train_file=str(path))["train"]["text"]
    reference = load_dataset("text", data_files=str(path), keep_linebreaks=True, cache_dir=str(tmp_path / "c"))
    assert texts == reference["train"]["text"]
    assert len(texts) == 3 and texts[0] == "first doc\x0cwith a form feed\n"


def test_too_little_text_for_one_block(tmp_path):
    (tmp_path / "t.txt").write_text("the\n")
    texts = lm_data.load_lm_texts(LM, ["train"], train_file=str(tmp_path / "t.txt"))
    with pytest.raises(PapaError, match="less than one block of 12"):
        lm_blocks(texts, make_tokenizer(), T)


# ----------------------------------------------------------------------------- clear errors


@pytest.fixture(scope="module")
def lm_folder(tmp_path_factory):
    """A tiny random Llama (grouped K/V, rotary) causal LM with its tokenizer (no pad token), and two text files."""
    root = tmp_path_factory.mktemp("lm")
    model = save_tiny_lm("llama", root / "model")
    return model, write_text(root / "train.txt", 40, seed=0), write_text(root / "valid.txt", 20, seed=1)


def probing_args(model, out, *extra):
    return parse_training_args(["--model_name_or_path", model, "--task_name", "lm", "--max_seq_length", str(T),
                                "--output_dir", str(out), "--report_to", "none", "--per_device_eval_batch_size", "4",
                                *extra])


@pytest.mark.parametrize("extra, message", [
    (["--do_eval"], "no data for the validation split.*--validation_file.*plain text"),
    (["--do_eval", "--dataset_name", "wikitext"], "hub is offline.*--dataset_name wikitext"),
    (["--do_eval", "--validation_file", "VALID", "--use_freeze_extract_pooler"], "--use_freeze_extract_pooler does not"),
    (["--do_eval", "--validation_file", "VALID", "--do_predict"], "--do_predict does not apply"),
    (["--do_train", "--train_file", "VALID"], "trains nothing without --sort_calculating"),
])
def test_bad_lm_runs(lm_folder, tmp_path, monkeypatch, extra, message):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, _, valid = lm_folder
    with pytest.raises(PapaError, match=message):
        run_probing(LM, *probing_args(model, tmp_path / "out", *[valid if a == "VALID" else a for a in extra]))
    assert not (tmp_path / "out").exists()


def test_an_encoder_is_refused(lm_folder, tmp_path):
    """The bundled MiniLM (a BERT encoder) has no causal LM head: the probing run, the averaging run and the sweep
    say so before any heavy work."""
    from papa.runs.averaging_arguments import parse_averaging_args
    from papa.runs.run import run_averaging
    from papa.sweep.arguments import parse_sweep_args
    from papa.sweep.run import make_plan

    _, train, valid = lm_folder
    argv = ["--task_name", "lm", "--max_seq_length", str(T), "--output_dir", str(tmp_path / "o"),
            "--validation_file", valid, "--do_eval", "--report_to", "none"]
    with pytest.raises(PapaError, match="bert encoder, which has none: use a decoder .*gpt2"):
        run_probing(LM, *parse_training_args(argv))
    with pytest.raises(PapaError, match="bert encoder"):
        run_averaging(LM, parse_averaging_args(["--task_name", "lm", "--train_file", train, "--output_dir",
                                                str(tmp_path / "a")]))
    args, _ = parse_sweep_args(["--task_name", "lm", "--train_file", train, "--output_dir", str(tmp_path / "s")])
    with pytest.raises(PapaError, match="bert encoder"):
        make_plan(args, LM)
    assert not any((tmp_path / d).exists() for d in ("o", "a", "s"))


def test_sweep_stages_of_lm(lm_folder, tmp_path):
    """The probing stages only evaluate (no --do_train, no probe, no PAPA layout); the ranking run trains the λ."""
    from papa.sweep.arguments import parse_sweep_args
    from papa.sweep.run import make_plan, make_stages

    model, train, valid = lm_folder
    args, passthrough = parse_sweep_args(["--task_name", "lm", "--model_name_or_path", model, "--train_file", train,
                                          "--validation_file", valid, "--output_dir", str(tmp_path / "s"),
                                          "--controls", "uniform"])
    plan = make_plan(args, LM)
    stages = {s.name: s for s in make_stages(plan, args, passthrough)}
    assert plan.ks == [0, 6, 11, 12] and plan.max_seq_length == 128  # 3 x 4 query heads; LM_DEFAULTS
    for stage in stages.values():
        assert not {"--use_papa_preprocess", "--use_freeze_extract_pooler", "--grad_for_classifier_only"} & set(stage.args)
    assert "--do_train" in stages["sort"].args and "--sort_calculating" in stages["sort"].args
    for name in ("k_0", "k_6", "uniform_k_6"):
        assert "--do_train" not in stages[name].args and "--do_eval" in stages[name].args
        assert "(evaluation)" in stages[name].description


def test_the_default_ranker_is_taylor_on_a_decoder_and_lambda_on_an_encoder(lm_folder, tmp_path, capsys):
    """λ's ranking of a decoder's heads sits among random orders (docs/rankers.md): a decoder's sweep ranks by taylor unless --ranker
    is given; an encoder's keeps the paper's λ; λ asked for on a decoder is run, with one line pointing to the docs."""
    from papa.sweep.arguments import parse_sweep_args
    from papa.sweep.run import begin_sweep, make_plan, prepare_sweep

    model, train, valid = lm_folder
    common = ["--train_file", train, "--validation_file", valid, "--output_dir", str(tmp_path / "s")]
    args, passthrough = parse_sweep_args(["--task_name", "lm", "--model_name_or_path", model, *common])
    plan = make_plan(args, LM)
    assert plan.rankers == ("taylor",) and plan.causal
    assert dict(plan.ranker_flags)["taylor"][:2] == ["--ranker", "taylor"]
    encoder, _ = parse_sweep_args(["--output_dir", str(tmp_path / "e")])
    assert make_plan(encoder, get_task("repeat")).rankers == ("lambda",)
    # --ranker_loss distill has no signal for taylor: refused with the fix, not silently changed
    distill, _ = parse_sweep_args(["--task_name", "lm", "--model_name_or_path", model, "--ranker_loss", "distill", *common])
    with pytest.raises(PapaError, match="distill has no signal for taylor.*add --ranker gates, loo"):
        make_plan(distill, LM)
    # λ on a decoder, asked for: run, with a pointer
    args, passthrough = parse_sweep_args(["--task_name", "lm", "--model_name_or_path", model, "--ranker", "lambda",
                                          *common])
    prepared = prepare_sweep(args, LM, passthrough)
    assert prepared.plan.rankers == ("lambda",)
    begin_sweep(prepared)
    out = capsys.readouterr().out
    assert "ranked by lambda" in out and "docs/rankers.md" in out.splitlines()[1]


# ----------------------------------------------------------------------------- sign convention


def test_relative_changes_are_changes_in_performance():
    """Perplexity 10 → 12 is −20% (worse), 10 → 8 is +20%; accuracy 0.8 → 0.6 is −25%, as before."""
    from papa.reporting.results import add_control_columns, build_results, metric_band, results_markdown

    columns, rows = build_results({0: {"eval_perplexity": 10.0}, 4: {"eval_perplexity": 12.0},
                                   8: {"eval_perplexity": 8.0}}, LM, 8)
    assert [r["rel_change_eval_perplexity"] for r in rows] == [0.0, pytest.approx(-0.2), pytest.approx(0.2)]
    assert str(rows[0]["rel_change_eval_perplexity"]) == "0.0"  # not -0.0
    columns, rows = add_control_columns(columns, rows, {"uniform": {4: {"eval_perplexity": 15.0}}}, LM)
    assert rows[1]["rel_change_uniform_eval_perplexity"] == pytest.approx(-0.5)
    _, acc = build_results({0: {"eval_accuracy": 0.8}, 4: {"eval_accuracy": 0.6}}, get_task("sst2"), 8)
    assert acc[1]["rel_change_eval_accuracy"] == pytest.approx(-0.25)
    # an interval of the change [-0.3, -0.1] is perplexity [11, 13] on the metric's axis, lows below highs
    rows[1].update(rel_change_eval_perplexity_ci_low=-0.3, rel_change_eval_perplexity_ci_high=-0.1)
    lows, highs = metric_band(rows, "rel_change_eval_perplexity", "eval_perplexity", LM.direction("eval_perplexity"))
    assert (lows[1], highs[1]) == (pytest.approx(11.0), pytest.approx(13.0))
    assert "negative = worse" in results_markdown(columns, rows, "t", 8, task=LM)


def fake_lm_run(folder, nll, tokens, blocks=None):
    from papa.runs.metrics import compute_lm_metrics

    folder.mkdir(parents=True)
    records = [{"index": i, "nll_sum": float(v), "tokens": int(n)} for i, (v, n) in enumerate(zip(nll, tokens))]
    for record, block in zip(records, blocks or []):
        record["block"] = block
    (folder / "eval_predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    metrics = compute_lm_metrics(nll, tokens)
    (folder / "eval_results.json").write_text(json.dumps({f"eval_{k}": v for k, v in metrics.items()}))


def test_bootstrap_of_perplexity_from_the_blocks(tmp_path):
    """A resample's perplexity is exp(Σ nll / Σ tokens) of its blocks; a clear rise in perplexity is a change whose
    whole interval is below 0, in results.csv and in the grid's summary."""
    import csv

    from papa.reporting.intervals import resampled_metric
    from papa.reporting.results import write_results
    from papa.sweep.plan import Plan
    from papa.reporting.summary import PairOutcome, summary_markdown

    rng = np.random.default_rng(0)
    tokens = rng.integers(5, 12, 40)
    nll = tokens * 2.0 + rng.random(40)
    index = rng.integers(0, 40, (3, 40))
    by_hand = [math.exp(sum(nll[i] for i in row) / sum(tokens[i] for i in row)) for row in index]
    assert resampled_metric(LM, "perplexity", list(tokens), list(nll))(index) == pytest.approx(by_hand, rel=1e-12)

    fake_lm_run(tmp_path / "k_0", nll, tokens)
    fake_lm_run(tmp_path / "k_4", nll + 0.3 * tokens, tokens)  # +0.3 nats per token: perplexity × e^0.3
    (tmp_path / "avgs").mkdir()
    torch.save(torch.tril(torch.ones(2, 2, 4, 4)), tmp_path / "avgs" / "avgs.pt")
    (tmp_path / "sort").mkdir()
    np.save(tmp_path / "sort" / "lambdas.npy", np.zeros((2, 2)))
    (tmp_path / "sort" / "sorted_heads.json").write_text(json.dumps([[i // 2, i % 2] for i in range(4)]))
    plan = Plan(task=LM, model_path="m", layers=2, heads_per_layer=2, ks=[0, 4], output_dir=str(tmp_path),
                max_seq_length=4, num_train_epochs=1.0, sort_num_train_epochs=1.0, learning_rate=1e-3,
                per_device_train_batch_size=4, per_device_eval_batch_size=4, avgs_batch_size=4,
                evaluation_strategy="no", bootstrap_samples=200)
    results = write_results(plan, "m")
    row = list(csv.DictReader(open(tmp_path / "results.csv")))[1]
    ppl0 = math.exp(nll.sum() / tokens.sum())
    assert float(row["eval_perplexity"]) == pytest.approx(ppl0 * math.exp(0.3))
    assert float(row["rel_change_eval_perplexity"]) == pytest.approx(1 - math.exp(0.3))  # (ppl0 − ppl4) / ppl0
    assert float(row["rel_change_eval_perplexity_ci_low"]) <= float(row["rel_change_eval_perplexity_ci_high"]) < 0
    assert "for perplexity (lower is better)" in (tmp_path / "results.md").read_text()
    summary = summary_markdown([PairOutcome("m", LM, 4, [0, 4], results=results)])
    assert "perplexity (lower is better)" in summary and f"{100 * (1 - math.exp(0.3)):+.1f}%" in summary


def test_runs_on_other_text_of_the_same_length_are_not_paired(tmp_path):
    """Every lm block predicts T − 1 tokens, so token counts cannot tell two texts apart: the block digests do."""
    from papa.reporting.intervals import PredictionStore, change_distribution

    nll, tokens = np.full(4, 20.0), np.full(4, T - 1)
    fake_lm_run(tmp_path / "k_0", nll, tokens, blocks=[block_digest([i] * T) for i in range(4)])
    fake_lm_run(tmp_path / "same", nll + 1, tokens, blocks=[block_digest([i] * T) for i in range(4)])
    fake_lm_run(tmp_path / "other", nll + 1, tokens, blocks=[block_digest([i + 1] * T) for i in range(4)])
    store = PredictionStore(LM)
    paired = change_distribution(store, [str(tmp_path / "same")], [str(tmp_path / "k_0")], "eval_perplexity", 50)
    assert paired is not None
    with pytest.raises(PapaError, match="evaluated on different examples .*blocks differ"):
        change_distribution(store, [str(tmp_path / "other")], [str(tmp_path / "k_0")], "eval_perplexity", 50)


# ----------------------------------------------------------------------------- end to end


def glue(argv):
    from papa.cli.glue import main

    main(argv)


def stock_perplexity(model_path, blocks):
    """Σ over blocks of the stock HF model's mean loss × its T − 1 predictions, over all predictions, exp'd."""
    model = transformers.AutoModelForCausalLM.from_pretrained(model_path).eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for ids in blocks:
            ids = torch.tensor([ids])
            total += model(input_ids=ids, labels=ids).loss.item() * (len(ids[0]) - 1)
            count += len(ids[0]) - 1
    return total / count


@pytest.mark.slow
def test_lm_runs_end_to_end(lm_folder, tmp_path):
    from papa.models.modeling import build_model, load_papa_model
    from papa.runs.predictions import metrics_from_predictions

    model, train, valid = lm_folder
    common = ["--model_name_or_path", model, "--task_name", "lm"]
    glue_avgs_argv = [*common, "--train_file", train, "--max_length", str(T), "--output_dir", str(tmp_path / "avgs")]
    from papa.cli.glue_avgs import main as glue_avgs

    glue_avgs(glue_avgs_argv)
    avgs = load_constant_matrices(tmp_path / "avgs").full()  # stored as lower triangles (layout 2)
    assert avgs.shape == (3, 4, T, T) and torch.equal(avgs, avgs.tril())  # query heads; causal
    assert torch.allclose(avgs.sum(-1), torch.ones(3, 4, T))

    run = [*common, "--report_to", "none", "--max_seq_length", str(T), "--validation_file", valid, "--do_eval",
           "--per_device_eval_batch_size", "4", "--static_heads_dir", str(tmp_path / "avgs")]
    glue([*run, "--train_file", train, "--do_train", "--sort_calculating", "True", "--output_dir",
          str(tmp_path / "sort"), "--learning_rate", "0.05", "--num_train_epochs", "1",
          "--per_device_train_batch_size", "4", "--save_strategy", "no"])
    ranked = load_papa_model(str(tmp_path / "sort"))
    stock = transformers.AutoModelForCausalLM.from_pretrained(model)
    trained = dict(ranked.named_parameters())
    for name, param in stock.named_parameters():  # the model frozen: every stock weight as it was
        assert torch.equal(trained.pop(name), param), name
    untrained = dict(build_model("AutoModelForCausalLM", transformers.AutoConfig.from_pretrained(model), model, avgs,
                                 mix_all_heads=True).named_parameters())  # the ranking model before training
    assert set(trained) == {f"model.layers.{i}.self_attn.{p}" for i in range(3) for p in ("lambdas", "constant_matrices")}
    assert {n for n, p in trained.items() if not torch.equal(p, untrained[n])} == {
        f"model.layers.{i}.self_attn.lambdas" for i in range(3)}  # the λ, and only they, trained
    assert np.load(tmp_path / "sort" / "lambdas.npy").shape == (3, 4)

    blocks = lm_blocks(lm_data.load_lm_texts(LM, ["validation"], validation_file=valid),
                       transformers.AutoTokenizer.from_pretrained(model), T)["validation"]["input_ids"]
    expected_loss = stock_perplexity(model, blocks)
    for k in (0, 12):
        out = tmp_path / f"k_{k}"
        glue([*run, "--do_train", "--static_heads_num", str(k), "--sorting_heads_dir", str(tmp_path / "sort"),
              "--output_dir", str(out)])
        results = json.loads((out / "eval_results.json").read_text())
        assert results["eval_perplexity"] == math.exp(results["eval_loss"]) and results["eval_samples"] == len(blocks)
        rows = [json.loads(line) for line in open(out / "eval_predictions.jsonl")]
        assert [r["index"] for r in rows] == list(range(len(blocks))) and {r["tokens"] for r in rows} == {T - 1}
        assert [r["block"] for r in rows] == [block_digest(ids) for ids in blocks]  # the labels are the input ids
        assert len({r["block"] for r in rows}) == len({tuple(ids) for ids in blocks})
        from_file = metrics_from_predictions(LM, str(out / "eval_predictions.jsonl"))
        assert from_file == {"loss": results["eval_loss"], "perplexity": results["eval_perplexity"]}
        if k == 0:  # no constant head: the stock model's own loss
            assert results["eval_loss"] == pytest.approx(expected_loss, rel=1e-5)
        else:
            assert abs(results["eval_loss"] - expected_loss) > 1e-4
    assert not (tmp_path / "k_0" / "model.safetensors").exists()  # nothing trained, nothing saved

    # --grad_for_classifier_and_static_only: the constant matrices train on the LM loss, nothing else
    glue([*run, "--train_file", train, "--do_train", "--grad_for_classifier_and_static_only", "--static_heads_num",
          "12", "--sorting_heads_dir", str(tmp_path / "sort"), "--output_dir", str(tmp_path / "static"),
          "--learning_rate", "0.05", "--num_train_epochs", "1", "--per_device_train_batch_size", "4",
          "--save_strategy", "no"])
    from papa.method.ranking import first_k_heads, load_sorted_heads

    trained = dict(load_papa_model(str(tmp_path / "static")).named_parameters())
    static = first_k_heads(load_sorted_heads(str(tmp_path / "sort"), 3, 4), 12, 3, 4)
    untrained = build_model("AutoModelForCausalLM", transformers.AutoConfig.from_pretrained(model), model, avgs,
                            static)  # the same model before training
    changed = {n for n, p in untrained.named_parameters() if not torch.equal(p, trained[n])}
    assert changed == {f"model.layers.{i}.self_attn.constant_matrices" for i in range(3)}


@pytest.mark.slow
def test_lm_sweep_end_to_end(tmp_path):
    """The sweep on a tiny GPT-2 with a control: its tables read a rise in perplexity as a negative change."""
    import csv

    from conftest import run_command, script

    model = save_tiny_lm("gpt2", tmp_path / "gpt2")
    train, valid = write_text(tmp_path / "train.txt", 30, 0), write_text(tmp_path / "valid.txt", 12, 1)
    out = tmp_path / "sweep"
    run_command(script("run_papa_sweep.py") + [
        "--task_name", "lm", "--model_name_or_path", model, "--train_file", train, "--validation_file", valid,
        "--max_seq_length", str(T), "--static_heads_nums", "0", "12", "--controls", "uniform", "trained_constant",
        "--bootstrap_samples", "100", "--output_dir", out])
    rows = list(csv.DictReader(open(out / "results.csv")))
    ppl = {k: json.loads((out / f"k_{k}" / "eval_results.json").read_text())["eval_perplexity"] for k in (0, 12)}
    assert float(rows[1]["rel_change_eval_perplexity"]) == pytest.approx((ppl[0] - ppl[12]) / ppl[0])
    uniform = json.loads((out / "uniform_k_12" / "eval_results.json").read_text())["eval_perplexity"]
    assert float(rows[1]["rel_change_uniform_eval_perplexity"]) == pytest.approx((ppl[0] - uniform) / ppl[0])
    # trained constants: the matrices trained on the LM loss of the training blocks (a run of its own), compared
    # with PAPA's averages at the same k by their paired difference
    trained = json.loads((out / "trained_k_12" / "eval_results.json").read_text())["eval_perplexity"]
    assert "train_loss" in json.loads((out / "trained_k_12" / "all_results.json").read_text())
    assert float(rows[1]["diff_trained_constant_eval_perplexity"]) == pytest.approx((ppl[12] - trained) / ppl[0])
    md = (out / "results.md").read_text()
    assert "negative = worse" in md and "lower is better" in md
    assert (out / "results.png").read_bytes()[:4] == b"\x89PNG"
