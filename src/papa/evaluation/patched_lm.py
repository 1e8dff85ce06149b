"""A PAPA-patched causal LM for lm-eval, and the forwards that keep its position-indexed constants aligned.

A constant head's matrix C is indexed by position: row i is what the token at position i attends to. The patched
layers therefore take inputs of exactly the constants' length T, and a token must sit at its real position. Here:

- `aligned_logits`: rows right-padded (as lm-eval's log-likelihood batches are) are padded on to T, so every
  token keeps its position; a causal model's logits at the real tokens do not depend on what follows them, so
  the padding changes nothing there.
- `greedy_generate`: lm-eval pads generation batches on the *left*, which would move every token of a shorter
  prompt to a later position and read the wrong rows of C. The padding is stripped, each row is generated from
  position 0, right-padded to T, one full forward per new token (patched decoders keep no key/value cache,
  papa/families/causal.py), until T tokens, a stop token or the budget.

Inputs longer than T are not refused here: lm-eval cuts a request to its last T tokens itself (HFLM with
max_length = T), the context window of a model whose attention is defined on T positions.
"""

import torch
from transformers import AutoConfig, AutoTokenizer

from ..errors import PapaError
from ..method.attention import load_constant_matrices
from ..method.ranking import first_k_heads, load_sorted_heads
from ..models.bundled import local_model_path
from ..models.modeling import build_model
from ..models.pretrained import check_lm_model, fit_tokenizer


def replaced_seq_len(model):
    """T of the model's replaced heads' constants (the length its inputs must have), or None when no head is
    replaced (a stock or k = 0 model takes any length)."""
    for module in model.modules():
        if getattr(module, "papa_seq_len", None) is not None and (module.static_heads or module.mix_all_heads):
            return module.papa_seq_len
    return None


def load_patched_lm(pretrained, static_heads_dir=None, sorting_heads_dir=None, static_heads_num=0, max_length=None):
    """(model, tokenizer, T): the causal LM `pretrained` (a folder, a .gguf file or a bundled name such as
    `smollm2`) with the first `static_heads_num` heads of `sorting_heads_dir`/sorted_heads.json made constant
    (their averages from `static_heads_dir`/avgs.pt), in eval mode; its tokenizer pads on the right.

    T, the context window lm-eval is given, is the constants' length whenever avgs.pt is given (also at k = 0, so
    that every k reads the same, equally cut requests); else `max_length` (None: the model's own)."""
    path = local_model_path(pretrained)
    config = AutoConfig.from_pretrained(path)
    check_lm_model(config, path)
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    k = int(static_heads_num)
    if k and not (static_heads_dir and sorting_heads_dir):
        raise PapaError(f"static_heads_num={k} needs static_heads_dir (the folder of avgs.pt) and sorting_heads_dir "
                        "(the folder of sorted_heads.json)")
    constants = static = None
    if static_heads_dir:
        constants = load_constant_matrices(static_heads_dir, layers, heads, getattr(config, "num_key_value_heads", None))
        T = int(constants.shape[-1])
        if max_length is not None and int(max_length) != T:
            raise PapaError(f"max_length={max_length}, but the constants in {static_heads_dir} are {T}x{T}: a PAPA "
                            f"model's context window is their T; leave max_length out (or give {T})")
        static = first_k_heads(load_sorted_heads(sorting_heads_dir, layers, heads), k, layers, heads) if k else {}
    else:
        T = None if max_length is None else int(max_length)
    tokenizer = AutoTokenizer.from_pretrained(path)
    fit_tokenizer(tokenizer, config, True, path)
    model = build_model("AutoModelForCausalLM", config, path, constants if k else None, static)
    return model.eval(), tokenizer, T


def aligned_logits(model, input_ids, seq_len, pad_id):
    """Logits (B, L, V) of right-padded rows `input_ids` (B, L), computed by one forward at exactly `seq_len`
    (the rows padded on to T with `pad_id`, masked out); L > T is a PapaError."""
    B, L = input_ids.shape
    if L > seq_len:
        raise PapaError(f"a request of {L} tokens reached a PAPA model whose constants are {seq_len} long: cut "
                        f"requests to {seq_len} tokens (lm-eval does, given max_length={seq_len})")
    ids = input_ids.new_full((B, seq_len), pad_id)
    ids[:, :L] = input_ids
    mask = torch.zeros_like(ids)
    mask[:, :L] = 1
    return model(input_ids=ids, attention_mask=mask, use_cache=False).logits[:, :L]  # (B, L, V)


def strip_left_padding(context, attention_mask):
    """The rows of a left-padded batch (B, L) without their padding: a list of B token-id lists."""
    return [row[mask.bool()].tolist() for row, mask in zip(context, attention_mask)]


@torch.no_grad()
def greedy_generate(model, rows, seq_len, pad_id, max_new_tokens, stop=lambda row, new: False):
    """Greedy continuations of the token-id lists `rows`, each computed from position 0 (never left-padded):
    a list of new-token lists. A row stops after `max_new_tokens`, at `seq_len` tokens in all, or once
    `stop(row index, its new tokens)` says so. Each step is one forward of the unfinished rows right-padded
    to `seq_len` (without a key/value cache)."""
    device = next(model.parameters()).device
    new = [[] for _ in rows]
    active = [i for i, row in enumerate(rows) if len(row) < seq_len and max_new_tokens > 0]
    while active:
        current = [rows[i] + new[i] for i in active]
        ids = torch.full((len(active), seq_len), pad_id, dtype=torch.long, device=device)
        mask = torch.zeros_like(ids)
        for b, row in enumerate(current):
            ids[b, :len(row)] = torch.tensor(row, dtype=torch.long, device=device)
            mask[b, :len(row)] = 1
        logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits  # (B, T, V)
        last = torch.tensor([len(row) - 1 for row in current], device=device)
        chosen = logits[torch.arange(len(active), device=device), last].argmax(-1).tolist()  # (B,)
        for i, token in zip(active, chosen):
            new[i].append(token)
        active = [i for i in active if len(new[i]) < max_new_tokens and len(rows[i]) + len(new[i]) < seq_len
                  and not stop(i, new[i])]
    return new
