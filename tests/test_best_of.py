"""best_of (papa.method.best_of): per head, whichever of constant attention, mean output and mean_corrected loses
least alone on the ranking data, against independent computations:

- the choice: the argmin over single-head models patched the ordinary way (one per head and candidate) and a loss
  written out here; the ranking script's best_of.csv likewise, on its ranking data (the first --ranker_max_samples
  training blocks), not on the held-out blocks;
- the best_of model: the stock model (float64) with each replaced head's context set by hand to the chosen
  replacement's norm(C·P)·V + c, from the averaging pass's own files;
- the sweep's best_of control end to end on a tiny decoder, its stages, and bad input.
"""

import csv

import numpy as np
import pytest
import torch
from conftest import run_command, script
from lm_fixtures import save_tiny_lm, write_text
from test_ablations import STATIC, D
from test_errors import cola_dir, expect_error, probing_args, write_avgs  # noqa: F401  (fixtures)
from test_mean_corrected import batch, corrected_stock, tiny
from test_replacements import hand_losses, setup, single_head
from tiny_encoders import H, L, T
from torch.testing import assert_close

import papa
from papa.errors import PapaError
from papa.method.averaging import accumulate_attention
from papa.method.best_of import CANDIDATES, best_of_choice, best_of_csv, best_of_pair, read_best_of
from papa.method.replacements import head_replacement_deltas, replacement_pairs


def read_rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def hand_choice(delta):
    """{(layer, head): name} of the smallest of {name: {(layer, head): Δ}}, with the gap to the runner-up."""
    out = {}
    for key in delta["constant"]:
        ranked = sorted(CANDIDATES, key=lambda n: delta[n][key])
        out[key] = ranked[0], delta[ranked[1]][key] - delta[ranked[0]][key]
    return out


def test_the_choice_is_the_argmin_of_single_head_models(tmp_path):
    build, batches, kind = setup("bert")  # float64, padded examples
    accumulate_attention(build(), batches, T, value_means=True).save(tmp_path)
    pairs = replacement_pairs(tmp_path, CANDIDATES)
    mix = papa.patch_model(build(), pairs["constant"][0], mix_all_heads=True)
    deltas, _ = head_replacement_deltas(mix, batches, kind, pairs)
    choice = best_of_choice(deltas)
    base = hand_losses(build(), batches[0], kind)
    delta = {name: {(layer, head): float((hand_losses(single_head(build, name, tmp_path, layer, head), batches[0],
                                                       kind) - base).mean())
                    for layer in range(L) for head in range(H)} for name in CANDIDATES}
    expected = hand_choice(delta)
    for (layer, head), (name, gap) in expected.items():
        assert gap < 1e-9 or choice[layer][head] == name, (layer, head)
    assert len({name for name, _ in expected.values()}) >= 2  # a choice, not one replacement everywhere
    # the file: every head once, its choice and each candidate's Δ, read back as written
    (tmp_path / "sort").mkdir()
    (tmp_path / "sort" / "best_of.csv").write_text(best_of_csv(deltas))
    assert read_best_of(tmp_path / "sort", L, H) == choice
    rows = read_rows(tmp_path / "sort" / "best_of.csv")
    assert [(int(r["layer"]), int(r["head"])) for r in rows] == [(la, h) for la in range(L) for h in range(H)]
    for row in rows:
        key = (int(row["layer"]), int(row["head"]))
        for name in CANDIDATES:
            assert float(row[f"delta_{name}"]) == pytest.approx(delta[name][key], rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("name", ["bert", "llama"])
def test_a_best_of_model_equals_its_heads_patched_by_hand(name, tmp_path):
    ids, mask = batch(name)
    accumulate_attention(tiny[name](), [{"input_ids": ids, "attention_mask": mask}], T,
                         value_means=True).save(tmp_path)
    choice = [[CANDIDATES[(layer + head) % 3] for head in range(H)] for layer in range(L)]  # each one somewhere
    lines = ["layer,head,choice"] + [f"{la},{h},{choice[la][h]}" for la in range(L) for h in range(H)]
    (tmp_path / "best_of.csv").write_text("\n".join(lines) + "\n")
    # by hand: each replaced head's (C, c) from the averaging pass's files
    averages = papa.load_constant_matrices(tmp_path)
    averages = (averages if isinstance(averages, torch.Tensor) else averages.full()).double()
    means = torch.load(tmp_path / "mean_outputs.pt").double()
    corrections = torch.load(tmp_path / "output_corrections.pt").double()
    constants, added = averages.clone(), torch.zeros_like(corrections)
    for layer in range(L):
        for head in range(H):
            if choice[layer][head] == "mean_output":
                constants[layer, head], added[layer, head] = 0, means[layer, head]
            elif choice[layer][head] == "mean_corrected":
                added[layer, head] = corrections[layer, head]
    expected = corrected_stock(tiny[name](), name, ids, mask, constants, added)
    C, c = best_of_pair(tmp_path, tmp_path, L, H, D)
    patched = papa.patch_model(tiny[name](), C, static_heads=STATIC, output_corrections=c)
    with torch.no_grad():
        got = patched(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    # Llama's rotary tables are float32 even in a float64 model (tests/test_mean_corrected.py)
    tol = 1e-6 if name == "llama" else 1e-10
    assert_close(got[real], expected[real], rtol=tol, atol=tol)
    plain = corrected_stock(tiny[name](), name, ids, mask, averages, torch.zeros_like(added))
    assert (got[real] - plain[real]).abs().max() > 1e-4  # not PAPA's constant heads


def lm_blocks_batches(model, text, count, length=16):
    from transformers import AutoTokenizer

    from papa.data.lm import lm_blocks, load_lm_texts
    from papa.data.tasks import get_task

    texts = load_lm_texts(get_task("lm"), ("train",), train_file=text)
    ids = torch.tensor(lm_blocks(texts, AutoTokenizer.from_pretrained(model), length)["train"]["input_ids"])[:count]
    return [{"input_ids": ids, "attention_mask": torch.ones_like(ids)}]


@pytest.mark.slow
def test_the_ranking_script_chooses_on_the_ranking_data_and_the_sweep_runs_best_of(tmp_path):
    """The ranking run's best_of.csv equals the argmin of single-head models on the first --ranker_max_samples
    training blocks; the sweep's best_of control writes it in sort/ and a results row of its own."""
    from transformers import AutoModelForCausalLM

    model = save_tiny_lm("llama", tmp_path / "lm")
    train, valid = write_text(tmp_path / "train.txt", 24), write_text(tmp_path / "valid.txt", 8, seed=1)
    out = tmp_path / "sweep"
    run_command(script("run_papa_sweep.py") + [
        "--model_name_or_path", model, "--task_name", "lm", "--train_file", train, "--validation_file", valid,
        "--max_seq_length", "16", "--static_heads_nums", "0", "6", "12", "--ranker", "taylor",
        "--ranker_max_samples", "4", "--controls", "best_of", "mean_corrected", "--output_dir", out,
        "--bootstrap_samples", "200"])
    rows = read_rows(out / "sort" / "best_of.csv")
    for folder in ("bestof_k_6", "bestof_k_12", "corrected_k_12"):
        assert (out / folder / "eval_results.json").is_file(), folder
    results = read_rows(out / "results.csv")
    assert any("best_of" in column for column in results[0]), list(results[0])
    assert "best of" in (out / "results.md").read_text()

    # independently: each head alone, each candidate, patched the ordinary way, on the 4 ranking blocks
    ranking = lm_blocks_batches(model, train, 4)
    build = lambda: AutoModelForCausalLM.from_pretrained(model).double()  # noqa: E731
    base = hand_losses(build(), ranking[0], "lm")
    avgs = out / "avgs"
    delta = {name: {(la, h): float((hand_losses(single_head(build, name, avgs, la, h), ranking[0], "lm")
                                    - base).mean()) for la in range(L) for h in range(H)} for name in CANDIDATES}
    expected = hand_choice(delta)
    assert len(rows) == L * H
    for row in rows:
        key = (int(row["layer"]), int(row["head"]))
        for name in CANDIDATES:  # the script's model is float32
            assert float(row[f"delta_{name}"]) == pytest.approx(delta[name][key], rel=1e-3, abs=2e-6)
        assert expected[key][1] < 1e-5 or row["choice"] == expected[key][0], key
    # the held-out blocks would give other Δs: the choice is not made on them
    held_out = lm_blocks_batches(model, valid, 4)
    other = float((hand_losses(single_head(build, "constant", avgs, 0, 0), held_out[0], "lm")
                   - hand_losses(build(), held_out[0], "lm")).mean())
    assert abs(other - float(rows[0]["delta_constant"])) > 1e-6

    # the k = all run replaces every head with its choice: a model patched with best_of.csv's pair gives its loss
    import json

    C, c = best_of_pair(avgs, out / "sort", L, H)
    every = {layer: list(range(H)) for layer in range(L)}
    patched = papa.patch_model(AutoModelForCausalLM.from_pretrained(model), C, static_heads=every,
                               output_corrections=c)
    held = lm_blocks_batches(model, valid, 100)[0]
    loss = float(hand_losses(patched, held, "lm").mean())
    with open(out / "bestof_k_12" / "eval_results.json") as f:
        assert json.load(f)["eval_loss"] == pytest.approx(loss, rel=1e-4)


def test_the_sweeps_best_of_stages(tmp_path):
    from test_controls import flag, plan_and_stages

    plan, stages = plan_and_stages(tmp_path, "--controls", "best_of")
    out = plan.output_dir
    assert "--mean_corrections" in stages["avgs"].args  # mean_outputs.pt and output_corrections.pt
    assert {"mean_outputs.pt", "output_corrections.pt"} <= set(stages["avgs"].outputs)
    sort = stages["sort"]
    assert flag(sort, "--best_of") == "true" and "best_of.csv" in sort.outputs
    assert f"{out}/avgs/output_corrections.pt" in sort.inputs and f"{out}/avgs/mean_outputs.pt" in sort.inputs
    run = stages["bestof_k_36"]
    assert flag(run, "--replace_heads_with") == "best_of" and flag(run, "--sorting_heads_dir") == f"{out}/sort"
    assert f"{out}/sort/best_of.csv" in run.inputs and f"{out}/avgs/output_corrections.pt" in run.inputs
    _, plain = plan_and_stages(tmp_path)
    assert "--best_of" not in plain["sort"].args and "--mean_corrections" not in plain["avgs"].args


def test_bad_best_of_input_is_one_clear_error(tmp_path):
    from test_controls import heads_setup

    papa.save_ranking(np.zeros((6, 12)), tmp_path / "sort")
    torch.save(torch.rand(6, 12, 8, 8), tmp_path / "avgs.pt")  # MiniLM's shape at T = 8
    common = ["--static_heads_dir", str(tmp_path), "--sorting_heads_dir", str(tmp_path / "sort"),
              "--static_heads_num", "3", "--replace_heads_with", "best_of"]
    with pytest.raises(PapaError, match="no best_of.csv in .*--best_of true"):
        heads_setup(tmp_path, *common)
    choice = [[CANDIDATES[(la + h) % 3] for h in range(12)] for la in range(6)]
    lines = ["layer,head,choice"] + [f"{la},{h},{choice[la][h]}" for la in range(6) for h in range(12)]
    (tmp_path / "sort" / "best_of.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(PapaError, match="best_of needs mean_outputs.pt and output_corrections.pt in .*--mean_corr"):
        heads_setup(tmp_path, *common)
    torch.save(torch.ones(6, 12, 8, 32), tmp_path / "output_corrections.pt")
    with pytest.raises(PapaError, match="best_of needs mean_outputs.pt in .*--mean_corrections"):
        heads_setup(tmp_path, *common)
    torch.save(torch.ones(6, 12, 8, 16), tmp_path / "mean_outputs.pt")  # of another head size
    with pytest.raises(PapaError, match=r"mean head outputs in .* must have shape \[layers, heads, T, 32\]"):
        heads_setup(tmp_path, *common)
    torch.save(torch.full((6, 12, 8, 32), 2.0), tmp_path / "mean_outputs.pt")
    heads = heads_setup(tmp_path, *common)
    assert heads.static_heads == {0: [0, 1, 2]} and heads.mean_outputs is None
    C, c = heads.constant_matrices, heads.output_corrections
    avgs = torch.load(tmp_path / "avgs.pt")
    for la, h in [(0, 0), (0, 1), (0, 2), (5, 11)]:
        want_C, want_c = {"constant": (avgs[la, h], 0.0), "mean_output": (0.0, 2.0),
                          "mean_corrected": (avgs[la, h], 1.0)}[choice[la][h]]
        assert torch.equal(C[la, h], torch.as_tensor(want_C).expand(8, 8))
        assert torch.equal(c[la, h], torch.full((8, 32), want_c))
    # a file of another model, an unknown choice, a head twice
    bad = {"another model": lines[:10], "'median'": lines[:1] + ["0,0,median"] + lines[2:],
           "twice": lines + ["0,0,constant"], "not a best_of file": ["a,b\n1,2"]}
    for match, text in bad.items():
        (tmp_path / "sort" / "best_of.csv").write_text("\n".join(text) + "\n")
        with pytest.raises(PapaError, match=match):
            heads_setup(tmp_path, *common)
    with pytest.raises(PapaError, match="chooses among constant, mean_output, mean_corrected; no loss changes for "
                                        "mean_corrected"):
        best_of_choice({"constant": torch.zeros(1, 1), "mean_output": torch.zeros(1, 1)})


def test_the_scripts_stop_on_bad_best_of_input_before_any_work(expect_error, tmp_path, cola_dir):
    """One `error:` line, status 2, no traceback, no output folder (tests/test_errors.py's check)."""
    avgs = write_avgs(tmp_path / "avgs", torch.rand(6, 12, 16, 16))
    papa.save_ranking(np.zeros((6, 12)), tmp_path / "sort")
    probe = ["--static_heads_dir", avgs, "--sorting_heads_dir", tmp_path / "sort", "--static_heads_num", 3,
             "--replace_heads_with", "best_of"]
    expect_error("run_papa_glue.py", probing_args(cola_dir, *probe), r"no best_of.csv in .*--best_of true")
    expect_error("run_papa_glue.py", probing_args(cola_dir, "--best_of", "true"),
                 r"--best_of makes its choice in the ranking run: add --sort_calculating True")
    ranking = ["--task_name", "cola", "--data_dir", cola_dir, "--do_train", "--max_seq_length", "16",
               "--static_heads_dir", avgs, "--sort_calculating", "True", "--ranker", "taylor", "--best_of", "true"]
    expect_error("run_papa_glue.py", ranking,
                 r"best_of needs mean_outputs.pt and output_corrections.pt in .*--mean_corrections")


@pytest.mark.parametrize("head", ["sequence", "token"])
def test_a_probe_passes_its_encoders_attentions_on(head):
    """A freeze-extract probe answers output_attentions=True as an HF model does (pattern_variance, best_of and
    head_replacements read the attentions through it): the encoder's own, and none unless asked."""
    from tiny_encoders import padded_batch, tiny_model

    from papa.models.poolers import FreezeExtractForSequenceClassification, FreezeExtractForTokenClassification

    encoder = tiny_model("bert", head=head).eval()
    probe_class = FreezeExtractForSequenceClassification if head == "sequence" else FreezeExtractForTokenClassification
    probe = probe_class(encoder, T).eval()
    ids, mask = padded_batch("bert")
    with torch.no_grad():
        expected = probe.base_model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
        got = probe(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
        assert probe(input_ids=ids, attention_mask=mask).attentions is None
    assert len(got) == L
    for a, b in zip(got, expected):
        assert_close(a, b)


@pytest.mark.slow
def test_an_encoder_probes_sweep_runs_best_of_and_head_replacements(tmp_path):
    """The ranking run of a frozen encoder with its linear probe makes the best_of choice and the per-head table
    (it once failed: the probe returned no attentions), and the sweep runs best_of."""
    from cli_fixtures import write_cola
    from tiny_encoders import save_tiny_pretrained

    model = save_tiny_pretrained("bert", tmp_path / "bert")
    out = tmp_path / "sweep"
    run_command(script("run_papa_sweep.py") + [
        "--model_name_or_path", model, "--task_name", "cola", "--data_dir", write_cola(tmp_path / "cola"),
        "--max_seq_length", "16", "--static_heads_nums", "0", str(L * H), "--ranker", "taylor",
        "--ranker_max_samples", "4", "--controls", "best_of", "--head_replacements", "--output_dir", out,
        "--bootstrap_samples", "200"])
    rows = read_rows(out / "sort" / "best_of.csv")
    assert len(rows) == L * H and {row["choice"] for row in rows} <= set(CANDIDATES)
    table = read_rows(out / "sort" / "head_replacements.csv")
    assert len(table) == L * H
    assert all(float(row["pattern_variance"]) >= 0 for row in table)
    assert any(float(row["pattern_variance"]) > 0 for row in table)
    assert (out / f"bestof_k_{L * H}" / "eval_results.json").is_file()
