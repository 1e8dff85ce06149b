"""Has a causal LM learned real attention? Previous-token heads, induction heads, and in-context copying.

    python benchmarks/decoder_heads.py outputs/decoder_small [--data_dir ../shared/data]

Three measurements on a saved causal LM (eager attention, so the probabilities are returned):
- previous-token score of each head: its mean attention from position i to i − 1 (on natural text when given,
  else on random tokens); a head that only did that scores 1;
- induction score of each head: on sequences [eos] r r (r = n random tokens, repeated once), the mean attention
  from a token of the second copy to the token *after* its earlier occurrence (what an induction head copies);
- loss on those sequences, per token: the first copy (unpredictable, about ln V or more) against the second
  (predictable only by looking back: far lower when the model copies in context); with text given, the same on
  [eos] t t, t the first n tokens of each held-out chunk (in-distribution text, repeated).
Chance for both scores is what causal uniform attention gives, the mean of 1/(i + 1) over the queries scored.
"""

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer

from papa.data.conll import read_conll
from papa.data.glue import read_glue_tsv
from papa.data.tasks import get_task

GLUE_TASKS = ("cola", "sst2", "mrpc", "wnli")  # those with a train.tsv in the shared data


# the text helpers, shared with train_decoder.py (which imports this module, never the other way)


def read_sentences(data_dir, split):
    """Every sentence of the shared GLUE tasks and CoNLL-2003 for `split` ("train" or "dev"), in file order."""
    sentences = []
    for name in GLUE_TASKS:
        task = get_task(name)
        path = Path(data_dir) / "glue" / task.glue_folder / f"{split}.tsv"
        columns = read_glue_tsv(path, name)
        for row in zip(*(columns[c] for c in task.text_columns)):
            sentences.extend(text.strip() for text in row)
    conll = Path(data_dir) / "conll2003" / ("train.txt" if split == "train" else "valid.txt")
    sentences.extend(" ".join(words) for words in read_conll(conll, 3)[0])
    return [s for s in sentences if s]


def chunks(tokenizer, sentences, seq_len):
    """(N, seq_len) token ids: the sentences, each followed by eos, concatenated and cut (the remainder dropped)."""
    ids = []
    for encoded in tokenizer(sentences, add_special_tokens=False)["input_ids"]:
        ids.extend(encoded + [tokenizer.eos_token_id])
    usable = len(ids) // seq_len * seq_len
    return torch.tensor(ids[:usable]).view(-1, seq_len)


def repeated_random_tokens(vocab_size, eos_id, n, batch, seed=0):
    """(batch, 1 + 2n) ids [eos] r r, r drawn uniformly from the vocabulary without eos."""
    generator = torch.Generator().manual_seed(seed)
    r = torch.randint(0, vocab_size - 1, (batch, n), generator=generator)
    r = r + (r >= eos_id).long()  # skip the eos id
    return torch.cat([torch.full((batch, 1), eos_id), r, r], dim=1)


def copy_losses(logits, ids, n):
    """(first, second): mean next-token loss on the tokens of the first copy (positions 1..n) and of the second
    copy after its first token (positions n + 2 .. 2n, each predictable from the first copy)."""
    losses = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="none")
    losses = losses.view(ids.shape[0], -1)  # (B, T − 1): column t predicts position t + 1
    return losses[:, 0:n].mean().item(), losses[:, n + 1:2 * n].mean().item()


def previous_token_scores(attentions):
    """(L, H): each head's mean attention from position i to i − 1, over i ≥ 1 and the batch."""
    scores = []
    for layer in attentions:  # (B, H, T, T)
        T = layer.shape[-1]
        i = torch.arange(1, T)
        scores.append(layer[:, :, i, i - 1].mean(dim=(0, 2)))  # (H,)
    return torch.stack(scores)


def induction_scores(attentions, n):
    """(L, H): on [eos] r r, each head's mean attention from position 1 + n + j (r_j, second copy) to
    position 2 + j (the token after r_j's first occurrence), over j = 0 .. n − 1 and the batch."""
    j = torch.arange(n)
    return torch.stack([layer[:, :, 1 + n + j, 2 + j].mean(dim=(0, 2)) for layer in attentions])


def causal_chance(query_positions):
    """What causal uniform attention gives a score: the mean of 1/(q + 1) over the queries scored."""
    return (1.0 / (torch.as_tensor(query_positions, dtype=torch.float64) + 1)).mean().item()


@torch.no_grad()
def check_heads(model_dir, text_ids=None, n=50, batch=16, seed=0, previous_threshold=0.5, induction_threshold=0.3):
    """The markdown report of the three measurements (module docstring) for the causal LM saved in `model_dir`;
    `text_ids` (B, T) natural text for the previous-token scores."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids = repeated_random_tokens(model.config.vocab_size, tokenizer.eos_token_id, n, batch, seed)
    output = model(input_ids=ids, output_attentions=True)
    first, second = copy_losses(output.logits, ids, n)
    induction = induction_scores(output.attentions, n)
    rows = [("random tokens", first, second)]
    if text_ids is None:
        text_ids, where = ids[:, :n + 1], "the first copy of the random sequences"
    else:
        where = f"{text_ids.shape[0]} held-out text chunks of {text_ids.shape[1]} tokens"
        eos = torch.full((text_ids.shape[0], 1), tokenizer.eos_token_id)
        text = torch.cat([eos, text_ids[:, :n], text_ids[:, :n]], dim=1)  # [eos] t t: real text repeated
        rows.append((f"held-out text (first {n} tokens of each chunk)", *copy_losses(model(input_ids=text).logits, text, n)))
    previous = previous_token_scores(model(input_ids=text_ids, output_attentions=True).attentions)
    L, H = previous.shape
    lines = [
        f"Model `{model_dir}`: {L} layers x {H} query heads ({model.config.num_key_value_heads} K/V heads), "
        f"vocabulary {model.config.vocab_size} (ln V = {torch.log(torch.tensor(float(model.config.vocab_size))):.2f}).",
        "",
        f"A span repeated once ([eos] r r, |r| = {n}; random tokens: {batch} sequences, seed {seed}), next-token "
        f"loss per token on the first copy (positions 1..{n}) and on the second (positions {n + 2}..{2 * n}):",
        "",
        "| span | first copy (nats) | second copy (nats) |",
        "|---|---|---|",
        *(f"| {name} | {a:.3f} | {b:.3f} |" for name, a, b in rows),
        "",
        f"Per head: previous-token score on {where} (chance "
        f"{causal_chance(range(1, text_ids.shape[1])):.3f}); induction score on the second copies (chance "
        f"{causal_chance(range(1 + n, 1 + 2 * n)):.3f}). Kind: previous-token when ≥ {previous_threshold}, "
        f"induction when ≥ {induction_threshold}.",
        "",
        "| layer | head | previous-token | induction | kind |",
        "|---|---|---|---|---|",
    ]
    for layer in range(L):
        for head in range(H):
            p, i = previous[layer, head].item(), induction[layer, head].item()
            kind = ", ".join(k for k, hit in (("previous-token", p >= previous_threshold),
                                              ("induction", i >= induction_threshold)) if hit)
            lines.append(f"| {layer} | {head} | {p:.3f} | {i:.3f} | {kind} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model_dir", help="a saved causal LM with its tokenizer (e.g. train_decoder.py's output)")
    p.add_argument("--data_dir", default=None,
                   help="shared data folder: previous-token scores on its dev text (default: on random tokens)")
    p.add_argument("--span", type=int, default=50, help="n: tokens in the repeated random span")
    p.add_argument("--batch", type=int, default=16, help="random sequences (and text chunks)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random spans")
    args = p.parse_args(argv)
    text_ids = None
    if args.data_dir:
        tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
        text_ids = chunks(tokenizer, read_sentences(args.data_dir, "dev"), 128)[:args.batch]
    print(check_heads(args.model_dir, text_ids, args.span, args.batch, args.seed))


if __name__ == "__main__":
    main()
