"""A decoder's LM head on the positions that are scored, a chunk at a time: scores without (B, T, V) logits.

At T = 8 192 SmolLM2's logits are 8 192 × 49 152 floats (1.6 GB) per sequence and Gemma-3's, with a 262 144-token
vocabulary, 8.6 GB, before their log-softmax. An evaluation needs, per scored position, only its negative
log-likelihood and whether the argmax is the target: so the decoder body runs once (`final_hidden`), and the head
runs on the scored positions alone (a retrieval task's answer: a few; plain text: all), at most `chunk_bytes` of
float64 logits at a time.

The head is the model's own (`output_logits`): its output embeddings and what the family applies after them
(Gemma 2/3's final soft-capping, Granite's logits scaling), tested equal to the model's own logits for every
decoder family (tests/test_retrieval.py).
"""

import torch
import torch.nn.functional as F

IGNORE = -100
CHUNK_BYTES = 1 << 26  # float64 logits held at once: 64 MB (Gemma-3: 32 positions of its 262 144 words)


def final_hidden(model, inputs):
    """(B, T, D): the decoder body's last hidden states (the final norm applied), what the LM head reads."""
    inputs = {k: v for k, v in inputs.items() if k != "labels"}
    return model.base_model(**inputs).last_hidden_state


def output_logits(model, hidden):
    """The model's logits of hidden states (..., D): its output embeddings, then its family's final transform."""
    logits = model.get_output_embeddings()(hidden)
    config = model.config
    cap = getattr(config, "final_logit_softcapping", None)
    if cap:  # Gemma 2, Gemma 3
        logits = torch.tanh(logits / cap) * cap
    scaling = getattr(config, "logits_scaling", None)
    if scaling:  # Granite
        logits = logits / scaling
    return logits


def scored_positions(labels):
    """(rows, positions, targets) of every scored prediction: position t of row b predicts labels[b, t + 1] when that
    label is not -100 (the model's own shift)."""
    targets = labels[:, 1:]
    rows, positions = (targets != IGNORE).nonzero(as_tuple=True)
    return rows, positions, targets[rows, positions]


def example_scores(model, inputs, labels, chunk_bytes=CHUNK_BYTES):
    """(B, 3) float64 per example: the summed negative log-likelihood of its scored tokens, their number, and how
    many are the argmax (greedy decoding's choice given the tokens before). No autograd. `chunk_bytes`: the float64
    logits one chunk of positions may hold."""
    hidden = final_hidden(model, inputs)  # (B, T, D)
    rows, positions, targets = scored_positions(labels)
    vocab = model.get_output_embeddings().weight.shape[0]
    chunk = max(1, chunk_bytes // (8 * vocab))
    scores = torch.zeros(len(labels), 3, dtype=torch.float64, device=labels.device)
    for start in range(0, len(rows), chunk):
        r, p, y = rows[start:start + chunk], positions[start:start + chunk], targets[start:start + chunk]
        logits = output_logits(model, hidden[r, p])  # (c, V)
        # the log-softmax in float64: float32's, summed over a 49 152-word vocabulary, is off by up to 2e-4 nats
        nll = F.cross_entropy(logits.double(), y, reduction="none")
        scores[:, 0].index_add_(0, r, nll)
        scores[:, 1].index_add_(0, r, torch.ones_like(nll))
        scores[:, 2].index_add_(0, r, (logits.argmax(-1) == y).double())
    return scores


def example_losses(model, inputs, labels):
    """(B,) each example's mean negative log-likelihood over its scored tokens (0 where none), with autograd: a
    ranker's loss on a task that scores a few positions (the retrieval tasks), with the head run on those alone."""
    hidden = final_hidden(model, inputs)
    rows, positions, targets = scored_positions(labels)
    nll = F.cross_entropy(output_logits(model, hidden[rows, positions]).float(), targets, reduction="none")
    sums = torch.zeros(len(labels), dtype=nll.dtype, device=nll.device).index_add(0, rows, nll)
    counts = torch.zeros_like(sums).index_add(0, rows, torch.ones_like(nll))
    return sums / counts.clamp_min(1)
