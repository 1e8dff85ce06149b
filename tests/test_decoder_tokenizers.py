"""Decoders' tokenizers and PAPA layout: hand-laid rows, right padding, pad = eos in the config, last-token pooling.

The tokenizers are the tiny ones of tests/tiny_decoders.py: GPT-2's byte-level BPE and a Llama-style
SentencePiece BPE that pads on the left; neither has a pad token, as the real ones have none.
"""

import shutil
from pathlib import Path

import pytest
import torch
import transformers
from tiny_decoders import make_decoder_tokenizer, save_tiny_decoder

from papa.errors import PapaError
from papa.data.preprocessing import (decoder_sequence_layout, tokenize_dataset, tokenize_sequence_examples,
                                tokenize_token_examples)
from papa.models.pretrained import fit_tokenizer, load_config_and_tokenizer
from papa.data.tasks import get_task
from papa.data.tokenized_cache import CACHE_ENV, tokenize_cached, tokenizer_digest

P, X = 0, -100  # the pad id of the hand-laid rows; the ignored label
NER_LABELS = ["B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC", "I-MISC", "I-ORG", "I-PER", "O"]


@pytest.fixture(scope="module")
def decoder_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("decoders")
    return {name: save_tiny_decoder(name, root / name) for name in ("gpt2", "llama")}


def fitted(name):
    """The family's tiny tokenizer after the scripts' set-up (right padding, pad = eos)."""
    tokenizer = make_decoder_tokenizer(name)
    fit_tokenizer(tokenizer, transformers.LlamaConfig(), True, name)
    return tokenizer


# ----------------------------------------------------------------------------- the layout itself


def test_decoder_layout_single_text_by_hand():
    assert decoder_sequence_layout([5, 6, 7], None, P, 6) == {"input_ids": [5, 6, 7, P, P, P],
                                                              "attention_mask": [1, 1, 1, 0, 0, 0]}
    # a single text keeps up to T tokens (nothing is reserved for a separator)
    assert decoder_sequence_layout(list(range(5, 13)), None, P, 6) == {"input_ids": [5, 6, 7, 8, 9, 10],
                                                                       "attention_mask": [1] * 6}


def test_decoder_layout_pair_by_hand():
    # T = 8: the second text starts at T//2 = 4 whatever the first one's length
    assert decoder_sequence_layout([5, 6, 7], [8, 9], P, 8) == {"input_ids": [5, 6, 7, P, 8, 9, P, P],
                                                                "attention_mask": [1, 1, 1, 0, 1, 1, 0, 0]}
    assert decoder_sequence_layout([5], [8, 9, 10], P, 8) == {"input_ids": [5, P, P, P, 8, 9, 10, P],
                                                              "attention_mask": [1, 0, 0, 0, 1, 1, 1, 0]}
    # too long: the first text cut to T//2, the second to T - T//2
    assert decoder_sequence_layout([5, 6, 7, 8, 9], [10, 11, 12, 13, 14], P, 8) == {
        "input_ids": [5, 6, 7, 8, 10, 11, 12, 13], "attention_mask": [1] * 8}
    # odd T = 7: the first gets 3 positions, the second 4
    assert decoder_sequence_layout([5, 6, 7, 8], [9, 10, 11, 12, 13], P, 7) == {
        "input_ids": [5, 6, 7, 9, 10, 11, 12], "attention_mask": [1] * 7}
    # an empty first text still leaves the second at T//2
    assert decoder_sequence_layout([], [9], P, 4) == {"input_ids": [P, P, 9, P], "attention_mask": [0, 0, 1, 0]}


def test_decoder_layout_bad_lengths():
    with pytest.raises(PapaError, match="at least 1"):
        decoder_sequence_layout([5], None, P, 0)
    with pytest.raises(PapaError, match="pair of texts needs max_length of at least 2"):
        decoder_sequence_layout([5], [6], P, 1)


# ----------------------------------------------------------------------------- tokenising into it


def test_llama_pair_rows_by_hand():
    tok = fitted("llama")
    ids = tok.convert_tokens_to_ids
    pad, bos = tok.pad_token_id, tok.bos_token_id
    assert pad == tok.eos_token_id and tok.padding_side == "right"
    examples = {"a": ["the cat", "the cat sat on the mat"], "b": ["a dog", "a dog"], "label": [1, 0]}
    out = tokenize_sequence_examples(tok, examples, "a", "b", 8, papa_layout=True, pad_to_max_length=True,
                                     causal=True)
    # each text with the tokenizer's own <s>, the second from position 4; the first cut to 4 tokens
    assert out["input_ids"] == [[bos, *ids(["▁the", "▁cat"]), pad, bos, *ids(["▁a", "▁dog"]), pad],
                                [bos, *ids(["▁the", "▁cat", "▁s"]), bos, *ids(["▁a", "▁dog"]), pad]]
    assert out["attention_mask"] == [[1, 1, 1, 0, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1, 0]]
    assert out["labels"] == [1, 0] and "token_type_ids" not in out


def test_gpt2_single_rows_by_hand():
    tok = fitted("gpt2")
    eos = tok.eos_token_id
    out = tokenize_sequence_examples(tok, {"s": ["the cat", "a dog sat"]}, "s", None, 6, True, True, causal=True)
    # no special tokens, right padded with eos from position 0
    assert out["input_ids"] == [tok.convert_tokens_to_ids(["t", "he", "Ġcat"]) + [eos] * 3,
                                tok.convert_tokens_to_ids(["a", "Ġdog", "Ġs", "at"]) + [eos] * 2]
    assert out["attention_mask"] == [[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0]]


def test_decoder_token_rows_keep_their_end(decoder_folders):
    """No separator to move to T-1: the PAPA row of a decoder is the right-padded row, labels aligned by hand."""
    _, _, tok = load_config_and_tokenizer(decoder_folders["llama"], None, get_task("ner"), NER_LABELS, 8)
    examples = {"tokens": [["EU", "rejects", "German"]], "tags": [["B-ORG", "O", "B-MISC"]]}
    laid = tokenize_token_examples(tok, examples, 8, papa_layout=True, pad_to_max_length=False,
                                   label_all_tokens=False, label_list=NER_LABELS, causal=True)
    pad = tok.pad_token_id
    assert laid["input_ids"] == [[tok.bos_token_id, *tok.convert_tokens_to_ids(["▁EU", "▁rejects", "▁German"])]
                                 + [pad] * 4]
    assert laid["attention_mask"] == [[1, 1, 1, 1, 0, 0, 0, 0]]
    assert laid["labels"] == [[X, NER_LABELS.index("B-ORG"), NER_LABELS.index("O"), NER_LABELS.index("B-MISC"),
                               X, X, X, X]]


def test_gpt2_words_get_a_prefix_space_on_token_tasks(decoder_folders):
    path = decoder_folders["gpt2"]
    _, _, tok = load_config_and_tokenizer(path, None, get_task("ner"), NER_LABELS, 8)
    assert tok.add_prefix_space is True
    row = tokenize_token_examples(tok, {"tokens": [["EU", "rejects"]], "tags": [[2, 8]]}, 8, True, False, False,
                                  NER_LABELS, causal=True)
    first = tok.convert_ids_to_tokens(row["input_ids"][0][:1])[0]
    assert first.startswith("Ġ")  # "EU" read as a word after a space, as in running text
    _, _, plain = load_config_and_tokenizer(path, None, get_task("repeat"), ["new", "repeated"], 8)
    assert plain.add_prefix_space is False  # sequence tasks read the text as it is


def test_left_padding_is_refused_where_rows_are_padded():
    tok = make_decoder_tokenizer("llama")
    tok.pad_token = tok.eos_token
    with pytest.raises(PapaError, match="pads on the left"):
        tokenize_sequence_examples(tok, {"s": ["the cat"]}, "s", None, 6, True, True, causal=True)
    with pytest.raises(PapaError, match="pads on the left"):
        tokenize_token_examples(tok, {"tokens": [["EU"]], "tags": [[2]]}, 6, False, True, False, NER_LABELS)


# ----------------------------------------------------------------------------- the scripts' set-up


def test_fit_tokenizer_switches_to_right_padding_and_pads_with_eos(capsys):
    tok = make_decoder_tokenizer("llama")
    assert tok.padding_side == "left" and tok.pad_token is None
    config = transformers.LlamaConfig(pad_token_id=None)
    fit_tokenizer(tok, config, True, "tiny-llama")
    assert tok.padding_side == "right" and tok.pad_token == tok.eos_token == "</s>"
    assert config.pad_token_id == tok.eos_token_id == 2
    log = capsys.readouterr().out
    assert "switched to right padding" in log and "padding with its eos token '</s>'" in log
    fit_tokenizer(tok, config, True, "tiny-llama")  # nothing left to change: nothing said
    assert capsys.readouterr().out == ""


def test_fit_tokenizer_pads_with_eos_when_the_pad_token_is_outside_the_embeddings(capsys):
    """A pad token added on top of the model's vocabulary (as Qwen2's tokenizer class adds one) cannot be embedded."""
    tok = make_decoder_tokenizer("llama")
    tok.add_special_tokens({"pad_token": "<pad>"})
    vocab = tok.pad_token_id  # the model's embeddings end just before the added pad token
    config = transformers.LlamaConfig(vocab_size=vocab, pad_token_id=None)
    fit_tokenizer(tok, config, True, "tiny")
    assert tok.pad_token_id == tok.eos_token_id == config.pad_token_id == 2
    assert f"pad token (id {vocab}) is outside the model's {vocab} embeddings" in capsys.readouterr().out
    tok.add_special_tokens({"pad_token": "<pad>"})
    tok.eos_token = "<pad>"  # no eos inside the embeddings either: nothing to pad with
    with pytest.raises(PapaError, match="outside the model's .* embeddings, and its eos token .* outside them too"):
        fit_tokenizer(tok, transformers.LlamaConfig(vocab_size=vocab), True, "tiny")


def test_fit_tokenizer_leaves_encoder_configs_alone():
    tok = make_decoder_tokenizer("gpt2")
    config = transformers.BertConfig(pad_token_id=7)
    fit_tokenizer(tok, config, False, "x")
    assert config.pad_token_id == 7 and tok.pad_token_id == tok.eos_token_id


def test_load_records_pad_in_the_decoder_config(decoder_folders):
    for name, path in decoder_folders.items():
        _, config, tok = load_config_and_tokenizer(path, None, get_task("mrpc"), ["0", "1"], 16)
        assert config.pad_token_id == tok.pad_token_id == tok.eos_token_id and tok.padding_side == "right"


def test_tokenizer_without_pad_or_eos_is_a_clear_error(tmp_path):
    tok = make_decoder_tokenizer("gpt2")
    tok.eos_token = tok.bos_token = tok.unk_token = None
    with pytest.raises(PapaError, match="neither a pad token nor an eos token"):
        fit_tokenizer(tok, transformers.GPT2Config(), True, "no-eos")


def test_no_pad_no_eos_from_the_command_line(decoder_folders, tmp_path, capsys):
    from cli_fixtures import command_error

    folder = tmp_path / "model"
    folder.mkdir()
    for item in ("config.json", "model.safetensors"):
        shutil.copy(Path(decoder_folders["gpt2"]) / item, folder / item)
    tok = make_decoder_tokenizer("gpt2")
    tok.eos_token = tok.bos_token = tok.unk_token = None
    tok.save_pretrained(folder)
    line = command_error("glue_avgs", ["--model_name_or_path", folder, "--task_name", "repeat", "--max_length", 16,
                                       "--output_dir", tmp_path / "avgs", "--max_train_samples", 8], capsys)
    assert "neither a pad token nor an eos token" in line and "--tokenizer_name" in line
    assert not (tmp_path / "avgs" / "avgs.pt").exists()


def test_the_cache_key_follows_the_tokenizer_set_up(tmp_path, monkeypatch):
    raw = make_decoder_tokenizer("gpt2")
    raw.pad_token = raw.eos_token
    with_space = make_decoder_tokenizer("gpt2")
    with_space.pad_token = with_space.eos_token
    with_space.add_prefix_space = True
    other_pad = make_decoder_tokenizer("gpt2")
    other_pad.pad_token = other_pad.convert_ids_to_tokens(5)
    left = make_decoder_tokenizer("gpt2")
    left.pad_token, left.padding_side = left.eos_token, "left"
    digests = {tokenizer_digest(t) for t in (raw, with_space, other_pad, left)}
    assert len(digests) == 4
    # the decoder layout is a setting of its own: the same tokenizer and data, two entries
    import datasets

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "tokenized"))
    data = datasets.DatasetDict(train=datasets.Dataset.from_dict({"sentence": ["the cat"], "label": [0]}))
    task = get_task("repeat")
    encoder_rows = tokenize_cached(task, data, raw, ["new", "repeated"], 6, False, True)
    decoder_rows = tokenize_cached(task, data, raw, ["new", "repeated"], 6, False, True, causal=True)
    assert len(list((tmp_path / "tokenized").iterdir())) == 2
    assert encoder_rows["train"].to_dict() == tokenize_dataset(task, data, raw, ["new", "repeated"], 6, False,
                                                               True)["train"].to_dict()
    assert decoder_rows["train"]["input_ids"] == encoder_rows["train"]["input_ids"]  # no PAPA layout: the same rows


# ----------------------------------------------------------------------------- last-token pooling


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_sequence_classifier_pools_the_last_real_token(decoder_folders, name):
    """HF's decoder classifier on PAPA-laid pairs (pad = eos) = its `score` on the hidden state at the last
    position whose mask is 1, found here from the mask alone."""
    path = decoder_folders[name]
    _, config, tok = load_config_and_tokenizer(path, None, get_task("mrpc"), ["0", "1"], 16)
    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(path, config=config).eval()
    examples = {"a": ["the cat sat on the mat", "a dog", "EU"], "b": ["a dog", "the cat sat on the mat", "lamb"]}
    batch = tokenize_sequence_examples(tok, examples, "a", "b", 16, True, True, causal=True)
    ids, mask = torch.tensor(batch["input_ids"]), torch.tensor(batch["attention_mask"])
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits
        hidden = model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, T, hidden)
    last = [max(i for i in range(16) if mask[b, i]) for b in range(3)]
    assert last[1] == 15 and last[2] < 15  # one row fills its second half, one ends early
    expected = model.score(hidden[torch.arange(3), last])
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)


def test_a_decoder_without_the_task_head_is_a_clear_error(tmp_path, capsys):
    """Granite has no sequence or token classifier in transformers: one error line, before any tokenising."""
    from cli_fixtures import command_error

    model_dir = save_tiny_decoder("granite", tmp_path / "granite")
    line = command_error("glue", ["--model_name_or_path", model_dir, "--task_name", "repeat", "--do_train",
                                  "--max_seq_length", 16, "--output_dir", tmp_path / "run"], capsys)
    assert "no SequenceClassification model for model_type='granite'" in line


@pytest.mark.parametrize("name, head, classifier", [("llama", "sequence", "score"), ("gpt2", "sequence", "score"),
                                                    ("llama", "token", "score"), ("gpt2", "token", "classifier")])
def test_probing_modes_train_a_decoders_own_head(name, head, classifier):
    """Without the freeze-extract probe the task head is the model's own: `score` (GPT-2's token head:
    `classifier`), left trainable when everything else is frozen."""
    from tiny_decoders import tiny_decoder

    from papa.models.modeling import set_trainable

    model = tiny_decoder(name, head=head)
    only = set_trainable(model, "grad_for_classifier_only")
    assert sorted(only) == sorted(f"{classifier}.{p}" for p, _ in getattr(model, classifier).named_parameters())
