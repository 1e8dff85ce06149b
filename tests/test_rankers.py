"""The rankers (papa.method.rankers) against independent computations: gates against PAPA's patched models,
taylor against finite differences of single-head mixes, loo against single-head patched models (with and without
the prefix cache), iterative against its definition by brute force, the gate training against its definition."""

import copy
import itertools
import math

import pytest
import torch
from tiny_decoders import DECODER_NAMES, tiny_family_model, family_batch
from tiny_encoders import L, H, random_constants

from papa.method.attention import patch_model
from papa.method.example_losses import distill_losses, task_losses
from papa.method.gates import gated, transformer_blocks
from papa.method.rankers import rank
from papa.method.scorers import Objective, iterative_ranking, loo_scores, make_units, taylor_scores, train_gates

FAMILIES = ["bert", "deberta-v2", "llama", "gpt2", "gemma3_text"]
# transformers' Llama-like RMS norms compute in float32 even in a float64 model: agreement to float32's rounding
TOLERANCE = {name: 1e-6 if name in ("llama", "gemma3_text") else 1e-10 for name in FAMILIES}


def _setup(name, head="sequence", seed=0):
    """(stock model, mix-mode model, constants, batches) in float64, eval mode, labels included."""
    stock = tiny_family_model(name, head=head, seed=seed).double()
    mixed = patch_model(copy.deepcopy(stock), random_constants(), mix_all_heads=True)
    kind = "lm" if head == "causal" else head
    batches = []
    for s in (2, 3):
        ids, mask = family_batch(name, seed=s)
        labels = (torch.arange(len(ids)) % 3) if kind == "sequence" else ids.masked_fill(mask == 0, -100)
        if kind == "token":
            labels = (ids % 3).masked_fill(mask == 0, -100)
        batches.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return stock, mixed, kind, batches


def _mean_loss(model, kind, batches):
    """The mean per-example loss of a (patched or stock) model, computed from scratch."""
    total, count = 0.0, 0
    with torch.no_grad():
        for b in batches:
            logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
            total += float(task_losses(kind, logits, b["labels"]).sum())
            count += len(b["input_ids"])
    return total / count


def _patched(stock, heads):
    return patch_model(copy.deepcopy(stock), random_constants(), static_heads=[list(h) for h in heads])


def test_task_losses_match_the_models_own_loss():
    stock, _, kind, batches = _setup("bert")
    b = batches[0]
    for i in range(len(b["input_ids"])):
        one = {k: v[i:i + 1] for k, v in b.items()}
        out = stock(**one)
        assert task_losses(kind, out.logits, one["labels"]).item() == pytest.approx(out.loss.item(), rel=1e-12)
    lm, _, _, lm_batches = _setup("llama", head="causal")
    b = lm_batches[0]
    ids = b["input_ids"][:1]
    out = lm(input_ids=ids, labels=ids)
    # HF computes the lm loss in float32 (ForCausalLMLoss upcasts the logits)
    assert task_losses("lm", out.logits, ids).item() == pytest.approx(out.loss.item(), rel=1e-6)


def test_distill_loss_is_kl_and_zero_at_stock():
    logits = torch.randn(2, 5, 7, dtype=torch.float64)
    stock = torch.randn(2, 5, 7, dtype=torch.float64)
    p = stock.softmax(-1)
    expected = (p * (p.log() - logits.log_softmax(-1))).sum(-1).mean(-1)
    torch.testing.assert_close(distill_losses("lm", logits, stock), expected)
    assert distill_losses("lm", stock, stock).abs().max() < 1e-12


@pytest.mark.parametrize("name", FAMILIES)
def test_gates_match_stock_and_patched_models(name):
    stock, mixed, kind, batches = _setup(name)
    b = batches[0]
    inputs = {"input_ids": b["input_ids"], "attention_mask": b["attention_mask"]}
    real = b["attention_mask"].bool()
    tol = TOLERANCE[name]
    with torch.no_grad(), gated(mixed, {}):  # PAPA's k = 0 (stock Gemma3's padded rows are NaN in this tiny model)
        torch.testing.assert_close(mixed(**inputs).logits, _patched(stock, [])(**inputs).logits, rtol=tol, atol=tol)
    # head (1, 2) constant: a gate of 1, as one row per example and as one row for the batch
    gate = torch.zeros(H, dtype=torch.float64)
    gate[2] = 1
    expected = _patched(stock, [(1, 2)])(**inputs).logits
    for g in (gate, gate.expand(len(b["input_ids"]), -1)):
        with torch.no_grad(), gated(mixed, {1: g}):
            got = mixed(**inputs).logits
        if kind == "token":
            got, expected = got[real], expected[real]
        torch.testing.assert_close(got, expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", ["bert", "gpt2"])  # float64 throughout: finite differences need it
def test_taylor_matches_finite_differences_of_single_head_mixes(name):
    _, mixed, kind, batches = _setup(name)
    objective = Objective(mixed, batches, kind)
    units = make_units(L, H)
    absolute, signed = taylor_scores(objective, units)
    eps = 1e-5
    for u in (0, 5, len(units) - 1):
        (layer, head), = units[u]
        per_example = []
        for b in batches:
            rows = []
            for sign in (1, -1):
                gate = torch.zeros(H, dtype=torch.float64)
                gate[head] = sign * eps
                with torch.no_grad(), gated(mixed, {layer: gate}):
                    logits = mixed(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
                rows.append(task_losses(kind, logits, b["labels"]))
            per_example.append((rows[0] - rows[1]) / (2 * eps))
        derivative = torch.cat(per_example)
        assert float(absolute[u]) == pytest.approx(float(derivative.abs().mean()), rel=1e-5, abs=1e-9)
        assert float(signed[u]) == pytest.approx(float(derivative.mean()), rel=1e-5, abs=1e-9)


@pytest.mark.parametrize("name", ["bert", "llama", "gpt2"])
@pytest.mark.parametrize("reuse", [True, False])
def test_loo_matches_single_head_patched_models(name, reuse):
    stock, mixed, kind, batches = _setup(name)
    objective = Objective(mixed, batches, kind)
    units = make_units(L, H)
    deltas = loo_scores(objective, units, reuse_prefix=reuse, max_rows=5)  # 5 rows: copies split across forwards
    base = _mean_loss(stock, kind, batches)
    for u in (0, 6, len(units) - 1):
        expected = _mean_loss(_patched(stock, units[u]), kind, batches) - base
        assert float(deltas[u]) == pytest.approx(expected, rel=1e-8, abs=1e-10 if name != "llama" else 1e-8)


def test_loo_bounds_the_outputs_of_one_forward():
    """A loo forward carries at most 64 sequences and at most 1 GiB of float32 logits, and always one copy."""
    from papa.method.scorers import copies_per_forward

    assert copies_per_forward(16, 128, 3) == 4  # a probe's few outputs: 64 rows
    assert copies_per_forward(8, 128, 49_152) == 5  # SmolLM2: 42 rows of 25 MB
    assert copies_per_forward(16, 128, 262_144) == 1  # Gemma-3: 8 rows fit, the batch of 16 still runs
    assert copies_per_forward(2, 128, 262_144) == 4


def test_loo_of_kv_groups_makes_the_whole_group_constant():
    stock, mixed, kind, batches = _setup("llama")
    units = make_units(L, H, kv_groups=2)
    assert units[:2] == [[(0, 0), (0, 1)], [(0, 2), (0, 3)]]
    deltas = loo_scores(Objective(mixed, batches, kind), units)
    expected = _mean_loss(_patched(stock, units[3]), kind, batches) - _mean_loss(stock, kind, batches)
    assert float(deltas[3]) == pytest.approx(expected, rel=1e-8, abs=1e-8)  # float32 RMS norms (TOLERANCE)


def test_prefix_cache_finds_every_block():
    for name in FAMILIES:
        model = tiny_family_model(name)
        assert len(transformer_blocks(model)) == L


def test_iterative_loo_is_greedy_by_definition():
    stock, mixed, kind, batches = _setup("bert")
    units = make_units(2, H)  # 8 heads: one per round, so the ranking is the exact greedy order
    mixed2 = patch_model(copy.deepcopy(stock), random_constants(), mix_all_heads=True)
    got = iterative_ranking(Objective(mixed2, batches, kind), units, exact=True)
    chosen, remaining = [], [u for unit in units for u in unit]
    while remaining:
        losses = {h: _mean_loss(_patched(stock, chosen + [h]), kind, batches) for h in remaining}
        best = min(remaining, key=lambda h: (losses[h], remaining.index(h)))
        chosen.append(best)
        remaining.remove(best)
    assert [u[0] for u in got.units] == chosen
    assert got.extra["round"] == list(range(8))


def test_iterative_takes_a_tenth_per_round():
    _, mixed, kind, batches = _setup("bert")
    units = make_units(L, H)  # 12 units: ceil(12 / 10) = 2 per round
    got = iterative_ranking(Objective(mixed, batches[:1], kind), units, exact=False)
    assert got.extra["round"] == [r for r in range(6) for _ in range(2)]
    assert sorted(map(tuple, got.sorted_heads())) == [(l, h) for l in range(L) for h in range(H)]


def test_gate_training_follows_its_definition():
    _, mixed, kind, batches = _setup("bert")
    units = make_units(L, H)
    objective = Objective(mixed, batches, kind)
    alpha = train_gates(objective, units, steps=3, learning_rate=0.05, l1=0.1)
    # the same three AdamW steps, written out with an explicit per-head gate tensor
    a = torch.ones(L * H, requires_grad=True)
    opt = torch.optim.AdamW([a], lr=0.05, weight_decay=0.0)
    for step in range(3):
        b = batches[step % 2]
        gates = {l: (1 - a.clamp(0, 1)[l * H:(l + 1) * H]).double() for l in range(L)}
        with gated(mixed, gates):
            logits = mixed(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
        loss = task_losses(kind, logits, b["labels"]).mean() + 0.1 * a.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.testing.assert_close(alpha, a.detach())
    assert (alpha < 1).all()  # the L1 pull moved every gate


def test_rank_orders_by_ascending_score():
    _, mixed, kind, batches = _setup("llama")
    scored = rank("loo", Objective(mixed, batches, kind), make_units(L, H))
    assert scored.scores == sorted(scored.scores)
    assert len(scored.sorted_heads()) == L * H


def test_a_rankers_traits_are_checked_before_a_stage_starts():
    """The registry says what data a ranker needs and how it splits into parts: the retrieval score is refused on a
    task without needles (before any stage), and loo's parts scorer is what --ranker_parts runs."""
    from papa.errors import PapaError
    from papa.method.rankers import RANKERS, check_ranker_data

    with pytest.raises(PapaError, match="--ranker retrieval reads where a retrieval task's answer is copied from"):
        check_ranker_data(["taylor", "retrieval"], "lm_qnli", None)
    check_ranker_data(["retrieval"], "passkey", "passkey")
    assert [n for n, r in RANKERS.items() if r.needs_retrieval] == ["retrieval"]
    assert [n for n, r in RANKERS.items() if r.parts] == ["loo"]
