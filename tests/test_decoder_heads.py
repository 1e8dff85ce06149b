"""benchmarks/decoder_heads.py (the attention check of the small decoder) against hand-built attention and a
by-hand loss; benchmarks/train_decoder.py end to end on a tiny copy of the shared data's layout."""

import json
import math
import sys

import pytest
import torch
from conftest import REPO, load_module

sys.path.insert(0, str(REPO / "benchmarks"))  # train_decoder imports its sibling decoder_heads


heads = load_module(REPO / "benchmarks" / "decoder_heads.py")


def uniform_causal(B, H, T):
    return torch.tril(torch.ones(T, T)).div(torch.arange(1, T + 1)[:, None]).expand(B, H, T, T)


def test_repeated_random_tokens_repeat_and_avoid_eos():
    ids = heads.repeated_random_tokens(vocab_size=10, eos_id=3, n=40, batch=5, seed=1)
    assert ids.shape == (5, 81) and torch.all(ids[:, 0] == 3)
    assert torch.equal(ids[:, 1:41], ids[:, 41:]) and not torch.any(ids[:, 1:] == 3)
    assert set(ids[:, 1:].flatten().tolist()) == set(range(10)) - {3}


def test_scores_of_hand_built_heads():
    B, n = 2, 5
    T = 1 + 2 * n
    previous = torch.zeros(T, T)
    previous[0, 0] = 1.0
    previous[torch.arange(1, T), torch.arange(T - 1)] = 1.0  # every query on the token before it
    induction = torch.zeros(T, T)
    induction[torch.arange(T), 0] = 1.0  # first copy: on eos
    for j in range(n):  # second copy: r_j at 1 + n + j looks at 2 + j, the token after r_j's first occurrence
        induction[1 + n + j] = 0.0
        induction[1 + n + j, 2 + j] = 1.0
    layer = torch.stack([previous, induction]).expand(B, 2, T, T)  # (B, H, T, T): head 0 previous, head 1 induction
    uniform = uniform_causal(B, 2, T)
    prev_scores = heads.previous_token_scores([layer, uniform])
    ind_scores = heads.induction_scores([layer, uniform], n)
    # the induction head is on the token before only at query 1 (on eos at 0); 2 + j = n + j never holds for n = 5
    assert prev_scores[0].tolist() == pytest.approx([1.0, 1 / (T - 1)])
    assert ind_scores[0].tolist() == pytest.approx([0.0, 1.0])
    # uniform causal attention: 1/(i + 1) on any one earlier key, the chance the report prints
    assert prev_scores[1].tolist() == pytest.approx([sum(1 / (i + 1) for i in range(1, T)) / (T - 1)] * 2)
    assert ind_scores[1].tolist() == pytest.approx([heads.causal_chance(range(1 + n, 1 + 2 * n))] * 2)
    assert heads.causal_chance([0, 1, 3]) == pytest.approx((1 + 1 / 2 + 1 / 4) / 3)


def test_copy_losses_by_hand():
    torch.manual_seed(0)
    n, V = 3, 7
    ids = heads.repeated_random_tokens(V, 0, n, 2, seed=4)  # (2, 7)
    logits = torch.randn(2, 1 + 2 * n, V)

    def loss(b, t):  # −log softmax(logits[b, t − 1])[ids[b, t]]: the loss of predicting position t
        row = logits[b, t - 1]
        return -(row[ids[b, t]] - math.log(sum(math.exp(x) for x in row.tolist())))

    first = sum(loss(b, t) for b in range(2) for t in range(1, n + 1)) / (2 * n)
    second = sum(loss(b, t) for b in range(2) for t in range(n + 2, 2 * n + 1)) / (2 * (n - 1))
    assert heads.copy_losses(logits, ids, n) == pytest.approx((first, second), rel=1e-5)


def write_tiny_shared_data(root):
    """The shared data's layout (GLUE CoLA, SST-2, MRPC, WNLI; CoNLL-2003) with a few sentences each."""
    words = "the cat sat on a mat while my dog ran in the park and we all went home".split()
    sentences = [" ".join(words[i:] + words[:i]) for i in range(len(words))]
    for split in ("train", "dev"):
        for folder, header, row in (
                ("CoLA", None, lambda s: f"src\t1\t\t{s}"), ("SST-2", "sentence\tlabel", lambda s: f"{s}\t1"),
                ("MRPC", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", lambda s: f"1\t1\t2\t{s}\t{s[::-1]}"),
                ("WNLI", "index\tsentence1\tsentence2\tlabel", lambda s: f"0\t{s}\t{s}.\t1")):
            (root / "glue" / folder).mkdir(parents=True, exist_ok=True)
            lines = ([header] if header else []) + [row(s) for s in sentences]
            (root / "glue" / folder / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    (root / "conll2003").mkdir()
    conll = "-DOCSTART- -X- -X- O\n\n" + "\n\n".join("\n".join(f"{w} NN O O" for w in s.split()) for s in sentences)
    for name in ("train.txt", "valid.txt"):
        (root / "conll2003" / name).write_text(conll + "\n")


@pytest.mark.slow
def test_train_decoder_end_to_end(tmp_path):
    from transformers import AutoTokenizer, LlamaForCausalLM

    train = load_module(REPO / "benchmarks" / "train_decoder.py")
    write_tiny_shared_data(tmp_path / "data")
    out = tmp_path / "model"
    train.main(["--data_dir", str(tmp_path / "data"), "--output_dir", str(out), "--vocab_size", "300", "--seq_len", "80",
                "--num_layers", "2", "--hidden_size", "32", "--num_heads", "4", "--num_kv_heads", "2",
                "--intermediate_size", "32", "--batch_size", "2", "--max_steps", "3", "--eval_every", "2",
                "--repeat_span_fraction", "1"])
    model = LlamaForCausalLM.from_pretrained(out)
    assert (model.config.num_attention_heads, model.config.num_key_value_heads) == (4, 2)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.eos_token == "<|endoftext|>" and tokenizer.pad_token is None  # pad = eos is the consumer's
    assert model.config.eos_token_id == tokenizer.eos_token_id == 0
    # byte-level BPE: pre-split words get their space marker only with add_prefix_space=True
    spaced = AutoTokenizer.from_pretrained(out, add_prefix_space=True)
    words = ["the", "cat"]
    assert (tokenizer(words, is_split_into_words=True).input_ids
            != spaced(words, is_split_into_words=True).input_ids == tokenizer(" the cat").input_ids)
    log = json.loads((out / "training_log.json").read_text())
    assert [e["step"] for e in log["log"]] == [1, 2, 3] and log["steps_done"] == 3 and not log["stopped_early"]
    report = (out / "heads_check.md").read_text()
    assert "| random tokens |" in report and "| held-out text (first 50 tokens of each chunk) |" in report
    assert report.count("\n| 1 | ") == 4  # layer 1's four heads


def test_planted_spans_copy_real_text():
    train = load_module(REPO / "benchmarks" / "train_decoder.py")
    batch = torch.arange(400).view(4, 100)
    planted = train.plant_repeated_spans(batch, 1.0, torch.Generator().manual_seed(0))
    for row, original in zip(planted, batch):
        changed = (row != original).nonzero().flatten()
        m = len(changed)
        assert 8 <= m <= 32 and torch.equal(changed, torch.arange(changed[0], changed[0] + m))  # one contiguous span
        b = int(changed[0])
        source = int(row[b]) - int(original[0])  # values are positions here: the span's source start
        assert source + m <= b and torch.equal(row[b:b + m], original[source:source + m])  # copied from earlier
    assert torch.equal(train.plant_repeated_spans(batch, 0.0, torch.Generator()), batch)
