"""The Trainer's evaluation of an lm task, scored position by position without its (B, T, V) logits.

HF's evaluation loop keeps each batch's logits until its metrics are computed: for an lm task at long T they are the
largest thing in memory (papa.families.lm_head). `LMTrainer` runs the decoder body once per batch and the LM head on
the scored positions in chunks, and hands the loop (B, 3) per-example scores instead (summed negative
log-likelihood, scored tokens, tokens that are the argmax), which the metrics and eval_predictions.jsonl read.
"""

import torch

from ..families.lm_head import example_scores


def lm_trainer_class():
    """transformers' Trainer with `prediction_step` scoring as the module says (imported when a run needs it)."""
    from transformers import Trainer

    class LMTrainer(Trainer):
        def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
            inputs = self._prepare_inputs(inputs)
            labels = inputs["labels"]
            with torch.no_grad(), self.compute_loss_context_manager():
                scores = example_scores(model, inputs, labels)  # (B, 3)
            loss = (scores[:, 0].sum() / scores[:, 1].sum().clamp_min(1)).float()  # nats per scored token
            return (loss, None, None) if prediction_loss_only else (loss, scores, labels)

    return LMTrainer
