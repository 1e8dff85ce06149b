"""Head ranking files, freeze-extract probes, training modes, and save/reload."""

import json

import numpy as np
import pytest
import torch
from torch.testing import assert_close
from conftest import TINY, tiny_config
from transformers import BertForSequenceClassification

from papa.errors import PapaError
from papa.models.modeling import build_model, load_papa_model, save_papa_model, set_trainable, training_mode
from papa.models.poolers import FreezeExtractPooler, FreezeExtractTokenHead
from papa.method.ranking import first_k_heads, load_sorted_heads, save_ranking, sorted_heads_from_lambdas

L, H, HIDDEN, T = TINY["num_hidden_layers"], TINY["num_attention_heads"], TINY["hidden_size"], 10


def config(kind="bert", num_labels=3):
    return tiny_config(kind, num_labels=num_labels)


def inputs(seed=0, n=3):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 60, (n, T), generator=g)
    mask = torch.ones(n, T, dtype=torch.long)
    mask[1, 5:-1] = 0
    mask[2, 2:] = 0
    return ids, mask


# ------------------------------------------------------------------ ranking


def test_sorted_heads_ascending_lambda(tmp_path):
    lambdas = np.array([[0.3, -1.0, 2.0], [0.0, -5.0, 0.3]])
    save_ranking(lambdas, tmp_path)
    rows = json.loads((tmp_path / "sorted_heads.json").read_text())
    assert rows == [[1, 1], [0, 1], [1, 0], [0, 0], [1, 2], [0, 2]]  # ties keep layer-major order
    saved = np.load(tmp_path / "lambdas.npy")
    assert saved.shape == (2, 3) and saved.dtype == np.float32
    values = [lambdas[l, h] for l, h in rows]
    assert values == sorted(values)
    assert first_k_heads(rows, 3, 2, 3) == {1: [1, 0], 0: [1]}
    assert first_k_heads(rows, 0, 2, 3) == {}


def test_ranking_errors(tmp_path):
    with pytest.raises(PapaError, match="does not exist"):
        load_sorted_heads(str(tmp_path), 2, 3)
    (tmp_path / "sorted_heads.json").write_text("[[0, 1], [0")
    with pytest.raises(PapaError, match=r"cannot read .*sorted_heads.json .*rerun the ranking run"):
        load_sorted_heads(str(tmp_path), 2, 3)
    (tmp_path / "sorted_heads.json").write_text("[[0, 1], [0, 1]]")
    with pytest.raises(PapaError, match="twice"):
        load_sorted_heads(str(tmp_path), 2, 3)
    (tmp_path / "sorted_heads.json").write_text("[[0, 1], [5, 1]]")
    with pytest.raises(PapaError, match="lacks"):
        load_sorted_heads(str(tmp_path), 2, 3)
    for text in ('{"a": 1}', "[[0, true]]", "[[0, 1.0]]"):  # JSON true would pass isinstance(x, int) as head 1
        (tmp_path / "sorted_heads.json").write_text(text)
        with pytest.raises(PapaError, match="pairs"):
            load_sorted_heads(str(tmp_path), 2, 3)
    rows = sorted_heads_from_lambdas(np.zeros((2, 3)))
    with pytest.raises(PapaError, match="between 0 and 6"):
        first_k_heads(rows, 7, 2, 3)
    with pytest.raises(PapaError, match="between 0 and 6"):
        first_k_heads(rows, -1, 2, 3)
    with pytest.raises(PapaError, match="fewer"):
        first_k_heads(rows[:2], 3, 2, 3)


# ------------------------------------------------------------------ poolers


def test_pooler_against_loop():
    torch.manual_seed(0)
    cfg = config()
    pooler = FreezeExtractPooler(cfg, T)
    with torch.no_grad():
        pooler.weights_per_layer.uniform_()
    hidden = [torch.randn(3, T, HIDDEN) for _ in range(L + 1)]
    _, mask = inputs()
    expected_parts = []
    for s in range(L + 1):
        vec = torch.zeros(3, HIDDEN)
        for b in range(3):
            for i in range(T):
                vec[b] += pooler.weights_per_layer[s, i] * mask[b, i] * hidden[s][b, i]
        expected_parts.append(vec)
    expected = torch.tanh(pooler.dense_across_layers(torch.cat(expected_parts, 1)))
    assert_close(pooler(hidden, mask), expected)
    assert_close(FreezeExtractPooler(cfg, T).weights_per_layer, torch.full((L + 1, T), 1 / T))


def test_token_head_against_manual():
    torch.manual_seed(0)
    head = FreezeExtractTokenHead(config(), 5)
    hidden = [torch.randn(2, T, HIDDEN) for _ in range(L + 1)]
    manual = head.decoder(torch.tanh(head.dense_across_layers_1(torch.cat(hidden, -1))))
    assert_close(head(hidden), manual)
    assert head(hidden).shape == (2, T, 5)


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_sequence_probe_structure(kind):
    probe = build_model("AutoModelForSequenceClassification", config(kind), freeze_extract_seq_len=T)
    names = [n for n, _ in probe.named_parameters()]
    assert f"{kind}.encoder.layer.0.attention.self.query.weight" in names
    assert "pooler.weights_per_layer" in names and "classifier.weight" in names
    assert not any(n.startswith(f"{kind}.pooler") for n in names)  # BERT's CLS pooler is gone
    assert isinstance(probe.dropout, torch.nn.Dropout if kind == "bert" else torch.nn.Identity)
    ids, mask = inputs()
    out = probe(ids, attention_mask=mask, labels=torch.tensor([0, 1, 2]))
    assert out.logits.shape == (3, 3) and out.loss.ndim == 0


def test_probe_ignores_padded_positions():
    probe = build_model("AutoModelForSequenceClassification", config(), freeze_extract_seq_len=T).eval()
    ids, mask = inputs()
    other = ids.clone()
    other[mask == 0] = 5
    assert_close(probe(ids, attention_mask=mask).logits, probe(other, attention_mask=mask).logits)


# ------------------------------------------------------------------ training modes


def test_training_modes():
    assert training_mode() is None
    assert training_mode(sort_calculating=True) == "sort_calculating"
    with pytest.raises(PapaError, match="one training mode"):
        training_mode(sort_calculating=True, grad_for_classifier_only=True)
    constants = torch.rand(L, H, T, T)
    probe = build_model("AutoModelForSequenceClassification", config(), None, constants, mix_all_heads=True,
                        freeze_extract_seq_len=T)
    trainable = set_trainable(probe, "sort_calculating")
    assert all(n.startswith(("classifier", "pooler")) or "lambdas" in n for n in trainable)
    assert sum("lambdas" in n for n in trainable) == L
    probe = build_model("AutoModelForSequenceClassification", config(), None, constants, static_heads=[[0, 1]],
                        freeze_extract_seq_len=T)
    assert "bert.encoder.layer.0.attention.self.constant_matrices" in set_trainable(
        probe, "grad_for_classifier_and_static_only")
    only = set_trainable(probe, "grad_for_classifier_only")
    assert sorted(only) == sorted(n for n, _ in probe.named_parameters() if n.startswith(("classifier", "pooler")))
    frozen = [p for n, p in probe.named_parameters() if n not in only]
    assert frozen and not any(p.requires_grad for p in frozen)
    assert len(set_trainable(probe, None)) == len(list(probe.parameters()))


# ------------------------------------------------------------------ save / reload


@pytest.mark.parametrize(
    "model_class, kind, kwargs",
    [
        ("AutoModelForSequenceClassification", "bert", dict(static_heads=[[0, 1], [1, 0], [1, 1], [1, 2], [1, 3]])),
        ("AutoModelForSequenceClassification", "roberta", dict(mix_all_heads=True)),
        ("AutoModelForTokenClassification", "bert", dict(static_heads={0: [2]})),
        ("AutoModelForSequenceClassification", "bert", dict(static_heads=[[0, 0]], probe=False)),
    ],
)
def test_save_and_reload_identical_logits(tmp_path, model_class, kind, kwargs):
    probe = kwargs.pop("probe", True)
    torch.manual_seed(0)
    model = build_model(model_class, config(kind), None, torch.rand(L, H, T, T), freeze_extract_seq_len=T if probe else None,
                        **kwargs).eval()
    with torch.no_grad():  # move trained-looking parameters away from their initial values
        for name, p in model.named_parameters():
            if "lambdas" in name or "constant_matrices" in name or "weights_per_layer" in name:
                p.add_(torch.rand_like(p))
    save_papa_model(model, tmp_path)
    reloaded = load_papa_model(str(tmp_path))
    ids, mask = inputs()
    with torch.no_grad():
        assert_close(reloaded(ids, attention_mask=mask).logits, model(ids, attention_mask=mask).logits, rtol=0, atol=0)
    assert type(reloaded) is type(model)


def test_reload_errors(tmp_path):
    with pytest.raises(PapaError, match="model.safetensors"):
        load_papa_model(str(tmp_path))
    model = BertForSequenceClassification(config())
    model.save_pretrained(tmp_path)
    with pytest.raises(PapaError, match="not a PAPA"):
        load_papa_model(str(tmp_path))


def test_a_failed_save_leaves_the_previous_model(tmp_path):
    """save_papa_model writes config, weights and tokenizer into a temp folder and moves them in only
    when all are written: a tokenizer that fails half-way leaves the folder's previous model whole."""
    torch.manual_seed(0)
    first = build_model("AutoModelForSequenceClassification", config(), None, torch.rand(L, H, T, T),
                        static_heads=[[0, 0]]).eval()
    save_papa_model(first, tmp_path)
    (tmp_path / "eval_results.json").write_text("{}")  # a run's other files stay
    before = {name: (tmp_path / name).read_bytes() for name in ("config.json", "model.safetensors")}

    class FailingTokenizer:
        def save_pretrained(self, folder):
            with open(f"{folder}/tokenizer.json", "w") as f:
                f.write("{half")
            raise OSError("disk full")

    second = build_model("AutoModelForSequenceClassification", config(), None, torch.rand(L, H, T, T),
                         static_heads=[[1, 1], [0, 2]]).eval()
    with pytest.raises(OSError, match="disk full"):
        save_papa_model(second, tmp_path, FailingTokenizer())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "eval_results.json", "model.safetensors"]
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    assert load_papa_model(str(tmp_path)).config.papa["static_heads"] == [[0, 0]]
