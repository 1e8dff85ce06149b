"""Per-example losses: what a ranker sums over its data, one number per example.

The Trainer's loss is one mean over a batch; a ranker needs each example's own loss (`taylor` takes the absolute
value of each example's gradient, as Michel et al. 2019 do, and the replacements of one forward are different
copies of the same examples). Each matches the loss the model itself computes for that example alone:

    lm          the mean next-token negative log-likelihood over the block (labels = input ids, shifted)
    sequence    cross-entropy of the example's label; mean squared error for regression (one label)
    token       the mean cross-entropy over the example's labelled tokens (label −100 ignored; 0 when none)
    distill     the mean over positions (lm, token) or the example (sequence) of KL(stock ‖ model) of the output
                distributions: DuoAttention's loss, which needs no labels; 0 at the stock model
"""

import torch
import torch.nn.functional as F

IGNORE = -100


def _mean_over_positions(values, weights):
    """Σ_t w·v / Σ_t w per example, 0 where no position counts: (B, T) → (B,)."""
    return (values * weights).sum(-1) / weights.sum(-1).clamp_min(1)


def task_losses(kind, logits, labels):
    """(B,) losses of one batch's `logits` for `labels`; `kind`: lm, sequence or token."""
    logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    if kind == "lm":  # position t predicts token t + 1; the last predicts nothing (as HF's loss shifts the labels)
        labels = torch.cat([labels[:, 1:], labels.new_full((len(labels), 1), IGNORE)], dim=1)
    if kind in ("lm", "token"):
        # over the rows of a (B·T, V) view: a lm's logits are large, and a transposed or sliced view of them is
        # several times slower to reduce than the contiguous rows
        B, T, V = logits.shape
        nll = F.cross_entropy(logits.reshape(B * T, V), labels.reshape(-1), reduction="none",
                              ignore_index=IGNORE).view(B, T)
        return _mean_over_positions(nll, (labels != IGNORE).to(nll.dtype))
    if logits.shape[-1] == 1:  # regression (STS-B), as HF's and the probe's MSELoss
        return (logits.squeeze(-1) - labels.to(logits.dtype)) ** 2
    return F.cross_entropy(logits, labels.view(-1), reduction="none")


def distill_losses(kind, logits, stock_logits, labels=None):
    """(B,) KL(stock ‖ model) of the output distributions; positions of an lm or token batch are averaged over the
    real ones (labels ≠ −100 where labels are given). Regression heads (one output) take the squared difference."""
    logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    stock_logits = stock_logits.to(logits.dtype)
    if logits.shape[-1] == 1:
        return ((logits - stock_logits) ** 2).reshape(logits.shape[0], -1).mean(-1)
    stock_log = stock_logits.log_softmax(-1)
    kl = (stock_log.exp() * (stock_log - logits.log_softmax(-1))).sum(-1)  # (B,) or (B, T)
    if kl.dim() == 1:
        return kl
    weights = torch.ones_like(kl) if labels is None else (labels != IGNORE).to(kl.dtype)
    return _mean_over_positions(kl, weights)
