"""RULER-style long-context tasks (Hsieh et al. 2024, NVIDIA/RULER), generated offline from each example's own seed,
beside the pass key (papa.data.retrieval, which registers them). Each needs more than one look-up:

    multikey     niah_multikey_1: four needles " One of the special magic numbers for {key} is: {value}." (word keys
                 "adjective-noun", seven-digit values), one asked for; the other three are distractors of the same form
    multivalue   niah_multivalue: one key, four needles with four values, all asked; the answer lists them in the
                 order they stand in the text, ", " between them
    vartrack     variable tracking (vt): one chain of four hops, "VAR ABCDE = 12345" then "VAR FGHIJ = VAR ABCDE" ...,
                 each a sentence of the filler, in order; asked for every variable bound to the value, in chain order,
                 after one worked example with three-letter names (RULER's one-shot)
    common_words common-words extraction (cwe): a numbered list "1. word 2. word ..." filling the context, ten words
                 6 times each and the rest once (30 and 3 from T = 4 096 on); asked for the ten most common, numbered, in
                 the order of their first appearance, after one worked example of 20 words (RULER's one-shot)

RULER's templates are kept word for word (its answer prefixes end the prompt). Where this differs: the haystack is
the project's filler (fixed sentences, or QNLI's / MRPC's with --filler), not Paul Graham's essays; the keys' and
the common words' vocabularies are built in (keys) or the tokenizer's own whole words (common_words), not
wonderwords';
each example is exactly T tokens (the filler or the list cut to fit), not found by a binary search; and an answer
of several items has one order, the text's, so that it is scored as every task here is, token by token against
greedy decoding (RULER's string_match_all accepts any order).
"""

import random
import re

from ..errors import PapaError
from .needles import IGNORE, Example, bos, encode, number, split_answer, weave

ADJECTIVES = ("amber", "bold", "calm", "dark", "eager", "faint", "gentle", "hollow", "icy", "jolly", "keen", "lively",
              "misty", "noble", "odd", "pale", "quiet", "rapid", "silent", "tidy", "upper", "vivid", "warm", "young",
              "zesty", "brave", "crisp", "dusty", "fancy", "grand")
NOUNS = ("anchor", "basket", "candle", "desert", "engine", "forest", "garden", "harbor", "island", "jacket", "kettle",
         "ladder", "meadow", "needle", "orchard", "pillow", "quarry", "river", "saddle", "tunnel", "valley", "wagon",
         "window", "yard", "bridge", "castle", "dragon", "feather", "lantern", "mirror")
NEEDLES = 4  # multikey: needles, one asked for; multivalue: values of the one key
HOPS = 4  # vartrack: assignments after the first, so HOPS + 1 names
COMMON = 10  # common_words: the words asked for

NIAH_NEEDLE = " One of the special magic numbers for {key} is: {value}."
MULTIKEY_HEAD = ("A special magic number is hidden within the following text. Make sure to memorize it. I will quiz "
                 "you about the number afterwards.\n")
MULTIKEY_QUESTION = ("\nWhat is the special magic number for {key} mentioned in the provided text? The special magic "
                     "number for {key} mentioned in the provided text is")
MULTIVALUE_HEAD = ("Some special magic numbers are hidden within the following text. Make sure to memorize it. I will "
                   "quiz you about the numbers afterwards.\n")
MULTIVALUE_QUESTION = ("\nWhat are all the special magic numbers for {key} mentioned in the provided text? The special "
                       "magic numbers for {key} mentioned in the provided text are")
VT_HEAD = "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"
VT_FIRST, VT_HOP = " VAR {name} = {value}.", " VAR {name} = VAR {previous}."
VT_QUESTION = ("\nQuestion: Find all variables that are assigned the value {value} in the text above. Answer: "
               "According to the chain(s) of variable assignment in the text above, {count} variables are assigned the "
               "value {value}, they are:")
CWE_HEAD = ("Below is a numbered list of words. In these words, some appear more often than others. Memorize the ones "
            "that appear most often.\n")
CWE_QUESTION = ("\nQuestion: What are the 10 most common words in the above list? Answer: The top 10 words that appear "
                "most often in the list are:")


def _distinct(rng, draw, count):
    out = []
    while len(out) < count:
        item = draw(rng)
        if item not in out:
            out.append(item)
    return out


def word_key(rng):
    return f"{rng.choice(ADJECTIVES)}-{rng.choice(NOUNS)}"


def multikey_example(tokenizer, seq_len, rng, depth, filler):
    """Four needles of distinct keys and values, the first asked for (at `depth`), the others at random depths."""
    keys = _distinct(rng, word_key, NEEDLES)
    values = _distinct(rng, lambda r: number(r, 7), NEEDLES)
    needles = [encode(tokenizer, NIAH_NEEDLE.format(key=k, value=v)) for k, v in zip(keys, values)]
    head = bos(tokenizer) + encode(tokenizer, MULTIKEY_HEAD)
    depths = [depth] + [rng.random() for _ in range(NEEDLES - 1)]
    ids, labels, starts, placed = weave(tokenizer, seq_len, rng, filler, head, needles, depths,
                                        encode(tokenizer, MULTIKEY_QUESTION.format(key=keys[0])),
                                        encode(tokenizer, f" {values[0]}"))
    return Example(ids, labels, placed, keys[0], (starts[0], starts[0] + len(needles[0])))


def multivalue_example(tokenizer, seq_len, rng, depth, filler):
    """One key's four needles, the first at `depth`, the others at random depths; the answer: every value, in the
    order they stand in the text."""
    key = word_key(rng)
    values = _distinct(rng, lambda r: number(r, 7), NEEDLES)
    needles = [encode(tokenizer, NIAH_NEEDLE.format(key=key, value=v)) for v in values]
    depths = [depth] + [rng.random() for _ in range(NEEDLES - 1)]
    head = bos(tokenizer) + encode(tokenizer, MULTIVALUE_HEAD)
    question = encode(tokenizer, MULTIVALUE_QUESTION.format(key=key))
    # the answer lists the values in the order the placement gives them; its length, not its order, decides the
    # placement, so a draft from a copy of the stream finds the order and the example is drawn again with it
    order = list(range(NEEDLES))
    for _ in range(NEEDLES):
        answer_text = " " + ", ".join(values[n] for n in order)
        stream = _replay(rng)
        ids, labels, starts, placed = weave(tokenizer, seq_len, stream, filler, head, needles, depths, question,
                                            encode(tokenizer, answer_text))
        found = sorted(range(NEEDLES), key=lambda n: starts[n])
        if found == order:
            break
        order = found
    else:
        raise PapaError("multivalue: the values' order did not settle")  # pragma: no cover - lengths are order-free
    first = order[0]
    return Example(ids, labels, placed, answer_text.strip(), (starts[first], starts[first] + len(needles[first])))


def _replay(rng):
    """A copy of `rng` in its current state: a draft drawn from it leaves `rng` where it was."""
    copy = random.Random()
    copy.setstate(rng.getstate())
    return copy


def _names(rng, count, letters):
    return _distinct(rng, lambda r: "".join(r.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(letters)), count)


def _chain(names, value):
    return [VT_FIRST.format(name=names[0], value=value)] + [
        VT_HOP.format(name=names[i], previous=names[i - 1]) for i in range(1, len(names))]


def vartrack_example(tokenizer, seq_len, rng, depth, filler):
    """A chain of HOPS + 1 five-letter names bound to one five-digit value, its first assignment at `depth` and the
    others at random depths after it; asked for every name, in chain order, after one worked example."""
    shot_names, shot_value = _names(rng, HOPS + 1, 3), number(rng)
    shot_lines = [line + " The grass is green." for line in _chain(shot_names, shot_value)]
    shot = (VT_HEAD + "".join(shot_lines) + VT_QUESTION.format(value=shot_value, count=HOPS + 1) + " "
            + " ".join(shot_names) + "\n\n")
    names, value = _names(rng, HOPS + 1, 5), number(rng)
    needles = [encode(tokenizer, line) for line in _chain(names, value)]
    later = sorted(depth + (1 - depth) * rng.random() for _ in range(HOPS))
    head = bos(tokenizer) + encode(tokenizer, shot + VT_HEAD)
    answer_text = " " + " ".join(names)
    ids, labels, starts, placed = weave(tokenizer, seq_len, rng, filler, head, needles, [depth, *later],
                                        encode(tokenizer, VT_QUESTION.format(value=value, count=HOPS + 1)),
                                        encode(tokenizer, answer_text))
    return Example(ids, labels, placed, answer_text.strip(), (starts[0], starts[0] + len(needles[0])))


WHOLE_WORD = re.compile(r"^(Ġ|▁)([a-z]{4,})$")  # a word-initial token of four lower-case letters or more


def list_words(tokenizer):
    """The words common_words draws from: the tokenizer's word-initial tokens of four lower-case letters or more (so
    each is a whole word, as RULER's are, not a piece of one), without the space marker, sorted."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return sorted({m.group(2) for m in (WHOLE_WORD.match(t or "") for t in tokens) if m})


def _numbered(tokenizer, words):
    """ " 1. w 2. w ..." as token ids, each item encoded alone (as it is in the list and in the answer)."""
    items = tokenizer([f" {i + 1}. {w}" for i, w in enumerate(words)], add_special_tokens=False)["input_ids"]
    return [t for item in items for t in item]


def _word_list(rng, common, rare, common_repeats, rare_repeats):
    listed = common * common_repeats + rare * rare_repeats
    rng.shuffle(listed)
    return listed


def common_words_example(tokenizer, seq_len, rng, depth, filler, vocabulary):
    """A numbered list of exactly the tokens left: COMMON words repeated, the others rarer; the first items cut to
    fit. The answer: the COMMON words, numbered, in the order they first appear in the list (its length does not
    depend on that order: each item is encoded alone)."""
    common_repeats, rare_repeats = (6, 1) if seq_len < 4096 else (30, 3)
    shot_repeats = (3, 1) if seq_len < 4096 else (10, 3)
    if len(vocabulary) < 2 * COMMON:
        raise PapaError(f"the tokenizer has only {len(vocabulary)} words for common_words: too few")
    shot = rng.sample(vocabulary, 2 * COMMON)
    shot_list = _word_list(rng, shot[:COMMON], shot[COMMON:], *shot_repeats)
    shot_common = list(dict.fromkeys(w for w in shot_list if w in shot[:COMMON]))
    head = bos(tokenizer) + encode(tokenizer, CWE_HEAD) + _numbered(tokenizer, shot_list) + encode(
        tokenizer, CWE_QUESTION) + _numbered(tokenizer, shot_common) + encode(tokenizer, "\n" + CWE_HEAD)
    common = rng.sample(vocabulary, COMMON)
    rest = [w for w in vocabulary if w not in common]
    rare = rng.sample(rest, len(rest))  # the rare words in the order they are taken
    question, answer_length = encode(tokenizer, CWE_QUESTION), len(_numbered(tokenizer, common))
    budget = seq_len - len(head) - len(question) - answer_length
    order = rng.random()  # the list's shuffle: one seed, whatever the number of rare words

    def numbered_list(count):
        listed = _word_list(random.Random(order), common, rare[:count], common_repeats, rare_repeats)
        texts = [f" {i + 1}. {w}" for i, w in enumerate(listed)]
        return listed, tokenizer(texts, add_special_tokens=False)["input_ids"]

    # a number of rare words whose list reaches the budget, by bisection (an item is two tokens or more)
    low, high = 0, min(len(rare), max(0, budget) // (2 * rare_repeats) + 1)
    listed, items = numbered_list(high)
    if sum(map(len, items)) < budget:
        raise PapaError(f"the tokenizer's {len(vocabulary)} words cannot fill {seq_len} tokens of common_words")
    while low < high:
        middle = (low + high) // 2
        if sum(map(len, numbered_list(middle)[1])) >= budget:
            high = middle
        else:
            low = middle + 1
    listed, items = numbered_list(high)
    cut, dropped = sum(map(len, items)) - budget, 0
    while cut >= len(items[dropped]):  # whole items first, then the first kept item's first tokens
        cut -= len(items[dropped])
        dropped += 1
    items[dropped] = items[dropped][cut:]
    kept = listed[dropped:]
    if min(kept.count(w) for w in common) <= rare_repeats:
        raise PapaError(f"--max_seq_length {seq_len} is too short for common_words: its ten words do not stand out")
    answer = _numbered(tokenizer, list(dict.fromkeys(w for w in kept if w in common)))
    question, answer = split_answer(tokenizer, question, answer)
    context = [t for item in items[dropped:] for t in item]
    ids = head + context + question
    labels = [IGNORE] * len(ids) + answer
    return Example(ids + answer, labels, None, " ".join(dict.fromkeys(w for w in kept if w in common)),
                   (len(head), len(head) + len(context)))
