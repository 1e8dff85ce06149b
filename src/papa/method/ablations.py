"""The field's head ablations, as what PAPA's replaced heads read: built here, no averaging pass needed.

    zero_output   the head outputs 0 (Michel et al. 2019; nnterp's and pyvene's zero ablation): mean outputs
                  that are all zeros, so the head runs PAPA's mean-output path (Q/K pruned, no attention).
    first_token   the head attends only to the first token (the "attention sink": Penzai's
                  KnockOutAttentionHeads, StreamingLLM): constant matrices whose every row is one-hot on key 0.
                  Inputs are padded on the right (papa.data.preprocessing), so key 0 is always a real token: a
                  decoder's first token (its BOS where the tokenizer adds one), an encoder's [CLS]; norm(C·P) keeps
                  row i = e_0 for every real query and zeroes a padded query's row, as for every constant head.

Both are ordinary inputs of papa.method.attention.patch_model, so every family, precision and torch.compile runs
them through the same code as PAPA's constant heads and the mean-output control. The third baseline, the trained
(optimal) constant of Li & Janson (2024), is PAPA's own --grad_for_classifier_and_static_only started from the
averages (papa.sweep.controls).
"""

import torch


def zero_outputs(num_layers, num_heads, seq_len, head_dim, dtype=torch.float32):
    """[L, H, T, d] zeros: every replaced head's output is 0 (an expanded view: no L·H·T·d allocation)."""
    return torch.zeros((), dtype=dtype).expand(num_layers, num_heads, seq_len, head_dim)


def first_token_matrices(num_layers, num_heads, seq_len, dtype=torch.float32):
    """[L, H, T, T] with C[l, h, i, j] = 1 if j == 0 else 0: every query attends to key 0 only (an expanded view
    of one T × T matrix: patch_model copies only the replaced heads' slices)."""
    one = torch.zeros(seq_len, seq_len, dtype=dtype)
    one[:, 0] = 1
    return one.expand(num_layers, num_heads, seq_len, seq_len)
