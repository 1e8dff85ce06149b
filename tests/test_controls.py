"""The sweep's controls (papa.sweep.controls) and the scripts' flags they use, and the tokenised-split cache.

- uniform: its avgs.pt of ones makes a head attend equally to every real token (against numpy);
- random_order: a seeded permutation of every head, recorded, not the λ order;
- mean_output: --mean_outputs writes what accumulate_attention computes, --replace_heads_with
  mean_output reaches patch_model, and the saved model reloads in that mode;
- the stages each control adds, and that PAPA's own stages keep their fingerprints;
- papa.data.tokenized_cache: a hit equals tokenising again; a stage with the cache equals one without.
"""

import json

import numpy as np
import pytest
import torch
from tiny_encoders import H, L, T, padded_batch, tiny_model
from torch.testing import assert_close

import papa
from papa.runs.arguments import parse_training_args
from papa.sweep.arguments import parse_sweep_args
from papa.errors import PapaError
from papa.method.ranking import load_sorted_heads, sorted_heads_from_lambdas
from papa.sweep import controls
from papa.sweep.run import make_plan, make_stages, prepare_sweep
from papa.data.tasks import get_task

# ----------------------------------------------------------------------------- uniform


def test_a_decoders_uniform_constants_are_lower_triangles_that_patch_as_ones(tmp_path):
    """causal=True stores layout 2 (half the bytes); a decoder patched from it equals one patched from full ones
    (its causal band keeps only the lower triangle of those)."""
    import copy

    import tiny_decoders
    from papa.method.layouts import PackedConstants
    from papa.sweep.plan import is_decoder

    dL, dH, dT = tiny_decoders.L, tiny_decoders.H, tiny_decoders.T
    controls.write_artifacts(str(tmp_path), ["uniform"], dL, dH, dT, seed=0, causal=True)
    stored = papa.load_constant_matrices(tmp_path / "uniform", dL, dH)
    assert isinstance(stored, PackedConstants)
    assert torch.equal(stored.full(), torch.ones(dL, dH, dT, dT).tril())
    stock = tiny_decoders.tiny_decoder("llama", "eager")
    static = [[0, 1], [1, 0], [1, 1], [1, 2], [1, 3]]
    got = papa.patch_model(copy.deepcopy(stock), tmp_path / "uniform", static_heads=static)
    want = papa.patch_model(copy.deepcopy(stock), torch.ones(dL, dH, dT, dT), static_heads=static)
    ids, mask = tiny_decoders.right_padded_batch()
    with torch.no_grad():
        assert torch.equal(got(input_ids=ids, attention_mask=mask).logits,
                           want(input_ids=ids, attention_mask=mask).logits)
    stock.config.save_pretrained(tmp_path / "decoder")
    tiny_model("bert", "sdpa").config.save_pretrained(tmp_path / "encoder")
    assert is_decoder(tmp_path / "decoder") and not is_decoder(tmp_path / "encoder")



def test_uniform_constants_attend_equally_to_every_real_token(tmp_path):
    controls.write_artifacts(str(tmp_path), ["uniform"], L, H, T, seed=0)
    ones = papa.load_constant_matrices(tmp_path / "uniform", L, H)
    assert torch.equal(ones, torch.ones(L, H, T, T))
    model = tiny_model("bert", "sdpa")
    static = {0: [0, 2], 1: [0, 1, 2, 3]}  # a partly and a wholly replaced layer
    papa.patch_model(model, tmp_path / "uniform", static_heads=static)
    ids, mask = padded_batch("bert")
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
    for b in range(len(ids)):
        m = mask[b].numpy().astype(np.float64)
        # independent: query i (real) spreads 1/(number of real tokens) over the real keys; padded queries: 0
        expected = np.outer(m, m) / m.sum()
        for layer, heads in static.items():
            for h in heads:
                np.testing.assert_allclose(out.attentions[layer][b, h].numpy(), expected, atol=1e-6)
    # save and reload: the same model, constants included
    papa.save_papa_model(model, tmp_path / "saved")
    reloaded = papa.load_papa_model(tmp_path / "saved")
    with torch.no_grad():
        inputs = dict(input_ids=ids, attention_mask=mask)
        assert_close(reloaded(**inputs).logits, model(**inputs).logits)


def test_control_artifacts_are_stable_bytes(tmp_path):
    """Rewriting them on every run must not change their bytes (their stages hash them)."""
    for folder in (tmp_path / "a", tmp_path / "b"):
        controls.write_artifacts(str(folder), ["uniform", "random_order"], 2, 4, T, seed=7)
    for name in ("uniform/avgs.pt", "random_order/sorted_heads.json", "random_order/random_order.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert not list(tmp_path.rglob("*.tmp"))


# ----------------------------------------------------------------------------- random order


def test_random_order_is_a_seeded_recorded_permutation(tmp_path):
    L, H = 6, 12
    controls.write_artifacts(str(tmp_path), ["random_order"], L, H, 32, seed=42)
    rows = load_sorted_heads(str(tmp_path / "random_order"), L, H)  # validates: every head once
    assert sorted(map(tuple, rows)) == [(layer, h) for layer in range(L) for h in range(H)]
    record = json.loads((tmp_path / "random_order" / "random_order.json").read_text())
    assert record["seed"] == 42 and (record["layers"], record["heads"]) == (L, H)
    assert rows == controls.random_order(L, H, 42)  # the seed reproduces it
    assert rows != controls.random_order(L, H, 43)
    # not the λ ranking, nor the layer-major order a tie-free ranking of equal λ would give
    lambdas = np.random.default_rng(0).normal(size=(L, H))
    assert rows != sorted_heads_from_lambdas(lambdas)
    assert rows != sorted_heads_from_lambdas(np.zeros((L, H)))


# ----------------------------------------------------------------------------- the stages each control adds


def plan_and_stages(tmp_path, *extra):
    args, passthrough = parse_sweep_args(["--output_dir", str(tmp_path / "sweep"), "--static_heads_nums", "0", "36",
                                          "72", "--max_seq_length", "32", *extra])
    plan = make_plan(args, get_task(args.task_name))
    return plan, {s.name: s for s in make_stages(plan, args, passthrough)}


def flag(stage, name):
    return stage.args[stage.args.index(name) + 1]


def test_control_stages_folders_and_flags(tmp_path):
    plan, plain = plan_and_stages(tmp_path)
    plan, stages = plan_and_stages(tmp_path, "--controls", "uniform", "random_order", "mean_output")
    out = plan.output_dir
    assert list(stages) == ["avgs", "sort", "k_0", "k_36", "k_72", "uniform_k_36", "uniform_k_72", "random_k_36",
                            "mean_k_36", "mean_k_72"]  # k=0 shared by all, k=72 by random order
    # PAPA's probing stages keep their command lines: adding controls does not redo them
    for name in ("sort", "k_0", "k_36", "k_72"):
        assert stages[name].args == plain[name].args
    assert "--mean_outputs" in stages["avgs"].args and "--mean_outputs" not in plain["avgs"].args
    assert stages["avgs"].outputs == ["avgs.pt", "mean_outputs.pt"]

    uniform, random_, mean = stages["uniform_k_36"], stages["random_k_36"], stages["mean_k_36"]
    assert flag(uniform, "--static_heads_dir") == f"{out}/uniform"
    assert flag(uniform, "--sorting_heads_dir") == f"{out}/sort"
    assert flag(random_, "--static_heads_dir") == f"{out}/avgs"
    assert flag(random_, "--sorting_heads_dir") == f"{out}/random_order"
    assert flag(mean, "--replace_heads_with") == "mean_output" and flag(mean, "--static_heads_dir") == f"{out}/avgs"
    for stage in (uniform, random_, mean):
        assert flag(stage, "--static_heads_num") == "36" and flag(stage, "--grad_for_classifier_only") == "true"
    # what each reads is fingerprinted: a changed artifact redoes exactly its stages
    assert uniform.inputs == [f"{out}/uniform/avgs.pt", f"{out}/sort/sorted_heads.json"]
    assert random_.inputs == [f"{out}/avgs/avgs.pt", f"{out}/random_order/sorted_heads.json"]
    assert mean.inputs == [f"{out}/avgs/mean_outputs.pt", f"{out}/sort/sorted_heads.json"]
    # every stage's flags parse as its script will parse them
    model_args, _, _ = parse_training_args(mean.args)
    assert model_args.replace_heads_with == "mean_output"
    assert [controls.run_folder(c, k, 72) for c, k in (("uniform", 0), ("random_order", 72), ("mean_output", 72),
                                                       (None, 36))] == ["k_0", "k_72", "mean_k_72", "k_36"]


def test_the_field_ablations_stages_folders_and_flags(tmp_path):
    plan, plain = plan_and_stages(tmp_path)
    plan, stages = plan_and_stages(tmp_path, "--controls", "zero_output", "first_token", "trained_constant")
    out = plan.output_dir
    assert list(stages) == ["avgs", "sort", "k_0", "k_36", "k_72", "zero_k_36", "zero_k_72", "first_k_36",
                            "first_k_72", "trained_k_36", "trained_k_72"]  # each shares PAPA's k=0
    for name in ("avgs", "sort", "k_0", "k_36", "k_72"):  # none adds to the averaging pass or changes PAPA's runs
        assert stages[name].args == plain[name].args
    zero, first, trained = stages["zero_k_36"], stages["first_k_36"], stages["trained_k_36"]
    for stage, mode in ((zero, "zero_output"), (first, "first_token")):
        model_args, _, _ = parse_training_args(stage.args)
        assert model_args.replace_heads_with == mode and model_args.grad_for_classifier_only
        assert stage.inputs == [f"{out}/sort/sorted_heads.json"]  # they read no file of matrices
    model_args, _, _ = parse_training_args(trained.args)
    assert model_args.grad_for_classifier_and_static_only and not model_args.grad_for_classifier_only
    assert (model_args.replace_heads_with, model_args.static_heads_dir) == ("constant", f"{out}/avgs")
    assert trained.inputs == [f"{out}/avgs/avgs.pt", f"{out}/sort/sorted_heads.json"]
    # apart from the mode flags, the trained run is PAPA's run at the same k: same data, epochs, seed
    strip = {"--grad_for_classifier_only", "--grad_for_classifier_and_static_only", "--output_dir"}

    def rest(stage):
        return [a for i, a in enumerate(stage.args) if a not in strip and stage.args[i - 1] not in strip]
    assert rest(trained) == rest(stages["k_36"])


def test_an_lm_sweeps_trained_constants_train_and_its_other_runs_only_evaluate(tmp_path):
    args, passthrough = parse_sweep_args(["--task_name", "lm", "--model_name_or_path", str(tmp_path), "--output_dir",
                                          str(tmp_path / "sweep"), "--controls", "trained_constant", "zero_output"])
    from papa.sweep.plan import Plan

    plan = Plan(task=get_task("lm"), model_path=str(tmp_path), layers=2, heads_per_layer=2, ks=[0, 2],
                          output_dir=str(tmp_path / "sweep"), max_seq_length=16, num_train_epochs=1.0,
                          sort_num_train_epochs=1.0, learning_rate=1e-3, per_device_train_batch_size=2,
                          per_device_eval_batch_size=2, avgs_batch_size=2, evaluation_strategy="no",
                          controls=("trained_constant", "zero_output"))
    stages = {s.name: s for s in make_stages(plan, args, passthrough)}
    assert "--do_train" in stages["trained_k_2"].args and "--grad_for_classifier_and_static_only" in stages[
        "trained_k_2"].args
    for name in ("k_2", "zero_k_2"):
        assert "--do_train" not in stages[name].args and "--grad_for_classifier_only" not in stages[name].args


def test_zero_and_first_token_runs_need_no_averages_folder(tmp_path):
    papa.save_ranking(np.zeros((6, 12)), tmp_path / "sort")
    for mode in ("zero_output", "first_token"):
        heads = heads_setup(tmp_path, "--sorting_heads_dir", str(tmp_path / "sort"), "--static_heads_num", "3",
                            "--replace_heads_with", mode)
        assert heads.static_heads == {0: [0, 1, 2]} and heads.loaded.shape[:3] == (6, 12, 8)
    with pytest.raises(PapaError, match="--static_heads_num 3 needs --sorting_heads_dir"):
        heads_setup(tmp_path, "--static_heads_num", "3", "--replace_heads_with", "first_token")
    with pytest.raises(PapaError, match="--grad_for_classifier_and_static_only works on the averages"):
        heads_setup(tmp_path, "--sorting_heads_dir", str(tmp_path / "sort"), "--static_heads_num", "3",
                    "--replace_heads_with", "zero_output", "--grad_for_classifier_and_static_only")


def test_the_averaging_stage_reads_what_the_training_runs_read(tmp_path):
    """Passed-through flags that change the data, the tokenizer or the weights reach the averaging stage as well,
    so avgs.pt is an average over the inputs the ranking and probing runs see (the PAPA layout's token types, a
    hub dataset's columns, a model revision); its flags parse as the averaging script parses them."""
    from papa.runs.averaging_arguments import parse_averaging_args

    passthrough = ["--original_token_types", "true", "--use_fast_tokenizer=false", "--model_revision", "v2",
                   "--tokenizer_name", "tok", "--config_name=cfg", "--bf16", "--use_cpu", "true",
                   "--dataset_config_name", "x", "--preprocessing_num_workers", "2", "--use_auth_token"]
    plan, stages = plan_and_stages(tmp_path, *passthrough)
    args = parse_averaging_args(stages["avgs"].args)
    assert (args.original_token_types, args.use_slow_tokenizer, args.model_revision, args.token) == (True, True, "v2",
                                                                                                     True)
    assert (args.tokenizer_name, args.config_name, args.dataset_config_name) == ("tok", "cfg", "x")
    assert (args.preprocessing_num_workers, args.mixed_precision) == (2, "bf16")
    model_args, data_args, _ = parse_training_args(stages["k_36"].args)  # and the training runs read the same
    assert (data_args.original_token_types, model_args.use_fast_tokenizer, model_args.model_revision) == (True, False,
                                                                                                          "v2")
    _, plain = plan_and_stages(tmp_path / "plain", "--original_token_types", "false", "--use_fast_tokenizer", "true")
    args = parse_averaging_args(plain["avgs"].args)
    assert (args.original_token_types, args.use_slow_tokenizer, args.model_revision) == (False, False, "main")


def test_bad_controls_are_one_clear_error(tmp_path):
    with pytest.raises(PapaError, match="invalid choice: 'shuffle'"):
        parse_sweep_args(["--controls", "shuffle"])
    args, passthrough = parse_sweep_args(["--output_dir", str(tmp_path), "--replace_heads_with", "mean_output"])
    with pytest.raises(PapaError, match="--replace_heads_with cannot be passed through"):  # the sweep sets it
        prepare_sweep(args, get_task("repeat"), passthrough)


# ----------------------------------------------------------------------------- mean output: script plumbing


def heads_setup(tmp_path, *flags):
    from transformers import AutoConfig

    from papa.runs.run import heads_to_replace

    model_args, _, _ = parse_training_args(["--output_dir", str(tmp_path / "o"), *flags])
    return heads_to_replace(model_args, AutoConfig.from_pretrained(papa.default_model_path()), 8)


def test_mean_output_bad_inputs(tmp_path):
    papa.save_ranking(np.zeros((6, 12)), tmp_path / "sort")
    torch.save(torch.zeros(6, 12, 8, 8), tmp_path / "avgs.pt")  # avgs.pt only: no mean_outputs.pt
    common = ["--static_heads_dir", str(tmp_path), "--sorting_heads_dir", str(tmp_path / "sort")]
    with pytest.raises(PapaError, match=r"mean_outputs.pt does not exist \(run the averaging script with --mean_out"):
        heads_setup(tmp_path, *common, "--static_heads_num", "3", "--replace_heads_with", "mean_output")
    with pytest.raises(PapaError, match="--sort_calculating works on the averages' constant matrices"):
        heads_setup(tmp_path, *common, "--sort_calculating", "--replace_heads_with", "mean_output")
    torch.save(torch.zeros(6, 12, 8, 5), tmp_path / "mean_outputs.pt")  # head size 5, MiniLM's is 32
    with pytest.raises(PapaError, match=r"shape \[layers, heads, T, 32\]"):
        heads_setup(tmp_path, *common, "--static_heads_num", "3", "--replace_heads_with", "mean_output")
    torch.save(torch.zeros(6, 12, 8, 32), tmp_path / "mean_outputs.pt")
    heads = heads_setup(tmp_path, *common, "--static_heads_num", "3", "--replace_heads_with", "mean_output")
    assert heads.mean_outputs.shape == (6, 12, 8, 32) and heads.constant_matrices is None
    assert heads.static_heads == {0: [0, 1, 2]} and not heads.mix_all_heads


# ----------------------------------------------------------------------------- the scripts, in-process


def run_main(main, argv):
    """A script's main in this process (no interpreter start-up); a PapaError would exit the test."""
    main([str(a) for a in argv])


@pytest.fixture(scope="module")
def script_runs(tmp_path_factory):
    """--mean_outputs and --replace_heads_with mean_output on 24 repeat examples, each run with the tokenised-split
    cache (the sweep's) and without it."""
    from papa.cli import glue, glue_avgs
    from papa.data.tokenized_cache import CACHE_ENV

    out = tmp_path_factory.mktemp("scripts")
    papa.save_ranking(np.random.default_rng(0).normal(size=(6, 12)), out / "sort")
    data = ["--task_name", "repeat", "--max_train_samples", "24"]
    probe = [*data, "--do_train", "--do_eval", "--max_seq_length", "32", "--use_papa_preprocess",
             "--grad_for_classifier_only", "true", "--use_freeze_extract_pooler", "true", "--sorting_heads_dir",
             out / "sort", "--static_heads_num", "40", "--replace_heads_with", "mean_output", "--max_eval_samples",
             "16", "--num_train_epochs", "1", "--report_to", "none", "--save_strategy", "no", "--seed", "3"]
    with pytest.MonkeyPatch.context() as env:
        for cached in (True, False):
            if cached:
                env.setenv(CACHE_ENV, str(out / "tokenized"))
            else:
                env.delenv(CACHE_ENV)
            avgs = out / f"avgs_{cached}"
            run_main(glue_avgs.main, [*data, "--max_length", "32", "--output_dir", avgs, "--use_papa_preprocess",
                                      "--mean_outputs", "--per_device_train_batch_size", "5"])
            run_main(glue.main, [*probe, "--output_dir", out / f"probe_{cached}", "--static_heads_dir", avgs])
    return out


@pytest.mark.slow
def test_mean_outputs_flag_writes_the_direct_computation(script_runs):
    from transformers import AutoModel, AutoTokenizer

    from papa.data.preprocessing import tokenize_sequence_examples
    from papa.data.synthetic import make_repeat_dataset

    path = papa.default_model_path()
    examples = make_repeat_dataset()["train"][:24]
    batch = tokenize_sequence_examples(AutoTokenizer.from_pretrained(path), examples, "sentence", None, 32,
                                       papa_layout=True, pad_to_max_length=True)
    inputs = {k: torch.tensor(batch[k]) for k in ("input_ids", "attention_mask", "token_type_ids")}
    model = AutoModel.from_pretrained(path, attn_implementation="eager")
    direct = papa.accumulate_attention(model, [inputs], 32, mean_outputs=True)  # one batch, not the script's 5
    saved = torch.load(script_runs / "avgs_True" / "mean_outputs.pt", weights_only=True)
    assert saved.shape == (6, 12, 32, 32)
    assert_close(saved, direct.mean_outputs(), rtol=1e-5, atol=1e-6)
    assert_close(torch.load(script_runs / "avgs_True" / "avgs.pt", weights_only=True), direct.averages())


@pytest.mark.slow
def test_replace_heads_with_mean_output_reaches_the_saved_model(script_runs):
    model = papa.load_papa_model(script_runs / "probe_True")
    assert model.config.papa["head_mode"] == "mean_output"
    ranking = json.loads((script_runs / "sort" / "sorted_heads.json").read_text())
    assert sorted(map(tuple, model.config.papa["static_heads"])) == sorted(map(tuple, ranking[:40]))
    means = torch.load(script_runs / "avgs_True" / "mean_outputs.pt", weights_only=True)
    for layer, module in enumerate(papa.method.attention.attention_modules(model)):
        static = module.static_heads
        assert module.constant_matrices is None
        if static:  # the mean outputs themselves, frozen by --grad_for_classifier_only
            assert_close(module.mean_outputs.detach(), means[layer, static])
        assert module.query.out_features == 32 * (12 - len(static))  # Q/K pruned as for constant heads


@pytest.mark.slow
def test_a_stage_with_the_tokenised_cache_equals_one_without(script_runs):
    # one training split shared by the averaging and the probing run, one validation split
    assert len(list((script_runs / "tokenized").iterdir())) == 2
    for name in ("avgs.pt", "mean_outputs.pt", "attention_sums.pt", "attention_patterns_sums.pt"):
        assert (script_runs / "avgs_True" / name).read_bytes() == (script_runs / "avgs_False" / name).read_bytes()
    with_cache, without = (json.loads((script_runs / f"probe_{c}" / "eval_results.json").read_text())
                           for c in (True, False))
    assert with_cache.keys() == without.keys()
    for key in with_cache:
        if not key.endswith(("runtime", "per_second")):
            assert with_cache[key] == without[key], key


def test_the_probe_flag_picks_the_models_own_head(tmp_path):
    """--probe model_head: every training stage runs without the freeze-extract pooler (a decoder's last-token
    classifier, docs/smollm2.md); the default keeps the original's probe, so existing sweeps stay up to date."""
    _, default = plan_and_stages(tmp_path / "a")
    _, own = plan_and_stages(tmp_path / "b", "--probe", "model_head", "--controls", "zero_output")
    for name in ("sort", "k_36", "zero_k_36"):
        assert flag(own[name], "--use_freeze_extract_pooler") == "false"
        model_args, _, _ = parse_training_args(own[name].args)
        assert not model_args.use_freeze_extract_pooler
    assert flag(default["k_36"], "--use_freeze_extract_pooler") == "true"
    with pytest.raises(PapaError):
        parse_sweep_args(["--probe", "cls"])
