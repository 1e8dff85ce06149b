"""papa.data.tokenized_cache: a cached split equals tokenising it again, and any change of its inputs is a miss.

(A whole stage with the cache against one without: test_controls.py, with the scripts.)
"""

import os
import threading

import pytest
import datasets
from datasets import DatasetDict
from transformers import AutoTokenizer

from papa.data import tokenized_cache
from papa.data.conll import load_token_task
from papa.models.modeling import default_model_path
from papa.data.preprocessing import tokenize_dataset
from papa.data.synthetic import make_repeat_dataset
from papa.data.tasks import get_task
from papa.data.tokenized_cache import CACHE_ENV, tokenize_cached, tokenizer_digest

REPEAT = get_task("repeat")


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(default_model_path())


@pytest.fixture(scope="module")
def repeat_splits():
    data = make_repeat_dataset()
    return DatasetDict(train=data["train"].select(range(40)), validation=data["validation"].select(range(20)))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "tokenized"))
    return tmp_path / "tokenized"


def entries(folder):
    return sorted(os.listdir(folder)) if folder.is_dir() else []


def same(a, b):
    assert a.keys() == b.keys()
    for split in a:
        assert a[split].features == b[split].features and a[split].to_dict() == b[split].to_dict()


def no_tokenising(monkeypatch):
    """From now on a miss would fail the test."""
    def fail(*args, **kwargs):
        raise AssertionError("tokenised again instead of reading the cache")
    monkeypatch.setattr(tokenized_cache, "tokenize_dataset", fail)


def test_a_hit_equals_tokenising_again(cache, tokenizer, repeat_splits, monkeypatch):
    label_list = list(REPEAT.labels)
    expected = tokenize_dataset(REPEAT, repeat_splits, tokenizer, label_list, 32, True, True, False)
    first = tokenize_cached(REPEAT, repeat_splits, tokenizer, label_list, 32, True, True, False)
    same(first, expected)
    assert len(entries(cache)) == 2 and not [e for e in entries(cache) if e.startswith(".")]
    no_tokenising(monkeypatch)
    same(tokenize_cached(REPEAT, repeat_splits, tokenizer, label_list, 32, True, True, False), expected)
    # the averaging stage's spelling of the same call (keywords, defaults) hits the same entry
    train = DatasetDict(train=repeat_splits["train"])
    same(tokenize_cached(REPEAT, train, tokenizer, label_list, 32, True, pad_to_max_length=True),
         DatasetDict(train=expected["train"]))
    assert len(entries(cache)) == 2


def test_any_change_is_a_miss(cache, tokenizer, repeat_splits):
    label_list = list(REPEAT.labels)
    train = DatasetDict(train=repeat_splits["train"])
    tokenize_cached(REPEAT, train, tokenizer, label_list, 32, True, True)
    assert len(entries(cache)) == 1
    tokenize_cached(REPEAT, train, tokenizer, label_list, 24, True, True)  # another T
    tokenize_cached(REPEAT, train, tokenizer, label_list, 32, False, True)  # another layout
    tokenize_cached(REPEAT, DatasetDict(train=repeat_splits["train"].select(range(39))), tokenizer, label_list, 32,
                    True, True)  # other examples
    lower = AutoTokenizer.from_pretrained(default_model_path(), do_lower_case=False)
    assert tokenizer_digest(lower) != tokenizer_digest(tokenizer)
    tokenize_cached(REPEAT, train, lower, label_list, 32, True, True)  # another tokenizer
    assert len(entries(cache)) == 5
    # overwrite: tokenised again, the entry replaced by an equal one
    again = tokenize_cached(REPEAT, train, tokenizer, label_list, 32, True, True, overwrite=True)
    same(again, tokenize_dataset(REPEAT, train, tokenizer, label_list, 32, True, True))
    assert len(entries(cache)) == 5


def test_tokenizer_digest_ignores_what_a_call_sets(tokenizer):
    before = tokenizer_digest(tokenizer)
    tokenizer(["a few words"], padding="max_length", max_length=16, truncation=True)
    assert tokenizer_digest(tokenizer) == before


def test_without_the_variable_nothing_is_written(tmp_path, tokenizer, repeat_splits, monkeypatch):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    out = tokenize_cached(REPEAT, repeat_splits, tokenizer, list(REPEAT.labels), 32, True, True)
    same(out, tokenize_dataset(REPEAT, repeat_splits, tokenizer, list(REPEAT.labels), 32, True, True))
    assert os.listdir(tmp_path) == []


def test_token_task_hit_equals_tokenising_again(cache, tokenizer, shared_data, monkeypatch):
    ner = get_task("ner")
    data, label_list = load_token_task(ner, shared_data / "conll2003", splits=("train", "validation"))
    data = DatasetDict({s: d.select(range(30)) for s, d in data.items()})
    expected = tokenize_dataset(ner, data, tokenizer, label_list, 32, True, True, True)
    same(tokenize_cached(ner, data, tokenizer, label_list, 32, True, True, True), expected)
    no_tokenising(monkeypatch)
    same(tokenize_cached(ner, data, tokenizer, label_list, 32, True, True, True), expected)


# ----------------------------------------------------------------------------- stages running at once


def test_concurrent_stages_share_entries_safely(cache, tokenizer, repeat_splits):
    """Stages of --launcher local or slurm tokenise the same split at the same time, some with --overwrite_cache:
    each gets what tokenising gives, one whole entry remains, no temporary folder is left."""
    label_list = list(REPEAT.labels)
    train = DatasetDict(train=repeat_splits["train"])
    expected = tokenize_dataset(REPEAT, train, tokenizer, label_list, 32, True, True)
    results, errors = [], []

    def stage(overwrite):
        try:
            for _ in range(3):
                results.append(tokenize_cached(REPEAT, train, tokenizer, label_list, 32, True, True,
                                               overwrite=overwrite))
        except Exception as err:  # noqa: BLE001 -- reported below
            errors.append(err)

    threads = [threading.Thread(target=stage, args=(i % 2 == 1,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(results) == 12
    for result in results:
        same(result, expected)
    assert len(entries(cache)) == 1 and not entries(cache)[0].startswith(".")


def test_an_entry_stored_first_wins_and_partial_ones_are_never_read(cache, tokenizer, repeat_splits, monkeypatch):
    label_list = list(REPEAT.labels)
    train = DatasetDict(train=repeat_splits["train"])
    first = tokenize_cached(REPEAT, train, tokenizer, label_list, 32, True, True)
    (entry,) = entries(cache)
    # another stage's store of the same entry, finished later: the first one stays, its temporary folder goes
    tokenized_cache._save(first["train"].select(range(3)), str(cache / entry))
    assert entries(cache) == [entry] and len(datasets.load_from_disk(str(cache / entry))) == 40
    # a killed stage's half-written temporary folder is not an entry
    (cache / ".tmp-killed").mkdir()
    (cache / ".tmp-killed" / "data-00000-of-00001.arrow").write_bytes(b"partial")
    no_tokenising(monkeypatch)
    same(tokenize_cached(REPEAT, train, tokenizer, label_list, 32, True, True), first)


def test_an_entry_replaced_while_being_read_is_tokenised_instead(cache, tokenizer, repeat_splits, monkeypatch):
    label_list = list(REPEAT.labels)
    train = DatasetDict(train=repeat_splits["train"])
    expected = tokenize_cached(REPEAT, train, tokenizer, label_list, 32, True, True)

    def vanished(path, *args, **kwargs):
        raise FileNotFoundError(path)  # what another stage's --overwrite_cache does to a reader mid-way

    monkeypatch.setattr(tokenized_cache.datasets, "load_from_disk", vanished)
    same(tokenize_cached(REPEAT, train, tokenizer, label_list, 32, True, True), expected)
