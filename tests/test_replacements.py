"""Per-head replacements (papa.method.replacements): each head's loss change under each replacement, computed with
one mix-mode model and the loo ranker, against a model patched the ordinary way with that head alone replaced (the
paths tests/test_ablations.py and tests/test_mean_corrected.py check against the stock model) and a loss written
out here; the pattern variance against the stock model's attentions; the CSV and its figure.
"""

import csv

import pytest
import torch
import torch.nn.functional as F
from tiny_decoders import right_padded_batch, tiny_decoder
from tiny_encoders import H, L, T, padded_batch, tiny_model
from torch.testing import assert_close

import papa
from papa.errors import PapaError
from papa.method.ablations import first_token_matrices, zero_outputs
from papa.method.averaging import accumulate_attention
from papa.method.replacements import (REPLACEMENTS, head_replacement_deltas, head_replacements_rows,
                                      replacement_pairs, rows_csv)
from test_mean_corrected import hand_norm

D = 8
HEADS = [(0, 1), (1, 0), (2, 3)]


def setup(name):
    if name == "bert":
        build = lambda: tiny_model("bert", "eager", head="sequence").double()  # noqa: E731
        ids, mask = padded_batch("bert", lengths=(T, 7, 3, 10))
        batch = {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([0, 2, 1, 1])}
        return build, [batch], "sequence"
    build = lambda: tiny_decoder("llama", "eager").double()  # noqa: E731
    ids, mask = right_padded_batch(lengths=(T,) * 4)
    return build, [{"input_ids": ids, "attention_mask": mask}], "lm"


def hand_losses(model, batch, kind):
    """(B,) per-example losses, written out: cross-entropy of the label, or a block's mean next-token NLL."""
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    if kind == "sequence":
        return F.cross_entropy(logits, batch["labels"], reduction="none")
    log_probs = logits[:, :-1].log_softmax(-1)
    return -log_probs.gather(-1, batch["input_ids"][:, 1:, None])[..., 0].mean(-1)


def single_head(build, name, avgs_dir, layer, head):
    """A model with head (layer, head) alone replaced by `name`, patched the ordinary way."""
    static = {layer: [head]}
    avgs = torch.load(avgs_dir / "avgs.pt")
    avgs = avgs if isinstance(avgs, torch.Tensor) else papa.load_constant_matrices(avgs_dir).full()
    kwargs = {"constant": dict(constant_matrices=avgs),
              "mean_corrected": dict(constant_matrices=avgs, output_corrections=avgs_dir / "output_corrections.pt"),
              "mean_output": dict(mean_outputs=avgs_dir / "mean_outputs.pt"),
              "zero_output": dict(mean_outputs=zero_outputs(L, H, T, D)),
              "first_token": dict(constant_matrices=first_token_matrices(L, H, T))}[name]
    return papa.patch_model(build(), static_heads=static, **kwargs)


@pytest.mark.parametrize("name", ["bert", "llama"])
def test_each_replacements_head_deltas_equal_single_head_runs(name, tmp_path):
    build, batches, kind = setup(name)
    stock = accumulate_attention(build(), batches, T, value_means=True)
    stock.save(tmp_path)
    pairs = replacement_pairs(tmp_path)
    assert list(pairs) == list(REPLACEMENTS)
    mix = papa.patch_model(build(), pairs["constant"][0], mix_all_heads=True)
    deltas, variance = head_replacement_deltas(mix, batches, kind, pairs, max_rows=8)
    base = hand_losses(build(), batches[0], kind)
    for replacement in REPLACEMENTS:
        assert deltas[replacement].shape == (L, H)
        for layer, head in HEADS:
            expected = (hand_losses(single_head(build, replacement, tmp_path, layer, head), batches[0], kind)
                        - base).mean()
            assert_close(float(deltas[replacement][layer, head]), float(expected), rtol=1e-6, atol=1e-9)
    assert not torch.allclose(deltas["mean_corrected"], deltas["constant"])  # the corrections reach the loo forwards
    # the pattern variance: the stock attentions against norm(Ā·P), per real query row
    mask = batches[0]["attention_mask"].double()
    with torch.no_grad():
        attentions = build()(input_ids=batches[0]["input_ids"], attention_mask=batches[0]["attention_mask"],
                             output_attentions=True).attentions
    avgs = pairs["constant"][0].double()
    for layer in range(L):
        diff = (attentions[layer] - hand_norm(avgs[layer], mask)) * (mask[:, None, :, None] * mask[:, None, None, :])
        assert_close(variance[layer], diff.pow(2).sum((0, 2, 3)) / mask.sum(), rtol=1e-5, atol=1e-9)


def test_the_rows_name_each_heads_profile_and_best_replacement(tmp_path):
    averages = torch.zeros(1, 2, 4, 4)
    averages[0, 0, :, 0] = 1  # a sink
    averages[0, 1] = torch.eye(4)  # self
    deltas = {"constant": torch.tensor([[0.1, 0.5]], dtype=torch.float64),
              "mean_output": torch.tensor([[0.3, 0.2]], dtype=torch.float64)}
    rows = head_replacements_rows(deltas, torch.tensor([[0.01, 0.02]], dtype=torch.float64), averages)
    assert [(r["profile"], r["best"]) for r in rows] == [("first token", "constant"), ("self", "mean_output")]
    text = rows_csv(rows)
    read = list(csv.DictReader(text.splitlines()))
    assert float(read[1]["delta_mean_output"]) == pytest.approx(0.2) and read[0]["pattern_variance"] == "0.01"
    with pytest.raises(PapaError, match="unknown replacement 'median'"):
        replacement_pairs(tmp_path, ("median",))


def test_an_lm_ranking_run_writes_head_replacements_that_a_model_of_its_own_reproduces(tmp_path):
    """The script's CSV (held-out blocks, after the taylor ranking) equals head_replacement_deltas run here on a
    freshly patched model and the same blocks; the figure is written; the sweep asks the first ranker for it."""
    from lm_fixtures import save_tiny_lm, write_text
    from test_controls import plan_and_stages
    from test_ranker_scripts import RANKING

    from papa.cli.glue import main as glue
    from papa.cli.glue_avgs import main as glue_avgs
    from papa.data.lm import lm_blocks

    model = save_tiny_lm("llama", tmp_path / "lm")
    train, valid = write_text(tmp_path / "train.txt", 12), write_text(tmp_path / "valid.txt", 6, seed=1)
    glue_avgs(["--model_name_or_path", str(model), "--task_name", "lm", "--train_file", str(train), "--max_length",
               "16", "--output_dir", str(tmp_path / "avgs"), "--mean_corrections"])
    out = tmp_path / "sort"
    glue(["--model_name_or_path", str(model), "--task_name", "lm", "--train_file", str(train), "--validation_file",
          str(valid), "--max_seq_length", "16", "--static_heads_dir", str(tmp_path / "avgs"), "--output_dir", str(out),
          "--ranker", "taylor", "--head_replacements", "true", *map(str, RANKING)])
    with open(out / "head_replacements.csv") as f:
        rows = list(csv.DictReader(f))
    assert (out / "head_replacements.png").stat().st_size > 0 and (out / "sorted_heads.json").is_file()

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from papa.data.lm import load_lm_texts
    from papa.data.tasks import get_task

    texts = load_lm_texts(get_task("lm"), ("validation",), validation_file=valid)
    blocks = lm_blocks(texts, AutoTokenizer.from_pretrained(model), 16)["validation"]
    ids = torch.tensor(blocks["input_ids"])
    batches = [{"input_ids": ids[i:i + 4], "attention_mask": torch.ones_like(ids[i:i + 4]),
                "labels": ids[i:i + 4]} for i in range(0, len(ids), 4)]
    pairs = replacement_pairs(tmp_path / "avgs")
    mix = papa.patch_model(AutoModelForCausalLM.from_pretrained(model), pairs["constant"][0], mix_all_heads=True)
    deltas, variance = head_replacement_deltas(mix, batches, "lm", pairs)
    assert len(rows) == deltas["constant"].numel()
    for row in rows:
        layer, head = int(row["layer"]), int(row["head"])
        for name in REPLACEMENTS:
            assert float(row[f"delta_{name}"]) == pytest.approx(float(deltas[name][layer, head]), rel=1e-4, abs=1e-6)
        assert float(row["pattern_variance"]) == pytest.approx(float(variance[layer, head]), rel=1e-4, abs=1e-9)

    plan, stages = plan_and_stages(tmp_path / "sweep", "--head_replacements")
    assert "--head_replacements" in stages["sort"].args and "--mean_corrections" in stages["avgs"].args
    assert "head_replacements.csv" in stages["sort"].outputs
    assert f"{plan.output_dir}/avgs/output_corrections.pt" in stages["sort"].inputs


def test_writing_head_replacements_leaves_the_ranking_runs_model_as_it_was(tmp_path):
    """The ranking run evaluates after writing them: the stock model after a loss ranker (every gate 0), σ(λ)'s
    mixing after λ; both must survive the replacements swapped in and out."""
    from types import SimpleNamespace

    from papa.method.gates import set_gates
    from papa.runs.ranking import write_head_replacements

    build, batches, kind = setup("llama")
    accumulate_attention(build(), batches, T, value_means=True).save(tmp_path / "avgs")
    for gates in ({}, None):
        mix = papa.patch_model(build(), replacement_pairs(tmp_path / "avgs", ("constant",))["constant"][0],
                               mix_all_heads=True)
        set_gates(mix, gates)
        with torch.no_grad():
            before = mix(input_ids=batches[0]["input_ids"]).logits
        trainer = SimpleNamespace(model=mix, _prepare_inputs=lambda b: b, get_eval_dataloader=lambda d: batches,
                                  is_world_process_zero=lambda: True)
        args = SimpleNamespace(sort_calculating=True, static_heads_dir=tmp_path / "avgs", ranker_loss="task")
        write_head_replacements(trainer, SimpleNamespace(kind=kind), args, SimpleNamespace(output_dir=tmp_path),
                                batches[0]["input_ids"])
        with torch.no_grad():
            assert_close(mix(input_ids=batches[0]["input_ids"]).logits, before)
    assert (tmp_path / "head_replacements.csv").is_file()
