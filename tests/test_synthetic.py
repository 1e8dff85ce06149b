"""The synthetic repeat task (papa.data.synthetic): "does the last word already occur earlier?"."""

from collections import Counter

import pytest

from papa.errors import PapaError
from papa.data.synthetic import MAX_WORDS_BEFORE, MIN_WORDS_BEFORE, NOUNS, REPEAT_LABELS, make_repeat_dataset


@pytest.fixture(scope="module")
def data():
    return make_repeat_dataset()


def _rows(data):
    for split in data.values():
        yield from zip(split["sentence"], split["label"])


def test_shape_and_columns(data):
    assert set(data) == {"train", "validation"}
    assert len(data["train"]) == 3000 and len(data["validation"]) == 500
    for split in data.values():
        assert split.column_names == ["sentence", "label"]
        assert split.features["label"].names == REPEAT_LABELS == ["new", "repeated"]
    for sentence, _ in _rows(data):
        words = sentence.split()
        assert sentence == " ".join(words)  # single spaces, no padding
        assert set(words) <= set(NOUNS)
        assert MIN_WORDS_BEFORE + 1 <= len(words) <= MAX_WORDS_BEFORE + 1


def test_label_is_whether_the_last_word_occurs_before(data):
    distances = Counter()
    for sentence, label in _rows(data):
        *before, last = sentence.split()
        assert len(set(before)) == len(before), sentence  # the words before are all different
        assert label == int(last in before), sentence
        if label:
            distances[len(before) - before.index(last)] += 1
    # the copy sits 1 to 12 words back, every distance occurs
    assert set(distances) == set(range(1, MAX_WORDS_BEFORE + 1))


def test_copy_position_and_length_are_uninformative(data):
    from scipy.stats import chisquare

    lengths = {0: Counter(), 1: Counter()}
    copies = Counter()  # (words before, index of the copy among them)
    for sentence, label in _rows(data):
        *before, last = sentence.split()
        lengths[label][len(before)] += 1
        if label:
            copies[len(before), before.index(last)] += 1
    for n in range(MIN_WORDS_BEFORE, MAX_WORDS_BEFORE + 1):  # uniform lengths in both classes
        assert 0.7 < lengths[0][n] / lengths[1][n] < 1.4
    # given the length n, the copy is equally likely at each of the n positions
    cells = [(n, i) for n in range(MIN_WORDS_BEFORE, MAX_WORDS_BEFORE + 1) for i in range(n)]
    observed = [copies[cell] for cell in cells]
    expected = [lengths[1][n] / n for n, _ in cells]
    assert sum(observed) == sum(lengths[1].values())
    assert chisquare(observed, expected).pvalue > 1e-3


@pytest.mark.parametrize("n", [2, 6, 10, 500])
def test_balanced_labels(n):
    ds = make_repeat_dataset(seed=7, num_train=n, num_validation=n)
    for split in ds.values():
        assert Counter(split["label"]) == {0: n // 2, 1: n // 2}


def test_odd_sizes_differ_by_one():
    ds = make_repeat_dataset(seed=7, num_train=7, num_validation=1)
    assert sorted(Counter(ds["train"]["label"]).values()) == [3, 4]
    assert len(ds["validation"]) == 1


def test_deterministic_for_a_seed():
    a = make_repeat_dataset(seed=3, num_train=200, num_validation=50)
    b = make_repeat_dataset(seed=3, num_train=200, num_validation=50)
    for name in ("train", "validation"):
        assert a[name].to_dict() == b[name].to_dict()


def test_different_seeds_differ():
    a = make_repeat_dataset(seed=0, num_train=200, num_validation=50)
    b = make_repeat_dataset(seed=1, num_train=200, num_validation=50)
    assert a["train"]["sentence"] != b["train"]["sentence"]
    assert a["validation"]["sentence"] != b["validation"]["sentence"]
    assert len(set(a["train"]["sentence"]) & set(b["train"]["sentence"])) < 5


def test_no_overlap_and_no_duplicates(data):
    train, validation = data["train"]["sentence"], data["validation"]["sentence"]
    assert len(set(train)) == len(train) and len(set(validation)) == len(validation)
    assert not set(train) & set(validation)


def _logistic_accuracy(vectorizer, data):
    from sklearn.linear_model import LogisticRegression

    x_train = vectorizer.fit_transform(data["train"]["sentence"])
    model = LogisticRegression(max_iter=2000).fit(x_train, data["train"]["label"])
    return model.score(vectorizer.transform(data["validation"]["sentence"]), data["validation"]["label"])


def test_words_alone_are_at_chance(data):
    from sklearn.feature_extraction.text import CountVectorizer

    # word counts, and the identity of the last word: the label is in neither
    assert _logistic_accuracy(CountVectorizer(token_pattern=r"\S+"), data) < 0.58
    last_word = CountVectorizer(analyzer=lambda s: [s.split()[-1]])
    assert _logistic_accuracy(last_word, data) < 0.58


def test_every_noun_is_one_token_and_sentences_fit_the_sweep_length():
    from transformers import AutoTokenizer

    from papa.models.modeling import default_model_path
    from papa.sweep.defaults import REPEAT_DEFAULTS

    tokenizer = AutoTokenizer.from_pretrained(default_model_path())
    assert [w for w in NOUNS if len(tokenizer.tokenize(w)) != 1] == []
    assert len(set(NOUNS)) == len(NOUNS) > MAX_WORDS_BEFORE + 1
    # + [CLS] and [SEP]; a single sentence gets T/2 positions in the PAPA layout
    assert MAX_WORDS_BEFORE + 1 + 2 <= REPEAT_DEFAULTS["max_seq_length"] // 2


@pytest.mark.slow
def test_bundled_minilm_encodes_the_task_and_all_constant_heads_lose_it():
    """Why this task is the quickstart's: frozen MiniLM's states separate the classes, and they do so
    through its attention (a logistic probe on mean-pooled states of every layer)."""
    import torch
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler
    from transformers import AutoModel, AutoTokenizer

    from papa import patch_model
    from papa.method.averaging import accumulate_attention
    from papa.models.modeling import default_model_path
    from papa.data.preprocessing import tokenize_sequence_examples

    T, path = 32, default_model_path()
    data = make_repeat_dataset(seed=5, num_train=800, num_validation=300)
    tokenizer = AutoTokenizer.from_pretrained(path)

    def encode(split):
        enc = tokenize_sequence_examples(tokenizer, {"sentence": list(data[split]["sentence"])}, "sentence", None, T,
                                         papa_layout=True, pad_to_max_length=True)
        return torch.tensor(enc["input_ids"]), torch.tensor(enc["attention_mask"])

    def pooled(model, ids, mask):
        with torch.inference_mode():
            states = torch.stack(model(ids, attention_mask=mask, output_hidden_states=True).hidden_states, 1)
        m = mask[:, None, :, None].float()  # (B, 1, T, 1)
        return ((states * m).sum(2) / m.sum(2)).flatten(1).numpy()  # (B, (L+1)·H)

    def accuracy(model):
        x_train, x_val = pooled(model, *encode("train")), pooled(model, *encode("validation"))
        scaler = StandardScaler().fit(x_train)
        probe = LogisticRegression(C=0.1, max_iter=3000).fit(scaler.transform(x_train), data["train"]["label"])
        return probe.score(scaler.transform(x_val), data["validation"]["label"])

    stock = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    ids, mask = encode("train")
    averages = accumulate_attention(stock, [{"input_ids": ids, "attention_mask": mask}], T).averages().float()
    constant = patch_model(AutoModel.from_pretrained(path).eval(), averages,
                           {layer: list(range(12)) for layer in range(6)})
    dynamic_accuracy, constant_accuracy = accuracy(stock), accuracy(constant)
    assert dynamic_accuracy > 0.85, dynamic_accuracy
    assert constant_accuracy < dynamic_accuracy - 0.1, (dynamic_accuracy, constant_accuracy)


def test_bad_sizes_raise():
    with pytest.raises(PapaError):
        make_repeat_dataset(num_train=-1)
    with pytest.raises(PapaError):
        make_repeat_dataset(num_validation=2.5)
    empty = make_repeat_dataset(num_train=0, num_validation=0)
    assert len(empty["train"]) == 0 and len(empty["validation"]) == 0
