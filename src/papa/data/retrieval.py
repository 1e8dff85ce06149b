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

Scoring (papa.families.lm_head): an example's key log-likelihood is the sum over the answer's tokens; it counts as
found (exact match) when greedy decoding from the prompt reproduces the answer's tokens, that is when every answer
token is the argmax given the tokens before it (teacher forcing: one forward, no decoding loop; tested against
`generate`).
"""

from dataclasses import dataclass
from functools import partial
from typing import Callable

from ..errors import PapaError
from . import ruler
from .needles import (FIXED_FILLER, IGNORE, Example, FillerStream, bos, encode, example_rng, number, weave,
                      word_tokens)

DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
SIZES = {"train": 64, "validation": 50}  # examples per split when --max_*_samples is not given
KEYS = 4  # passkey_multi: needles per example, one asked for
DOORS = ("red", "blue", "green", "yellow", "black", "white", "brown", "orange")

INTRO = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
         "I will quiz you about the important information there.")
NEEDLE = " The pass key is {key}. Remember it. {key} is the pass key."
QUESTION = " What is the pass key? The pass key is"
DOOR_NEEDLE = " The pass key of the {door} door is {key}. Remember it. {key} is the pass key of the {door} door."
DOOR_QUESTION = " What is the pass key of the {door} door? The pass key of the {door} door is"
ANSWER = " {key}"


def passkey_example(tokenizer, seq_len, rng, depth, filler, multi=False):
    """One passkey (or passkey_multi) example of exactly `seq_len` tokens, its needle at `depth`."""
    if multi:
        doors = rng.sample(DOORS, KEYS)
        keys = []
        while len(keys) < KEYS:  # distinct keys: a distractor never holds the asked one's digits
            key = number(rng)
            if key not in keys:
                keys.append(key)
        needles = [encode(tokenizer, DOOR_NEEDLE.format(door=d, key=k)) for d, k in zip(doors, keys)]
        question = encode(tokenizer, DOOR_QUESTION.format(door=doors[0]))
        others = [rng.random() for _ in range(KEYS - 1)]  # the distractors' depths
    else:
        keys = [number(rng)]
        needles = [encode(tokenizer, NEEDLE.format(key=keys[0]))]
        question, others = encode(tokenizer, QUESTION), []
    answer = encode(tokenizer, ANSWER.format(key=keys[0]))
    head = bos(tokenizer) + encode(tokenizer, INTRO)
    # each needle at the boundary nearest its depth; the asked one first, so a tie puts it before a distractor
    ids, labels, starts, placed = weave(tokenizer, seq_len, rng, filler, head, needles, [depth, *others], question,
                                        answer)
    return Example(ids, labels, placed, keys[0], (starts[0], starts[0] + len(needles[0])))


def copy_example(tokenizer, seq_len, rng, depth, filler, vocabulary):
    """[bos] (one more random token if T − |bos| is odd) r r, the second r labelled but for its first token (no
    filler, no depth)."""
    start = bos(tokenizer)
    half, odd = divmod(seq_len - len(start), 2)
    if half < 2:
        raise PapaError(f"--max_seq_length {seq_len} is too short for the copy task")
    extra = [rng.choice(vocabulary)] if odd else []
    r = [rng.choice(vocabulary) for _ in range(half)]
    ids = start + extra + r + r
    labels = [IGNORE] * (len(ids) - half + 1) + r[1:]
    first = len(start) + len(extra)
    return Example(ids, labels, None, "", (first, first + half))


@dataclass(frozen=True)
class RetrievalKind:
    """A generated task: how one example is made, and what shapes it."""

    name: str
    make: Callable  # (tokenizer, seq_len, rng, depth, filler, **vocabulary) → Example
    filler: bool = True  # hides its needles in --filler text, at --retrieval_depths
    vocabulary: Callable | None = None  # tokenizer → the words it draws (copy, common_words), made once per call
    target_before: int = 0  # lm-eval's target starts this many tokens before the first labelled one (copy: the
    # second copy's first token, which nothing predicts and so is not labelled)


KINDS = {k.name: k for k in (
    RetrievalKind("passkey", passkey_example),
    RetrievalKind("passkey_multi", partial(passkey_example, multi=True)),
    RetrievalKind("copy", copy_example, filler=False, vocabulary=word_tokens, target_before=1),
    RetrievalKind("multikey", ruler.multikey_example),
    RetrievalKind("multivalue", ruler.multivalue_example),
    RetrievalKind("vartrack", ruler.vartrack_example),
    RetrievalKind("common_words", ruler.common_words_example, filler=False, vocabulary=ruler.list_words),
)}


def retrieval_kind(name):
    """The registry's entry for `name`, or a PapaError listing them."""
    if name not in KINDS:
        raise PapaError(f"unknown retrieval task {name!r}; one of {', '.join(KINDS)}")
    return KINDS[name]


def make_examples(kind, tokenizer, seq_len, count, split, sentences=None, depths=DEPTHS, seed=0):
    """`count` examples of task `kind` for `split`, each exactly `seq_len` tokens; `sentences`: natural filler (None:
    the fixed filler). Deterministic for (kind, seed, split): example i is the same at every count."""
    entry = retrieval_kind(kind)
    if not depths or any(not 0 <= d <= 1 for d in depths):
        raise PapaError(f"depths are fractions of the filler in [0, 1]; got {list(depths)}")
    extra = {} if entry.vocabulary is None else {"vocabulary": entry.vocabulary(tokenizer)}
    filler = FillerStream(tokenizer, sentences) if entry.filler else None
    return [entry.make(tokenizer, seq_len, example_rng(kind, seed, split, i), depths[i % len(depths)], filler, **extra)
            for i in range(count)]


def as_columns(examples):
    """The examples as dataset columns: input_ids, attention_mask (all 1), labels, needle ([start, end)), and depth
    where it applies."""
    columns = {"input_ids": [e.input_ids for e in examples], "attention_mask": [[1] * len(e.input_ids) for e in examples],
               "labels": [e.labels for e in examples], "needle": [list(e.needle) for e in examples]}
    if examples and examples[0].depth is not None:
        columns["depth"] = [float(e.depth) for e in examples]
    return columns


FILLERS = ("fixed", "qnli", "mrpc")  # --filler: the fixed sentences, or QNLI's (Wikipedia) / MRPC's (news) in --data_dir


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
    if task.retrieval is not None and not retrieval_kind(task.retrieval).filler and (filler != "fixed" or depths):
        raise PapaError(f"the {task.retrieval} task has no filler and no key depth: drop --filler and "
                        "--retrieval_depths")
    if depths and any(not 0 <= d <= 1 for d in depths):
        raise PapaError(f"--retrieval_depths are fractions of the filler, 0 to 1; got {list(depths)}")
