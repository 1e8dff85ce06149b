"""The synthetic subject–verb agreement task (papa.synthetic)."""

import time
from collections import Counter

import pytest

from papa.errors import PapaError
from papa.synthetic import (
    AGREEMENT_LABELS,
    MAX_INTERVENING,
    NOUN_PAIRS,
    VERB_PAIRS,
    make_agreement_dataset,
)

SINGULAR_NOUNS = {sg for sg, _ in NOUN_PAIRS}
PLURAL_NOUNS = {pl for _, pl in NOUN_PAIRS}
SINGULAR_VERBS = {sg for sg, _ in VERB_PAIRS}
PLURAL_VERBS = {pl for _, pl in VERB_PAIRS}


@pytest.fixture(scope="module")
def data():
    return make_agreement_dataset()


def _noun_number(word):
    return 0 if word in SINGULAR_NOUNS else 1 if word in PLURAL_NOUNS else None


def _parse(sentence):
    """(subject number, main-verb number, nouns between them), from the vocabulary lists alone."""
    words = sentence.split()
    assert words[0] == "the"
    subject = words[1] if _noun_number(words[1]) is not None else words[2]
    assert _noun_number(subject) is not None, sentence
    verbs = [i for i, w in enumerate(words) if w in SINGULAR_VERBS | PLURAL_VERBS]
    assert len(verbs) == 1, sentence  # exactly one main verb
    verb_at = verbs[0]
    between = [w for w in words[words.index(subject) + 1 : verb_at] if _noun_number(w) is not None]
    return _noun_number(subject), int(words[verb_at] in PLURAL_VERBS), between


def test_shape_and_columns(data):
    assert set(data) == {"train", "validation"}
    assert len(data["train"]) == 3000 and len(data["validation"]) == 500
    for split in data.values():
        assert split.column_names == ["sentence", "label"]
        assert split.features["label"].names == AGREEMENT_LABELS == ["ungrammatical", "grammatical"]
        for sentence in split["sentence"]:
            assert sentence == sentence.strip().lower() and "  " not in sentence
            assert all(w.isalpha() for w in sentence.split())
            assert len(sentence.split()) <= 30


def test_deterministic_for_a_seed():
    a = make_agreement_dataset(seed=3, num_train=200, num_validation=50)
    b = make_agreement_dataset(seed=3, num_train=200, num_validation=50)
    for name in ("train", "validation"):
        assert a[name].to_dict() == b[name].to_dict()


def test_different_seeds_differ():
    a = make_agreement_dataset(seed=0, num_train=200, num_validation=50)
    b = make_agreement_dataset(seed=1, num_train=200, num_validation=50)
    assert a["train"]["sentence"] != b["train"]["sentence"]
    assert a["validation"]["sentence"] != b["validation"]["sentence"]
    assert len(set(a["train"]["sentence"]) & set(b["train"]["sentence"])) < 20


@pytest.mark.parametrize("n", [2, 6, 10, 500])
def test_balanced_labels_and_subject_numbers(n):
    ds = make_agreement_dataset(seed=7, num_train=n, num_validation=n)
    for split in ds.values():
        labels = Counter(split["label"])
        subjects = Counter(_parse(s)[0] for s in split["sentence"])
        assert labels == {0: n // 2, 1: n // 2}
        assert subjects == {0: n // 2, 1: n // 2}


def test_default_split_cells_are_exactly_balanced(data):
    for split in data.values():
        cells = Counter((_parse(s)[0], y) for s, y in zip(split["sentence"], split["label"]))
        assert len(cells) == 4 and len(set(cells.values())) == 1


def test_no_overlap_and_no_duplicates(data):
    train, validation = data["train"]["sentence"], data["validation"]["sentence"]
    assert len(set(train)) == len(train) and len(set(validation)) == len(validation)
    assert not set(train) & set(validation)


def test_fast():
    make_agreement_dataset(num_train=10, num_validation=10)  # warm-up (pyarrow, etc.)
    start = time.perf_counter()
    make_agreement_dataset()
    assert time.perf_counter() - start < 1.0


def test_labels_follow_agreement_with_attractors(data):
    distances = Counter()
    for split in data.values():
        for sentence, label in zip(split["sentence"], split["label"]):
            subject, verb, between = _parse(sentence)
            assert label == int(subject == verb), sentence
            assert all(_noun_number(w) == 1 - subject for w in between), sentence  # attractors
            assert len(between) <= MAX_INTERVENING
            distances[len(between)] += 1
            nouns = [_noun_number(w) for w in sentence.split() if _noun_number(w) is not None]
            assert nouns.count(0) == nouns.count(1), sentence  # count of noun numbers balanced
    assert set(distances) == set(range(MAX_INTERVENING + 1))
    assert min(distances.values()) > 0.15 * sum(distances.values())


def test_bag_of_words_baseline_is_near_chance(data):
    pytest.importorskip("sklearn")
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    vectorizer = CountVectorizer(token_pattern=r"\S+")
    x_train = vectorizer.fit_transform(data["train"]["sentence"])
    x_val = vectorizer.transform(data["validation"]["sentence"])
    model = LogisticRegression(max_iter=2000).fit(x_train, data["train"]["label"])
    assert model.score(x_val, data["validation"]["label"]) < 0.65


def test_bad_sizes_raise():
    with pytest.raises(PapaError):
        make_agreement_dataset(num_train=-1)
    with pytest.raises(PapaError):
        make_agreement_dataset(num_validation=2.5)
    empty = make_agreement_dataset(num_train=0, num_validation=0)
    assert len(empty["train"]) == 0 and len(empty["validation"]) == 0
