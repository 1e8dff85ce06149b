"""Keeping the projection rows of some heads: the pruning every adapter needs."""

import warnings

import torch
import torch.nn.functional as F
from torch import nn
from transformers.pytorch_utils import Conv1D, prune_linear_layer


def head_rows(heads, head_size, offset=0, stride=None):
    """Row indices of `heads` in a projection whose head h owns rows offset + h·stride + [0, head_size)."""
    stride = head_size if stride is None else stride
    if not heads:
        return torch.zeros(0, dtype=torch.long)
    return torch.cat([torch.arange(offset + h * stride, offset + h * stride + head_size) for h in heads])


def trainable_as(pruned, stock):
    """`pruned` with each of its own parameters' requires_grad set as `stock`'s: a frozen projection stays frozen
    (prune_linear_layer makes every parameter trainable), a trainable one stays trainable."""
    for name, param in pruned.named_parameters(recurse=False):
        param.requires_grad_(getattr(stock, name).requires_grad)
    return pruned


def keep_rows(linear, rows):
    """`linear` with only the output rows `rows`, in that order (a 0-row Linear when none remain)."""
    if rows.numel() == 0:
        with warnings.catch_warnings():  # "Initializing zero-element tensors is a no-op"
            warnings.simplefilter("ignore", UserWarning)
            empty = nn.Linear(linear.in_features, 0, bias=linear.bias is not None,
                              device=linear.weight.device, dtype=linear.weight.dtype)
        return trainable_as(empty, linear)
    # prune_linear_layer builds a float32 Linear: keep the model's dtype (a model cast to fp16/bf16 before patching)
    return trainable_as(prune_linear_layer(linear, rows.to(linear.weight.device)).to(linear.weight.dtype), linear)


def keep_conv1d_outputs(conv, outputs):
    """A GPT-2 style `Conv1D` (weight stored (in, out)) with only the output units `outputs`, in that order."""
    outputs = outputs.to(conv.weight.device)
    pruned = Conv1D(len(outputs), conv.weight.shape[0]).to(conv.weight.device, conv.weight.dtype)
    with torch.no_grad():
        pruned.weight.copy_(conv.weight.index_select(1, outputs))
        pruned.bias.copy_(conv.bias.index_select(0, outputs))
    return trainable_as(pruned, conv)


def input_dim(projection):
    """The weight dimension a projection reads its inputs along: 1 for nn.Linear, 0 for Conv1D ((in, out))."""
    return 0 if isinstance(projection, Conv1D) else 1


def keep_head_rows(linear, heads, head_size):
    """`linear` (rows = heads × head_size) with only the rows of `heads`."""
    return keep_rows(linear, head_rows(heads, head_size))


def keep_bias(bias, rows):
    """A (H·d,) bias parameter with only `rows`."""
    kept = bias.detach()[rows.to(bias.device)].clone()
    return nn.Parameter(kept, requires_grad=bias.requires_grad)


def _plain(linear):
    """A stock nn.Linear that no hook watches and whose forward nobody replaced (accelerate's offloading does):
    calling it is F.linear(x, weight, bias) and nothing else."""
    hooks = (linear._forward_hooks, linear._forward_pre_hooks,
             getattr(nn.modules.module, "_global_forward_hooks", None),
             getattr(nn.modules.module, "_global_forward_pre_hooks", None))
    return type(linear) is nn.Linear and "forward" not in vars(linear) and not any(hooks)


def joint_linear(x, *linears):
    """(linear(x) for linear in linears), as one GEMM over their concatenated rows where that computes the same.

    A pruned layer's queries and keys are two half-width GEMMs, which on CPU run up to ~15% slower than one of
    their joint width (docs/performance.md, "Partly constant layers"); concatenating the weights costs less than
    that. Under autograd the concatenation is differentiable, so trained projections get their gradients. Any
    other kind of layer (LoRA, quantised, offloaded, a hook on it, a bias, device or dtype of its own) runs its
    own forward.
    """
    if (len(linears) < 2 or not all(map(_plain, linears))
            or len({(l.weight.device, l.weight.dtype, l.bias is None) for l in linears}) > 1):
        return tuple(linear(x) for linear in linears)
    weight = torch.cat([linear.weight for linear in linears])
    bias = None if linears[0].bias is None else torch.cat([linear.bias for linear in linears])
    return F.linear(x, weight, bias).split([linear.out_features for linear in linears], dim=-1)
