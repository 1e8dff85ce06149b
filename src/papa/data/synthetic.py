"""A built-in, offline, **synthetic** sentence-classification task for the quickstart.

GLUE cannot ship with the package, so `make_repeat_dataset` generates a small task instead:
*does the last word already occur earlier in the sentence?* Every "sentence" is a list of common
English nouns from `NOUNS` (synthetic data, not a corpus), lower case, separated by single spaces:

    key river bread lamp ship river       -> 1 (repeated: "river" is 4 words back)
    key river bread lamp ship moon        -> 0 (new)

The first 3 to 12 words are all different; the last word is either one of them (label 1) or a
noun that does not occur before (label 0). So the two words that decide the label are 1 to 12
words apart, and which earlier position holds the copy varies from sentence to sentence: a model
must compare the last word with every earlier one, the job of content-dependent attention (a
"duplicate-token" head), not of a fixed positional pattern.

Why this task and not, say, subject–verb agreement: frozen all-MiniLM-L6-v2 — the bundled default
— barely encodes agreement across attractor phrases (logistic probes on its mean-pooled states:
0.50 accuracy), so a quick probe stays at chance. It does encode repetition: a logistic probe on its
mean-pooled states reaches 0.96 on this task, and 0.71 with all 72 heads constant.

The label is decided by the relation between the two words, not by the words themselves:

- labels are exactly balanced in a split of even size, and the length (3..12 + 1 words) is drawn
  independently of the label;
- every word is drawn uniformly from the same list whatever the label, so each noun — the last
  word included — is equally likely in both classes and a linear model on word counts stays at
  chance (the tests check this);
- every noun is a single WordPiece of the bundled tokenizer, so a sentence is at most 15 tokens
  with [CLS] and [SEP] and fits the T/2 = 16 positions a single sentence gets at T = 32.

Generation is deterministic for a seed and uses no global random state: train and validation
come from two independent `random.Random` streams derived from the seed. Sentences are unique
within a split and no validation sentence occurs in train (a duplicate is redrawn).
"""

import random

from datasets import ClassLabel, Dataset, DatasetDict, Features, Value

from ..errors import PapaError

REPEAT_LABELS = ["new", "repeated"]  # index = label

NOUNS = (
    "key", "book", "dog", "cat", "car", "house", "door", "window", "box", "girl", "boy", "teacher",
    "farmer", "doctor", "friend", "bird", "tree", "picture", "letter", "bottle", "table", "chair",
    "cup", "hat", "coat", "shoe", "ship", "train", "horse", "sheep", "apple", "egg",
    "bread", "milk", "fish", "river", "lake", "bridge", "clock", "lamp", "desk", "phone",
    "ring", "stone", "moon", "flower", "garden", "school",
)

MIN_WORDS_BEFORE, MAX_WORDS_BEFORE = 3, 12  # distinct words before the last one

_MAX_TRIES = 1000  # fresh draws allowed for one sentence before giving up on uniqueness

_FEATURES = Features({"sentence": Value("string"), "label": ClassLabel(names=REPEAT_LABELS)})


def _sentence(rng, repeated):
    """One sentence whose last word repeats an earlier one (repeated=True) or is new."""
    num_before = rng.randint(MIN_WORDS_BEFORE, MAX_WORDS_BEFORE)
    words = rng.sample(NOUNS, num_before + 1)  # distinct; words[-1] is a fresh noun
    if repeated:
        words[-1] = words[rng.randrange(num_before)]  # the copy's position: uniform over the words before
    return " ".join(words)


def _labels(rng, n):
    """n labels, exactly half 1 for even n (the odd one out drawn at random), shuffled."""
    labels = [0, 1] * (n // 2) + ([rng.randrange(2)] if n % 2 else [])
    rng.shuffle(labels)
    return labels


def _split(rng, n, taken):
    """n labelled sentences, none in `taken` (which they are added to)."""
    sentences, labels = [], _labels(rng, n)
    for label in labels:
        for _ in range(_MAX_TRIES):
            sentence = _sentence(rng, repeated=bool(label))
            if sentence not in taken:
                break
        else:
            raise PapaError(f"could not generate {n} distinct sentences for the repeat task; ask for fewer examples")
        taken.add(sentence)
        sentences.append(sentence)
    return sentences, labels


def make_repeat_dataset(seed: int = 0, num_train: int = 3000, num_validation: int = 500) -> DatasetDict:
    """The synthetic repeat task: splits "train" and "validation", columns `sentence`, `label`.

    `label` is a `ClassLabel` with names `REPEAT_LABELS` (1 = the last word occurs earlier, 0 = it
    does not). Deterministic for `seed`; different seeds give different data. Labels are exactly
    balanced in a split of even size; validation never repeats a train sentence.
    """
    for name, value in (("num_train", num_train), ("num_validation", num_validation)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise PapaError(f"{name} must be a non-negative integer, got {value!r}")
    # str seeds are hashed with SHA-512 by random.Random: stable across runs and processes.
    train_rng = random.Random(f"papa-repeat/{int(seed)}/train")
    validation_rng = random.Random(f"papa-repeat/{int(seed)}/validation")
    taken = set()
    train = _split(train_rng, num_train, taken)
    validation = _split(validation_rng, num_validation, taken)
    return DatasetDict(
        {
            name: Dataset.from_dict({"sentence": s, "label": y}, features=_FEATURES)
            for name, (s, y) in (("train", train), ("validation", validation))
        }
    )
