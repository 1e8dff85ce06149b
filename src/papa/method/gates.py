"""Gates: how a ranker makes heads constant, one, some or all at a time, on one model in mix mode.

A model patched with `mix_all_heads=True` holds every head's attention A and its constant norm(C·P). A ranker
sets, per layer, each head's *constant share* g (the layer's `papa_gate`, papa/families/base.py):

    P_h = A_h + g_h · (norm(C_h·P) − A_h)        g = 0: the stock head; g = 1: PAPA's constant head

g is (H,) for the whole batch or (B, H), one row per example: a batch can then carry several replacements side by
side (one copy of the examples per replacement) and a backward pass gives every example's own ∂L/∂g. A layer
without a gate runs its stock computation (no constant share computed at all).

`PrefixCache` serves a ranker that changes heads of layer l and above only: the blocks below l compute the same
thing in every such run, so their outputs are recorded once per batch and replayed, copied for every replacement.

`recomputed_blocks` serves a ranker that differentiates (taylor, the gates): it keeps each block's input alone and
recomputes the block in the backward pass, so what a step holds grows with T by the hidden size, not by every
activation of every layer.
"""

from contextlib import contextmanager

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..errors import PapaError
from ..families import attention_modules
from ..families.base import STOCK


def check_mix_mode(model):
    layers = attention_modules(model)
    if not all(getattr(m, "mix_all_heads", False) for m in layers):
        raise PapaError("gates need a model patched with mix_all_heads=True (every head holds its constant matrix)")
    return layers


def set_gates(model, gates):
    """Set the constant shares `gates` = {layer: (H,) or (B, H) tensor}, every other layer stock; None: back to
    mix mode's σ(λ)."""
    layers = check_mix_mode(model)
    for index, module in enumerate(layers):
        module.papa_gate = None if gates is None else gates.get(index, STOCK)


@contextmanager
def gated(model, gates):
    """Run `model` with the constant shares `gates` (`set_gates`) inside the block; the gates before it come back
    after it (a block nested in another, the stock model's forward inside a ranker's, leaves the outer's set)."""
    layers = check_mix_mode(model)
    before = [module.papa_gate for module in layers]
    set_gates(model, gates)
    try:
        yield model
    finally:
        for module, gate in zip(layers, before):
            module.papa_gate = gate


def transformer_blocks(model):
    """The model's blocks (the layer that holds each self-attention module), one per layer, in order."""
    names = {id(m): n for n, m in model.named_modules()}
    modules = dict(model.named_modules())
    blocks = []
    for attention in attention_modules(model):
        name = names[id(attention)]
        parts = name.split(".")
        # the block is the ancestor that is an item of a ModuleList: `<list>.<index>`
        for cut in range(len(parts) - 1, 0, -1):
            if parts[cut].isdigit() and isinstance(modules.get(".".join(parts[:cut])), nn.ModuleList):
                blocks.append(modules[".".join(parts[:cut + 1])])
                break
        else:
            raise PapaError(f"cannot find the block of {name}: PAPA's rankers expect blocks in a ModuleList")
    return blocks


def _repeat(output, copies, batch_size):
    """A block's recorded output with every (B, …) tensor repeated `copies` times along the batch."""
    if isinstance(output, torch.Tensor):
        if output.dim() and output.shape[0] == batch_size and copies > 1:
            return output.repeat(copies, *([1] * (output.dim() - 1)))
        return output
    if isinstance(output, tuple):
        return type(output)(_repeat(o, copies, batch_size) for o in output)
    return output


class PrefixCache:
    """The outputs of every block for one batch, recorded in a forward (`record`), replayed below a layer
    (`replay_below`) for a batch of `copies` copies of the same examples."""

    def __init__(self, model):
        self.blocks = transformer_blocks(model)
        self.outputs = None
        self.batch_size = None

    @contextmanager
    def record(self, batch_size):
        outputs = [None] * len(self.blocks)

        def hook(index):
            def store(module, args, output):
                outputs[index] = output
            return store

        handles = [b.register_forward_hook(hook(i)) for i, b in enumerate(self.blocks)]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
        self.outputs, self.batch_size = outputs, batch_size

    @contextmanager
    def replay_below(self, layer, copies):
        """Blocks 0..layer−1 return their recorded outputs (repeated `copies` times) instead of computing."""
        if self.outputs is None:
            raise PapaError("PrefixCache.replay_below before record")
        saved = {}
        try:
            for index in range(layer):
                block = self.blocks[index]
                replayed = _repeat(self.outputs[index], copies, self.batch_size)
                saved[index] = block.__dict__.get("forward")
                block.forward = lambda *args, _out=replayed, **kwargs: _out
            yield
        finally:
            for index, forward in saved.items():
                if forward is None:
                    del self.blocks[index].forward
                else:
                    self.blocks[index].forward = forward


# From this many tokens per sequence on, the differentiating rankers recompute each block in the backward pass: a
# step of SmolLM2 (30 layers, float32) otherwise keeps about 2 MB of activations per token (4.5 GB at T = 2 048,
# benchmarks/ranking_memory.py), while recomputing costs one more forward of each block.
RECOMPUTE_FROM = 1024


@contextmanager
def recomputed_blocks(model, enabled=True):
    """Inside the block, each transformer block (`transformer_blocks`) keeps only its inputs for the backward pass and
    recomputes its forward there (torch.utils.checkpoint, non-reentrant: keyword arguments and tensors that need no
    gradient pass as they are). The gradients are the same; the recomputation reads the layers' gates as they are
    when the backward runs, so call backward inside the `gated` block that set them. Without autograd (no_grad) a
    block runs as it is."""
    if not enabled:
        yield model
        return
    saved = {}
    try:
        for block in transformer_blocks(model):
            forward = block.forward  # the bound forward, or a PrefixCache replay set before

            def run(*args, _forward=forward, **kwargs):
                if not torch.is_grad_enabled():
                    return _forward(*args, **kwargs)
                return checkpoint(_forward, *args, use_reentrant=False, **kwargs)

            saved[block] = block.__dict__.get("forward")
            block.forward = run
        yield model
    finally:
        for block, forward in saved.items():
            if forward is None:
                del block.forward
            else:
                block.forward = forward
