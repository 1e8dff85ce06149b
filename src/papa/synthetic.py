"""A built-in, offline, **synthetic** sentence-classification task for the quickstart.

GLUE cannot ship with the package, so `make_agreement_dataset` generates a small task instead:
English subject–verb number agreement across attractors. Every sentence is made up from the
word lists below (the data is synthetic, not a corpus): lower-case common English words
separated by single spaces, no punctuation.

    the key to the cabinets is on the table                      -> 1 (grammatical)
    the key to the cabinets are on the table                     -> 0 (ungrammatical)
    the keys that the old farmer saw near the door have arrived  -> 1

Label 1 means the main verb agrees in number with the subject (the first noun), 0 means it does
not. Between subject and main verb sit 0..3 intervening phrases (prepositional phrases
"near the cabinets" or object relative clauses "that the farmer saw"), so the two words that
decide the label are 1 to 16 words apart. Every intervening noun has the number opposite to the
subject (an attractor): agreeing with the nearest noun is wrong.

The task is built so that the label needs the relation between the two words:

- subject number and verb match are each 50/50 and crossed (each of the four cells holds a
  quarter of a split when its size is divisible by 4), so neither the subject noun nor the
  verb alone says anything about the label;
- a bag of words says nothing either: every sentence holds as many singular as plural nouns
  (the predicate after the verb takes the nouns that balance the count), every noun slot draws
  its lemma from the same list, and the relative clauses use past-tense verbs (saw, liked, ...)
  which carry no number. So the words of a sentence, as a multiset, have the same distribution
  whatever the subject's number, and only the verb form varies with the label; a linear model
  on unigram counts stays at chance.

Generation is deterministic for a seed and uses no global random state: train and validation
come from two independent `random.Random` streams derived from the seed. Sentences are unique
within a split and no validation sentence occurs in train (a duplicate is regenerated).
"""

import random

from datasets import ClassLabel, Dataset, DatasetDict, Features, Value

from .errors import PapaError

AGREEMENT_LABELS = ["ungrammatical", "grammatical"]  # index = label

# (singular, plural); regular and irregular. No form is also a verb or adjective in these lists.
NOUN_PAIRS = (
    ("key", "keys"),
    ("cabinet", "cabinets"),
    ("table", "tables"),
    ("book", "books"),
    ("dog", "dogs"),
    ("cat", "cats"),
    ("car", "cars"),
    ("house", "houses"),
    ("door", "doors"),
    ("window", "windows"),
    ("box", "boxes"),
    ("girl", "girls"),
    ("boy", "boys"),
    ("teacher", "teachers"),
    ("farmer", "farmers"),
    ("doctor", "doctors"),
    ("friend", "friends"),
    ("bird", "birds"),
    ("tree", "trees"),
    ("picture", "pictures"),
    ("letter", "letters"),
    ("bottle", "bottles"),
    ("child", "children"),
    ("man", "men"),
    ("woman", "women"),
    ("person", "people"),
    ("mouse", "mice"),
    ("foot", "feet"),
    ("tooth", "teeth"),
    ("wolf", "wolves"),
    ("knife", "knives"),
    ("wife", "wives"),
)

# Main-verb forms (singular, plural). These forms occur nowhere else in a sentence.
VERB_PAIRS = (
    ("is", "are"),
    ("was", "were"),
    ("has", "have"),
    ("runs", "run"),
    ("looks", "look"),
    ("sits", "sit"),
    ("seems", "seem"),
    ("walks", "walk"),
    ("stays", "stay"),
)

ADJECTIVES = (
    "old", "new", "big", "small", "red", "blue", "green", "little",
    "young", "tall", "happy", "quiet", "heavy", "dark",
)

# Prepositions that open an intervening phrase: "the key <to the cabinets> is ...".
PREPOSITIONS = ("of", "to", "near", "behind", "with", "from", "under", "beside", "by", "on", "in")

# Verbs of the object relative clauses ("that the farmer saw"): past tense, so number-neutral.
RELATIVE_CLAUSE_VERBS = (
    "saw", "liked", "found", "bought", "painted", "cleaned",
    "moved", "lost", "wanted", "watched", "visited", "helped",
)

MAX_INTERVENING = 3  # intervening phrases between subject and main verb: 0..MAX_INTERVENING

_ADJ_PROB = 0.3  # chance that a noun gets an adjective
_MAX_TRIES = 1000  # fresh draws allowed for one sentence before giving up on uniqueness

# Predicates after the main verb, per verb pair (same index as VERB_PAIRS), by number of noun
# slots. "N" is a noun slot ("the" is written out), "A" an adjective.
_BE = {
    0: (("A",), ("here",), ("very", "A"), ("not", "A")),
    1: (("on", "the", "N"), ("near", "the", "N"), ("in", "the", "N"), ("under", "the", "N"),
        ("behind", "the", "N")),
    2: (("on", "the", "N", "near", "the", "N"), ("in", "the", "N", "with", "the", "N")),
}
_PREDICATES = (
    _BE,  # is/are
    _BE,  # was/were
    {  # has/have
        0: (("arrived",), ("left",), ("been", "here"), ("gone", "home")),
        1: (("seen", "the", "N"), ("found", "the", "N"), ("left", "the", "N")),
        2: (("left", "the", "N", "in", "the", "N"), ("seen", "the", "N", "near", "the", "N")),
    },
    {  # runs/run
        0: (("fast",), ("home",), ("every", "day")),
        1: (("to", "the", "N"), ("past", "the", "N")),
        2: (("to", "the", "N", "with", "the", "N"),),
    },
    {  # looks/look
        0: (("A",), ("very", "A")),
        1: (("at", "the", "N"), ("like", "the", "N")),
        2: (("at", "the", "N", "behind", "the", "N"),),
    },
    {  # sits/sit
        0: (("here",), ("still",)),
        1: (("on", "the", "N"), ("by", "the", "N")),
        2: (("on", "the", "N", "near", "the", "N"),),
    },
    {  # seems/seem
        0: (("A",), ("very", "A"), ("A", "today")),
        1: (("A", "to", "the", "N"),),
        2: (("A", "to", "the", "N", "in", "the", "N"),),
    },
    {  # walks/walk
        0: (("home",), ("slowly",)),
        1: (("to", "the", "N"), ("past", "the", "N")),
        2: (("to", "the", "N", "with", "the", "N"),),
    },
    {  # stays/stay
        0: (("here",), ("home",)),
        1: (("in", "the", "N"), ("with", "the", "N")),
        2: (("in", "the", "N", "with", "the", "N"),),
    },
)

_FEATURES = Features({"sentence": Value("string"), "label": ClassLabel(names=AGREEMENT_LABELS)})


def _noun_phrase(rng, lemma, plural):
    """["the", (adjective), noun]."""
    words = ["the"]
    if rng.random() < _ADJ_PROB:
        words.append(rng.choice(ADJECTIVES))
    words.append(NOUN_PAIRS[lemma][plural])
    return words


def _sentence(rng, plural_subject, grammatical):
    """One sentence with the given subject number (0/1) and label (True = verb agrees)."""
    k = rng.randrange(MAX_INTERVENING + 1)  # intervening phrases, each with one attractor
    # Nouns so far: 1 of the subject's number, k of the other. The predicate balances the count;
    # with k == 1 it is balanced already and the predicate takes 0 nouns or one of each number.
    if k == 1:
        pred_numbers = rng.choice(((), (0, 1)))
    else:
        pred_numbers = (plural_subject,) * (k - 1) if k > 1 else (1 - plural_subject,)
    pred_numbers = list(pred_numbers)
    rng.shuffle(pred_numbers)
    lemmas = rng.sample(range(len(NOUN_PAIRS)), 1 + k + len(pred_numbers))  # distinct nouns

    words = _noun_phrase(rng, lemmas[0], plural_subject)
    for i in range(k):
        attractor = _noun_phrase(rng, lemmas[1 + i], 1 - plural_subject)
        if rng.random() < 0.5:
            words += [rng.choice(PREPOSITIONS)] + attractor
        else:
            words += ["that"] + attractor + [rng.choice(RELATIVE_CLAUSE_VERBS)]

    verb = rng.randrange(len(VERB_PAIRS))
    words.append(VERB_PAIRS[verb][plural_subject if grammatical else 1 - plural_subject])

    template = rng.choice(_PREDICATES[verb][len(pred_numbers)])
    slot = 0
    for token in template:
        if token == "N":
            words.append(NOUN_PAIRS[lemmas[1 + k + slot]][pred_numbers[slot]])
            slot += 1
        elif token == "A":
            words.append(rng.choice(ADJECTIVES))
        elif token == "the" and slot < len(pred_numbers) and rng.random() < _ADJ_PROB:
            words += ["the", rng.choice(ADJECTIVES)]  # "the" always precedes an "N" slot
        else:
            words.append(token)
    return " ".join(words)


def _cells(rng, n):
    """n (plural_subject, grammatical) pairs: the four combinations as equal as possible.

    For even n, both labels and both subject numbers are exactly n/2 each.
    """
    all_cells = [(0, 0), (0, 1), (1, 0), (1, 1)]
    cells = all_cells * (n // 4)
    rest = n % 4
    if rest == 2:  # keep both margins exact: two cells that differ in both coordinates
        cells += rng.choice((((0, 0), (1, 1)), ((0, 1), (1, 0))))
    elif rest:
        cells += rng.sample(all_cells, rest)
    rng.shuffle(cells)
    return cells


def _split(rng, n, taken):
    """n labelled sentences, none in `taken` (which they are added to)."""
    sentences, labels = [], []
    for plural_subject, grammatical in _cells(rng, n):
        for _ in range(_MAX_TRIES):
            sentence = _sentence(rng, plural_subject, grammatical)
            if sentence not in taken:
                break
        else:
            raise PapaError(
                f"could not generate {n} distinct agreement sentences; ask for fewer examples"
            )
        taken.add(sentence)
        sentences.append(sentence)
        labels.append(int(grammatical))
    return sentences, labels


def make_agreement_dataset(
    seed: int = 0, num_train: int = 3000, num_validation: int = 500
) -> DatasetDict:
    """The synthetic agreement task: splits "train" and "validation", columns `sentence`, `label`.

    `label` is a `ClassLabel` with names `AGREEMENT_LABELS` (1 = grammatical, 0 = ungrammatical).
    Deterministic for `seed`; different seeds give different data. Labels and subject numbers
    are exactly balanced in a split of even size; validation never repeats a train sentence.
    """
    for name, value in (("num_train", num_train), ("num_validation", num_validation)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise PapaError(f"{name} must be a non-negative integer, got {value!r}")
    # str seeds are hashed with SHA-512 by random.Random: stable across runs and processes.
    train_rng = random.Random(f"papa-agreement/{int(seed)}/train")
    validation_rng = random.Random(f"papa-agreement/{int(seed)}/validation")
    taken = set()
    train = _split(train_rng, num_train, taken)
    validation = _split(validation_rng, num_validation, taken)
    return DatasetDict(
        {
            name: Dataset.from_dict({"sentence": s, "label": y}, features=_FEATURES)
            for name, (s, y) in (("train", train), ("validation", validation))
        }
    )
