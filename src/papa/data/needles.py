"""What every generated long-context task is made of (papa.data.retrieval, papa.data.ruler): an example's own random
stream, the tokenizer's pieces, filler of exactly the length wanted, and needles woven into it at sentence boundaries.

An example is exactly T tokens, nothing padded; only its answer is labelled (IGNORE elsewhere), so a decoder's LM loss
on it is the answer's negative log-likelihood and it runs wherever `lm` runs.
"""

import random
import re
from dataclasses import dataclass

from ..errors import PapaError

IGNORE = -100
WORD = re.compile(r"^(Ġ|▁)?[A-Za-z]{2,}$")  # the vocabulary's words and word pieces: no digits, marks or specials
FIXED_FILLER = (" The grass is green.", " The sky is blue.", " The sun is yellow.", " Here we go.",
                " There and back again.")


@dataclass(frozen=True)
class Example:
    input_ids: list
    labels: list  # -100 but at the answer's tokens
    depth: float | None  # where the asked needle starts, as a fraction of the filler (None: no filler)
    key: str  # what is asked for: the key, or the answer's text where there is no key
    needle: tuple  # [start, end): the tokens the answer is copied from (the asked needle; copy: the first copy)


def example_rng(kind, seed, split, index):
    """Example `index`'s own stream: the same key, depth and filler offset at every length T."""
    return random.Random(f"papa-{kind}/{seed}/{split}/{index}")  # str seeds: SHA-512, stable across processes


def encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def bos(tokenizer):
    """[bos] where the tokenizer adds one to a text (Gemma), else [] (SmolLM2), as an lm block starts."""
    ids = tokenizer("a")["input_ids"]
    return ids[:1] if tokenizer.bos_token_id is not None and ids[:1] == [tokenizer.bos_token_id] else []


def number(rng, digits=5):
    """A random number of `digits` digits, no leading 0, as text."""
    return str(rng.randrange(10 ** (digits - 1), 10 ** digits))


class FillerStream:
    """Filler sentences, tokenised once: fixed, or natural ones (each with a leading space, as in running text)."""

    def __init__(self, tokenizer, sentences=None):
        texts = FIXED_FILLER if sentences is None else [" " + s.strip() for s in sentences if s.strip()]
        if not texts:
            raise PapaError("the filler has no sentences")
        self.sentences = [ids for ids in (encode(tokenizer, t) for t in texts) if ids]
        self.natural = sentences is not None

    def take(self, rng, budget):
        """(tokens, boundaries): exactly `budget` filler tokens and the positions between whole sentences (0 and
        `budget` included). Natural filler starts at a random sentence; the first sentence loses its first tokens."""
        if budget == 0:
            return [], [0]
        start = rng.randrange(len(self.sentences)) if self.natural else 0
        chosen, total, i = [], 0, start
        while total < budget:
            chosen.append(self.sentences[i % len(self.sentences)])
            total += len(chosen[-1])
            i += 1
        chosen[0] = chosen[0][total - budget:]  # the excess, cut from the front
        tokens, boundaries = [], [0]
        for sentence in chosen:
            tokens += sentence
            boundaries.append(len(tokens))
        return tokens, sorted(set(boundaries))


def nearest(boundaries, position):
    return min(boundaries, key=lambda b: (abs(b - position), b))


def split_answer(tokenizer, question, answer):
    """(question, answer) token lists with a lone space token that starts the answer moved to the question: the prompt
    ends with it, as running text has it, and the answer is its digits or words alone."""
    if len(answer) > 1 and not tokenizer.decode(answer[:1]).strip():
        return question + answer[:1], answer[1:]
    return question, answer


def weave(tokenizer, seq_len, rng, filler, head, needles, depths, question, answer):
    """An example of exactly `seq_len` tokens: `head` (token ids), then `filler` with each of `needles` (token lists)
    at the sentence boundary nearest its depth (a fraction of the filler), then `question` and the labelled `answer`.
    Needles at one boundary keep their order. Returns (input_ids, labels, starts): each needle's start, in the order
    given, and the asked needle (the first) depth as placed."""
    question, answer = split_answer(tokenizer, question, answer)
    fixed = len(head) + sum(map(len, needles)) + len(question) + len(answer)
    budget = seq_len - fixed
    if budget < 0:
        raise PapaError(f"--max_seq_length {seq_len} is too short for this task: its prompt without filler is "
                        f"{fixed} tokens")
    tokens, boundaries = filler.take(rng, budget)
    places = sorted((nearest(boundaries, d * budget), n) for n, d in enumerate(depths))
    ids, last, starts = list(head), 0, [0] * len(needles)
    for place, n in places:
        ids += tokens[last:place]
        starts[n] = len(ids)
        ids += needles[n]
        last = place
    ids += tokens[last:] + question
    labels = [IGNORE] * len(ids) + answer
    ids += answer
    asked = next(place for place, n in places if n == 0)
    return ids, labels, starts, asked / budget if budget else depths[0]


def word_tokens(tokenizer):
    """The ids copy draws from: the vocabulary's word tokens (letters only, specials excluded), ascending."""
    special = set(tokenizer.all_special_ids)
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    ids = [i for i, t in enumerate(tokens) if t is not None and i not in special and WORD.match(t)]
    if len(ids) < 16:
        raise PapaError(f"the tokenizer has only {len(ids)} word tokens: too few for the copy task")
    return ids
