"""A tiny PAPA decoder for the lm-eval tests: a random Llama (3 layers x 4 query heads on 2 K/V heads) saved with
a byte-level tokenizer (lm_fixtures), random positive constants avgs.pt of length T and a seeded ranking; and
the independent reference: log-likelihoods and greedy tokens read directly off the patched model's logits, one
request at a time, right-padded to T."""

import importlib.util
import json

import pytest
import torch
import transformers

import papa
from lm_fixtures import save_tiny_lm
from papa.sweep.controls import random_order

T = 16
LAYERS, HEADS = 3, 4
needs_lm_eval = pytest.mark.skipif(importlib.util.find_spec("lm_eval") is None,
                                   reason="lm-eval is not installed (pip install -e '.[lm-eval]')")


def save_papa_files(folder, seed=0):
    """(model folder, avgs folder, ranking folder) under `folder`."""
    model = save_tiny_lm("llama", folder / "model", seed=seed)
    g = torch.Generator().manual_seed(seed)
    avgs = torch.rand(LAYERS, HEADS, T, T, generator=g) + 0.05  # (L, H, T, T); the band is applied by patch_model
    (folder / "avgs").mkdir()
    torch.save(avgs, folder / "avgs" / "avgs.pt")
    (folder / "sort").mkdir()
    (folder / "sort" / "sorted_heads.json").write_text(json.dumps(random_order(LAYERS, HEADS, seed)))
    return model, str(folder / "avgs"), str(folder / "sort")


def reference_model(model_folder, avgs_folder, sort_folder, k):
    """The patched model built by hand: papa.patch_model with the first k heads of the ranking."""
    model = transformers.AutoModelForCausalLM.from_pretrained(model_folder)
    if k:
        rows = json.loads(open(f"{sort_folder}/sorted_heads.json").read())[:k]
        papa.patch_model(model, torch.load(f"{avgs_folder}/avgs.pt"), static_heads=rows)
    return model.eval()


def tokenizer_of(model_folder):
    tok = transformers.AutoTokenizer.from_pretrained(model_folder)
    tok.pad_token = tok.pad_token or tok.eos_token
    return tok


@torch.no_grad()
def logits_alone(model, ids, pad_id):
    """Logits (len(ids), V) of one unpadded row, right-padded to T (a row at its real positions)."""
    padded = torch.full((1, T), pad_id, dtype=torch.long)
    padded[0, :len(ids)] = torch.tensor(ids)
    mask = torch.zeros_like(padded)
    mask[0, :len(ids)] = 1
    return model(input_ids=padded, attention_mask=mask, use_cache=False).logits[0, :len(ids)]


def loglikelihood(model, tok, context, continuation):
    """(log p(continuation | context), greedy?) as lm-eval defines it: the pair tokenised as one text, the
    continuation's tokens those after the context's; cut to the last T + 1 tokens."""
    whole = tok(context + continuation, add_special_tokens=False)["input_ids"]
    n_context = len(tok(context, add_special_tokens=False)["input_ids"])
    n_cont = len(whole) - n_context
    ids = whole[-(T + 1):]
    logits = logits_alone(model, ids[:-1], tok.pad_token_id).log_softmax(-1)  # (len - 1, V)
    targets = torch.tensor(ids[-n_cont:])
    scored = logits[-n_cont:]
    return float(scored[torch.arange(n_cont), targets].sum()), bool((scored.argmax(-1) == targets).all())


def greedy(model, tok, prompt, steps):
    """`steps` greedy tokens after `prompt` (cut to its last T − steps tokens, as lm-eval cuts a generation prompt),
    each from a forward of the row alone at its real positions."""
    ids = tok(prompt, add_special_tokens=False)["input_ids"][-(T - steps):]
    new = []
    for _ in range(steps):
        if len(ids) + len(new) >= T:
            break
        token = int(logits_alone(model, ids + new, tok.pad_token_id)[-1].argmax())
        new.append(token)
        if token == tok.eos_token_id:
            break
    return new
