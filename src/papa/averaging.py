"""Average attention per head over a training set: the constant matrices of PAPA.

For every batch with padding mask m, P[b, i, j] = m_i · m_j and

    sums[l, h, i, j] += Σ_b A[b, l, h, i, j] · P[b, i, j]
    patterns[i, j]   += Σ_b P[b, i, j]
    avgs             = sums / patterns   (0 where patterns is 0)

exactly the original's `attention_sums.pt`, `attention_patterns_sums.pt` and `avgs.pt`. The sums
live in float64 so hundreds of thousands of examples lose nothing; each layer's batch is reduced
on the fly, so no [B, L, H, T, T] tensor is built and memory does not grow with the data.
Across processes (torchrun / accelerate), every process sees a disjoint shard of the examples
(no sampler padding, so nothing is counted twice) and the sums are all-reduced.
"""

import os

import torch
import torch.distributed as dist

from .io import save_tensor


class AttentionAverager:
    """Streaming, float64 sums of pattern-masked attention probabilities."""

    def __init__(self, num_layers, num_heads, seq_len, device="cpu"):
        self.attention_sums = torch.zeros(num_layers, num_heads, seq_len, seq_len, dtype=torch.float64, device=device)
        self.pattern_sums = torch.zeros(seq_len, seq_len, dtype=torch.float64, device=device)
        self.num_examples = 0

    @torch.no_grad()
    def update(self, attentions, attention_mask):
        """attentions: L tensors (B, H, T, T); attention_mask: (B, T) with 1 for real tokens."""
        valid = attention_mask.to(attentions[0].dtype)
        pattern = valid[:, :, None] * valid[:, None, :]  # (B, T, T)
        self.pattern_sums += pattern.sum(0, dtype=torch.float64)
        for layer, probs in enumerate(attentions):
            self.attention_sums[layer] += torch.einsum("bhij,bij->hij", probs, pattern).double()
        self.num_examples += attention_mask.shape[0]

    def all_reduce(self):
        """Sum the statistics of every process (no-op without torch.distributed)."""
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(self.attention_sums)
            dist.all_reduce(self.pattern_sums)
            count = torch.tensor([self.num_examples], dtype=torch.float64, device=self.pattern_sums.device)
            dist.all_reduce(count)
            self.num_examples = int(count.item())
        return self

    def averages(self):
        """avgs [L, H, T, T] in float32; positions never seen together are 0, not NaN."""
        seen = self.pattern_sums > 0
        safe = torch.where(seen, self.pattern_sums, torch.ones_like(self.pattern_sums))
        return torch.where(seen, self.attention_sums / safe, torch.zeros_like(self.attention_sums)).float()

    def save(self, output_dir):
        """Write the three original files (float32), each atomically."""
        os.makedirs(output_dir, exist_ok=True)
        save_tensor(self.attention_sums.float().cpu(), os.path.join(output_dir, "attention_sums.pt"))
        save_tensor(self.pattern_sums.float().cpu(), os.path.join(output_dir, "attention_patterns_sums.pt"))
        save_tensor(self.averages().cpu(), os.path.join(output_dir, "avgs.pt"))


def distributed_context():
    """(rank, world_size, device) under torchrun / `accelerate launch`, or (0, 1, device) alone.

    Initialises the process group from the launcher's environment (gloo on CPU, nccl on GPU).
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, world_size = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    return rank, world_size, device


def shard(num_examples, rank, world_size):
    """This process's example indices: every example in exactly one shard."""
    return list(range(rank, num_examples, world_size))


@torch.no_grad()
def accumulate_attention(model, batches, seq_len, device="cpu", progress=None):
    """Run `model` (any BERT/RoBERTa) over `batches` in eval mode and average its attention.

    batches yield dicts with input_ids, attention_mask (and token_type_ids); every batch must be
    padded to `seq_len`. Returns an `AttentionAverager` with this process's sums (call
    `all_reduce()` for the global ones). Stock models must be loaded with
    attn_implementation="eager" (sdpa returns no probabilities); PAPA-patched ones work either way.
    """
    config = model.config
    averager = AttentionAverager(config.num_hidden_layers, config.num_attention_heads, seq_len, device)
    encoder = model.base_model.eval()
    for batch in batches:
        inputs = {k: batch[k].to(device) for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
        if inputs["input_ids"].shape[1] != seq_len:
            raise ValueError(f"batch has length {inputs['input_ids'].shape[1]}, expected padding to {seq_len}")
        # not bound to a name: the previous batch's attentions must not outlive its update
        averager.update(encoder(**inputs, output_attentions=True, return_dict=True).attentions, inputs["attention_mask"])
        if progress is not None:
            progress.update(1)
    return averager
