"""The retrieval-head score (Wu et al. 2024, "Retrieval Head Mechanistically Explains Long-Context Factuality"):
how often a head's strongest attention lands on the token the model is copying.

On a retrieval task (papa.data.retrieval) every answer token y at position t + 1 is copied from the needle (a
passkey's asked needle; copy's first copy). At the query t that predicts it, a head *retrieves* when the key it
attends to most, j* = argmax_j A[t, j], lies inside the needle and holds y. Wu et al.'s score is the fraction of
answer tokens for which the head retrieves; fewer than 5% of heads score above 0.1 on their models, and removing
those breaks retrieval while removing others does not. Here the answer is teacher-forced (the data's answer, not a
generation), the stock model's attention is read (every gate 0), and `soft` adds the attention mass on the needle's
copies of y, which orders the many heads that never retrieve.

Only the queries that predict an answer token are computed, against every key: (answers, heads, T) per layer, never
(T, T), through the family's own rotated queries and keys (the Llama-family adapter's `_queries_keys`, its scaling,
soft-capping and sliding window).
"""

import torch

from ..errors import PapaError
from ..families import attention_modules
from ..families.lm_head import final_hidden, scored_positions
from .gates import gated


def _answer_rows(module, call, rows, positions):
    """(M, H, T) attention probabilities of the M answer queries (row `rows`, position `positions`) in `module`, its
    heads in the stock order; keys after the query, outside the window or padded get 0."""
    query, key = module._queries_keys(call)  # (B, H, T, d) each (mix mode: every head dynamic, K per head)
    T = key.shape[2]
    scores = torch.einsum("mhd,mhtd->mht", query[rows, :, positions].float(), key[rows].float()) * module.scaling
    if module.softcap is not None:
        scores = torch.tanh(scores / module.softcap) * module.softcap
    keys = torch.arange(T, device=scores.device)
    distance = positions[:, None] - keys[None, :]  # (M, T): t − j
    allowed = distance >= 0
    window = module.papa_window
    if window is not None:
        allowed = allowed & (distance < window)
    mask = call.attention_mask
    if mask is not None and mask.dim() == 2:
        allowed = allowed & mask[rows].bool()
    scores = scores.masked_fill(~allowed[:, None, :], float("-inf"))
    return module.papa_stock_order(scores.softmax(-1), dim=1)


@torch.no_grad()
def retrieval_scores(objective):
    """((L, H) hard scores, (L, H) soft scores) over the objective's batches: the fraction of answer tokens each
    head retrieves (module docstring), and its mean attention on the needle's positions holding the answer token.
    Every batch needs "needle" ((B, 2) [start, end)) beside its inputs."""
    model = objective.model
    modules = attention_modules(model)
    if not all(hasattr(m, "_queries_keys") for m in modules):
        raise PapaError("the retrieval ranker reads the Llama-family adapter's queries and keys (Llama, Mistral, "
                        "Qwen, Gemma, Granite, SmolLM3); rank this model with another ranker")
    hard = torch.zeros(len(modules), objective.num_heads, dtype=torch.float64)
    soft = torch.zeros_like(hard)
    total = 0
    for batch in objective.batches:
        if "needle" not in batch:
            raise PapaError("the retrieval ranker needs a generated retrieval task's data (passkey or another of "
                            "papa.data.retrieval.KINDS): its examples say where the answer is copied from")
        ids, needle = batch["input_ids"], batch["needle"]
        rows, positions, targets = scored_positions(objective.labels(batch))
        start, end = needle[rows, 0], needle[rows, 1]
        keys = torch.arange(ids.shape[1], device=ids.device)
        source = (keys[None] >= start[:, None]) & (keys[None] < end[:, None]) & (ids[rows] == targets[:, None])  # (M, T)

        def record(layer):
            def hook(module, args, kwargs):
                probs = _answer_rows(module, module.papa_call(*args, **kwargs), rows, positions)  # (M, H, T)
                top = probs.argmax(-1)  # (M, H)
                hard[layer] += source.gather(1, top).double().sum(0).cpu()
                soft[layer] += (probs * source[:, None, :]).sum(-1).double().sum(0).cpu()
            return hook

        handles = [m.register_forward_pre_hook(record(layer), with_kwargs=True) for layer, m in enumerate(modules)]
        try:
            with gated(model, {}):
                final_hidden(model, objective.inputs(batch))
        finally:
            for handle in handles:
                handle.remove()
        total += len(rows)
    if total == 0:
        raise PapaError("the retrieval ranker found no answer token to score in the ranking data")
    return hard / total, soft / total


def unit_scores(units, hard, soft):
    """(score, tie-break) per unit: its heads' largest hard and soft scores (a K/V group stays dynamic if any of its
    heads retrieves)."""
    return ([max(float(hard[l, h]) for l, h in unit) for unit in units],
            [max(float(soft[l, h]) for l, h in unit) for unit in units])
