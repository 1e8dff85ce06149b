"""Long-context retrieval tasks, generated offline for any length T: which heads a long context cannot do without.

Every example is exactly T tokens, nothing padded, and only the answer's tokens are labelled (the rest -100), so a
decoder's LM loss on it is the answer's negative log-likelihood and the task runs wherever `lm` runs (the scripts,
the sweep, every ranker):

    passkey        [bos] intro · filler · needle · filler · question · answer
                   needle   " The pass key is 71432. Remember it. 71432 is the pass key."
                   question " What is the pass key? The pass key is"      answer " 71432" (its digits, where the
                   tokenizer writes the space as a token of its own: the prompt ends with it, as the text runs)
                   (the prompt of Mohtashami & Jaggi 2023, landmark attention, as long-context tools use it)
    passkey_multi  the same with KEYS needles, each a door's ("The pass key of the red door is ..."), one asked for:
                   the others are distractors a head must not copy
    copy           [bos] r · r, r uniformly random word tokens of the vocabulary: the loss on the second copy (its
                   first token, which nothing predicts, unlabelled) needs copying across T/2 tokens (induction heads)

Filler (`filler`): "fixed", the repeated sentences of that prompt ("The grass is green. The sky is blue. ..."), or
natural sentences: a list of sentences (papa.data.lm.glue_sentences: QNLI's Wikipedia, MRPC's news), consecutive
from an offset drawn per example. Needles sit between whole sentences; to make exactly T tokens the filler's first
sentence loses its first tokens.

Depth: the needle (the asked one) starts at the sentence boundary nearest depth × the filler's length (0: right
after the intro, 1: right before the question); example i takes `depths[i % len(depths)]`, so a split of n · len(depths)
examples has n at each depth, and records the depth it got. Each example is drawn from its own random stream,
seeded by the task, the seed, the split and its index, not by T: example i has the same key, depth and filler
offset at every length, so a length × depth grid compares like with like.

Scoring (papa.models.lm_head): an example's key log-likelihood is the sum over the answer's tokens; it counts as
found (exact match) when greedy decoding from the prompt reproduces the answer's tokens, that is when every answer
token is the argmax given the tokens before it (teacher forcing: one forward, no decoding loop; tested against
`generate`).
"""

import random
import re
from dataclasses import dataclass

from ..errors import PapaError

KINDS = ("passkey", "passkey_multi", "copy")
DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
SIZES = {"train": 64, "validation": 50}  # examples per split when --max_*_samples is not given
KEYS = 4  # passkey_multi: needles per example, one asked for
DOORS = ("red", "blue", "green", "yellow", "black", "white", "brown", "orange")

INTRO = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
         "I will quiz you about the important information there.")
FIXED_FILLER = (" The grass is green.", " The sky is blue.", " The sun is yellow.", " Here we go.",
                " There and back again.")
NEEDLE = " The pass key is {key}. Remember it. {key} is the pass key."
QUESTION = " What is the pass key? The pass key is"
DOOR_NEEDLE = " The pass key of the {door} door is {key}. Remember it. {key} is the pass key of the {door} door."
DOOR_QUESTION = " What is the pass key of the {door} door? The pass key of the {door} door is"
ANSWER = " {key}"
WORD = re.compile(r"^(Ġ|▁)?[A-Za-z]{2,}$")  # copy's tokens: words and word pieces, no digits, marks or specials

IGNORE = -100


@dataclass(frozen=True)
class Example:
    input_ids: list
    labels: list  # -100 but at the answer's tokens
    depth: float | None  # where the asked needle starts, as a fraction of the filler (None: copy)
    key: str
    needle: tuple  # [start, end): the tokens the answer is copied from (the asked needle; copy: the first copy)


def check_kind(kind):
    if kind not in KINDS:
        raise PapaError(f"unknown retrieval task {kind!r}; one of {', '.join(KINDS)}")


def example_rng(kind, seed, split, index):
    """Example `index`'s own stream: the same key, depth and filler offset at every length T."""
    return random.Random(f"papa-{kind}/{seed}/{split}/{index}")  # str seeds: SHA-512, stable across processes


def _encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _bos(tokenizer):
    """[bos] where the tokenizer adds one to a text (Gemma), else [] (SmolLM2), as an lm block starts."""
    ids = tokenizer("a")["input_ids"]
    return ids[:1] if tokenizer.bos_token_id is not None and ids[:1] == [tokenizer.bos_token_id] else []


class FillerStream:
    """Filler sentences, tokenised once: fixed, or natural ones (each with a leading space, as in running text)."""

    def __init__(self, tokenizer, sentences=None):
        texts = FIXED_FILLER if sentences is None else [" " + s.strip() for s in sentences if s.strip()]
        if not texts:
            raise PapaError("the filler has no sentences")
        self.sentences = [ids for ids in (_encode(tokenizer, t) for t in texts) if ids]
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


def _nearest(boundaries, position):
    return min(boundaries, key=lambda b: (abs(b - position), b))


def _key(rng):
    return str(rng.randrange(10_000, 100_000))  # five digits, no leading 0


def passkey_example(tokenizer, seq_len, rng, depth, filler, multi=False):
    """One passkey (or passkey_multi) example of exactly `seq_len` tokens, its needle at `depth`."""
    bos, intro = _bos(tokenizer), _encode(tokenizer, INTRO)
    if multi:
        doors = rng.sample(DOORS, KEYS)
        keys = []
        while len(keys) < KEYS:  # distinct keys: a distractor never holds the asked one's digits
            key = _key(rng)
            if key not in keys:
                keys.append(key)
        needles = [_encode(tokenizer, DOOR_NEEDLE.format(door=d, key=k)) for d, k in zip(doors, keys)]
        question = _encode(tokenizer, DOOR_QUESTION.format(door=doors[0]))
        others = [rng.random() for _ in range(KEYS - 1)]  # the distractors' depths
    else:
        keys = [_key(rng)]
        needles = [_encode(tokenizer, NEEDLE.format(key=keys[0]))]
        question, others = _encode(tokenizer, QUESTION), []
    answer = _encode(tokenizer, ANSWER.format(key=keys[0]))
    if len(answer) > 1 and not tokenizer.decode(answer[:1]).strip():  # a lone space token before the digits
        question, answer = question + answer[:1], answer[1:]  # ends the prompt, as running text has it: the digits
    fixed = len(bos) + len(intro) + sum(map(len, needles)) + len(question) + len(answer)
    budget = seq_len - fixed
    if budget < 0:
        raise PapaError(f"--max_seq_length {seq_len} is too short for this task: its prompt without filler is "
                        f"{fixed} tokens")
    tokens, boundaries = filler.take(rng, budget)
    # each needle at the boundary nearest its depth; the asked one first, so a tie puts it before a distractor
    places = [(_nearest(boundaries, d * budget), n) for n, d in enumerate([depth, *others])]
    ids, last = list(bos) + intro, 0
    for place, n in sorted(places):
        ids += tokens[last:place]
        if n == 0:
            span = (len(ids), len(ids) + len(needles[0]))
        ids += needles[n]
        last = place
    ids += tokens[last:] + question
    prompt_length = len(ids)
    ids += answer
    labels = [IGNORE] * prompt_length + answer
    asked = next(place for place, n in places if n == 0)
    return Example(ids, labels, asked / budget if budget else depth, keys[0], span)


def word_tokens(tokenizer):
    """The ids copy draws from: the vocabulary's word tokens (letters only, specials excluded), ascending."""
    special = set(tokenizer.all_special_ids)
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    ids = [i for i, t in enumerate(tokens) if t is not None and i not in special and WORD.match(t)]
    if len(ids) < 16:
        raise PapaError(f"the tokenizer has only {len(ids)} word tokens: too few for the copy task")
    return ids


def copy_example(tokenizer, seq_len, rng, vocabulary):
    """[bos] (one more random token if T − |bos| is odd) r r, the second r labelled but for its first token."""
    bos = _bos(tokenizer)
    half, odd = divmod(seq_len - len(bos), 2)
    if half < 2:
        raise PapaError(f"--max_seq_length {seq_len} is too short for the copy task")
    extra = [rng.choice(vocabulary)] if odd else []
    r = [rng.choice(vocabulary) for _ in range(half)]
    ids = bos + extra + r + r
    labels = [IGNORE] * (len(ids) - half + 1) + r[1:]
    first = len(bos) + len(extra)
    return Example(ids, labels, None, "", (first, first + half))


def make_examples(kind, tokenizer, seq_len, count, split, sentences=None, depths=DEPTHS, seed=0):
    """`count` examples of task `kind` for `split`, each exactly `seq_len` tokens; `sentences`: natural filler (None:
    the fixed filler). Deterministic for (kind, seed, split): example i is the same at every count."""
    check_kind(kind)
    if not depths or any(not 0 <= d <= 1 for d in depths):
        raise PapaError(f"depths are fractions of the filler in [0, 1]; got {list(depths)}")
    if kind == "copy":
        vocabulary = word_tokens(tokenizer)
        return [copy_example(tokenizer, seq_len, example_rng(kind, seed, split, i), vocabulary) for i in range(count)]
    filler = FillerStream(tokenizer, sentences)
    return [passkey_example(tokenizer, seq_len, example_rng(kind, seed, split, i), depths[i % len(depths)], filler,
                            multi=kind == "passkey_multi") for i in range(count)]


def as_columns(examples):
    """The examples as dataset columns: input_ids, attention_mask (all 1), labels, needle ([start, end)), and depth
    where it applies."""
    columns = {"input_ids": [e.input_ids for e in examples], "attention_mask": [[1] * len(e.input_ids) for e in examples],
               "labels": [e.labels for e in examples], "needle": [list(e.needle) for e in examples]}
    if examples and examples[0].depth is not None:
        columns["depth"] = [float(e.depth) for e in examples]
    return columns


FILLERS = ("fixed", "qnli", "mrpc")  # --filler: the fixed sentences, or QNLI's (Wikipedia) / MRPC's (news) in --data_dir
# the flags' help, shared by the scripts and the sweep
FILLER_HELP = ("The retrieval tasks (passkey, passkey_multi): the text the key hides in: fixed (the same few sentences "
               "repeated, as in the landmark-attention pass-key test), or qnli / mrpc (natural sentences of GLUE's QNLI "
               "(Wikipedia) / MRPC (news) TSVs in --data_dir).")
DEPTHS_HELP = ("The retrieval tasks: the depths (fractions of the filler before the key, 0 to 1) the examples cycle "
               "through, example i at the (i mod n)-th (default: 0 0.25 0.5 0.75 1).")


def filler_sentences(filler, data_dir, splits):
    """{split: the natural filler's sentences, or None for the fixed filler}: each split's own sentences of the GLUE
    folder (papa.data.lm.glue_sentences: the training and held-out text never share a sentence)."""
    if filler not in FILLERS:
        raise PapaError(f"--filler must be one of {', '.join(FILLERS)}; got {filler!r}")
    if filler == "fixed":
        return {split: None for split in splits}
    if data_dir is None:
        raise PapaError(f"--filler {filler} reads the sentences of GLUE's {filler.upper()} TSVs: pass --data_dir (that "
                        "folder, or a root holding it, e.g. ../shared/data), or use --filler fixed")
    from .lm import glue_sentences
    from .tasks import get_task

    sentences = glue_sentences(get_task(f"lm_{filler}"), data_dir)
    return {split: sentences[split] for split in splits}


def retrieval_datasets(task, sources, tokenizer, seq_len, limits, depths=None):
    """DatasetDict of the retrieval task's splits (`sources`: filler_sentences' dict), `limits[split]` examples each
    (None: SIZES), every example `seq_len` tokens."""
    import datasets

    out = {}
    for split, sentences in sources.items():
        count = limits.get(split) or SIZES[split]
        examples = make_examples(task.retrieval, tokenizer, seq_len, count, split, sentences, depths or DEPTHS)
        out[split] = datasets.Dataset.from_dict(as_columns(examples))
    return datasets.DatasetDict(out)


def check_retrieval_flags(task, filler, depths):
    """--filler and --retrieval_depths shape the retrieval tasks' data; on another task they would be ignored."""
    if task.retrieval is None and (filler != "fixed" or depths):
        flag = "--filler" if filler != "fixed" else "--retrieval_depths"
        raise PapaError(f"{flag} shapes the retrieval tasks' data ({', '.join(KINDS)}), not {task.name}'s: drop it")
    if task.retrieval == "copy" and (filler != "fixed" or depths):
        raise PapaError("the copy task has no filler and no key depth: drop --filler and --retrieval_depths")
    if depths and any(not 0 <= d <= 1 for d in depths):
        raise PapaError(f"--retrieval_depths are fractions of the filler, 0 to 1; got {list(depths)}")
