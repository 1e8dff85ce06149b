"""Tiny random decoders saved with a tokenizer, and small text files, for the language-modelling task (lm).

The tokenizer is a byte-level BPE trained here on the same words as the text (GPT-2's kind: no pad token,
one `<|endoftext|>` token as BOS and EOS), so the folder is what a hub decoder checkpoint looks like.
"""

import random

import torch
import transformers

from tiny_decoders import decoder_class_name, tiny_decoder_config

EOS = "<|endoftext|>"


def words():
    from papa.data.synthetic import NOUNS

    return list(NOUNS) + "the a of and in to is was for on with as by at from".split()


def documents(count, seed=0):
    """`count` one-line documents of 3 to 12 words, seeded."""
    rng = random.Random(seed)
    vocabulary = words()
    return [" ".join(rng.choice(vocabulary) for _ in range(rng.randint(3, 12))) for _ in range(count)]


def write_text(path, count, seed=0):
    """A plain text file of `count` documents, one per line; returns its path as a string."""
    path.write_text("".join(line + "\n" for line in documents(count, seed)), encoding="utf-8")
    return str(path)


def make_tokenizer():
    """A byte-level BPE tokenizer without a pad token (as GPT-2's), trained on `words()`."""
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([" ".join(words())] * 5, vocab_size=320, min_frequency=1, special_tokens=[EOS],
                            show_progress=False)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token=EOS, eos_token=EOS,
                                                unk_token=EOS)


def save_tiny_lm(name, folder, seed=0, impl="eager"):
    """A tiny random causal LM of decoder family `name` (tests/tiny_decoders.py) and its tokenizer in `folder`."""
    tokenizer = make_tokenizer()
    config = tiny_decoder_config(name, impl, vocab_size=len(tokenizer))
    config.pad_token_id = None
    config.initializer_range = 0.3  # weights large enough that attention changes the predictions visibly
    config.bos_token_id = config.eos_token_id = tokenizer.eos_token_id
    torch.manual_seed(seed)
    model = getattr(transformers, decoder_class_name(name, "causal"))(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def scored_and_generated(model, example, pad_token_id):
    """(answer tokens found by papa's teacher-forced score, what greedy `generate` continues the prompt with, the
    answer) for one retrieval example (papa.data.retrieval): the two must agree on whether the answer is found."""
    from papa.families.lm_head import example_scores

    answer = [y for y in example.labels if y != -100]
    ids = torch.tensor([example.input_ids])
    with torch.no_grad():
        scores = example_scores(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                                torch.tensor([example.labels]))
        prompt = ids[:, :-len(answer)]
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=len(answer),
                             do_sample=False, pad_token_id=pad_token_id)
    return int(scores[0, 2]), out[0, prompt.shape[1]:].tolist(), answer
