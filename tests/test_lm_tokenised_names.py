"""papa.data.lm.lm_blocks names each tokenised split from the text's and the tokenizer's identity, without datasets
hashing the closure that holds the tokenizer."""

from lm_fixtures import EOS, make_tokenizer, write_text
from papa.data import lm as lm_data
from papa.data.lm import lm_blocks
from papa.data.tasks import get_task

LM, T = get_task("lm"), 12


def test_tokenised_splits_are_named_without_hashing_the_tokenizer(tmp_path, monkeypatch):
    """The fingerprint of a tokenised split comes from the text's and the tokenizer's identity: the same for the same
    inputs, another for other text or another tokenizer, and datasets never hashes the closure that holds the
    tokenizer (for Gemma-3's 262 144 tokens that pickling took about 2 s a split)."""
    import datasets.arrow_dataset

    hashed = []  # the functions whose map datasets fingerprints by hashing them
    update = datasets.arrow_dataset.update_fingerprint
    monkeypatch.setattr(datasets.arrow_dataset, "update_fingerprint", lambda fingerprint, transform, args: hashed.append(
        getattr(args.get("function"), "__name__", None)) or update(fingerprint, transform, args))
    texts = lm_data.load_lm_texts(LM, ["train"], train_file=write_text(tmp_path / "train.txt", 30))
    other = lm_data.load_lm_texts(LM, ["train"], train_file=write_text(tmp_path / "other.txt", 31))
    tokenizer = make_tokenizer()
    padded = make_tokenizer()
    padded.pad_token = EOS
    name = lambda t, x: lm_blocks(x, t, T)["train"]._fingerprint  # noqa: E731
    assert name(tokenizer, texts) == name(tokenizer, texts)
    assert name(tokenizer, texts) != name(tokenizer, other)
    assert name(tokenizer, texts) != name(padded, texts)
    assert "group_texts" in hashed and "tokenize" not in hashed
