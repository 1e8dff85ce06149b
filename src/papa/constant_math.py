"""The math of constant attention heads, independent of any model family.

For a padding mask m (1 = real token) the original PAPA code (Hassid et al., 2022) uses

    P[i, j]  = m_i · m_j                        the padding pattern
    norm(X)  = X·P / max(Σ_j |X·P|_ij, 1e-12)    F.normalize(p=1): an all-zero row stays zero

A constant head's attention is norm(C) for its (T, T) matrix C. A layer that restricts attention
further (ModernBERT's sliding-window layers) multiplies C by its band B[i, j] = 1 where j may be
attended from i, so the constant head stays inside the window: norm(C⊙B). The band is the same
for every example, so callers fold it into C and these functions only see the padding.
"""

import torch
import torch.nn.functional as F

NORM_EPS = 1e-12  # F.normalize's eps, as in the original's mask_and_normalize


def padding_pattern(valid):
    """P = m_i · m_j: (B, T) → (B, 1, T, T)."""
    return valid[:, None, :, None] * valid[:, None, None, :]


def normalize_rows(probs, valid):
    """norm(X) for (B, H, T, T) probabilities; `valid` None means no padding."""
    if valid is not None:
        probs = probs * padding_pattern(valid)
    return F.normalize(probs, p=1, dim=-1, eps=NORM_EPS)


def normalized_constant(constant, valid):
    """norm(C·P): (H, T, T) constants → (B, H, T, T) probabilities ((1, H, T, T) without padding)."""
    if valid is None:
        return F.normalize(constant, p=1, dim=-1, eps=NORM_EPS).unsqueeze(0)
    return F.normalize(constant.unsqueeze(0) * padding_pattern(valid), p=1, dim=-1, eps=NORM_EPS)


def constant_attention_output(constant, values, valid, out=None):
    """norm(C·P) · V without materialising (B, H, T, T).

    constant: (H, T, T); values: (B, T, H, d); valid: (B, T) or None → (B, T, H, d).
    Row i of norm(C·P)·V is m_i · Σ_j C_ij m_j V_j / max(Σ_j |C_ij| m_j, eps), so one
    (H, T, T) @ (H, T, B·d) batched matmul serves the whole batch. Without autograd the masking
    and the scaling write straight into the layouts the matmul and the caller want (out=), which
    saves two copies of V per layer on CPU; `out`, if given, is a (B, T, H, d) view to fill.
    """
    B, T, H, d = values.shape
    if valid is None:
        scale = 1 / constant.abs().sum(-1).clamp_min(NORM_EPS)[:, :, None]  # (H, T, 1)
    else:
        valid_t = valid.t()  # (T, B)
        scale = valid_t / torch.matmul(constant.abs(), valid_t).clamp_min(NORM_EPS)  # (H, T, B); 0 on padded rows
    if torch.is_grad_enabled() and (values.requires_grad or constant.requires_grad):
        # autograd cannot record out= writes: the same math with two extra copies
        masked = values if valid is None else values * valid[:, :, None, None]
        numerator = torch.bmm(constant, masked.permute(2, 1, 0, 3).reshape(H, T, B * d)).view(H, T, B, d)
        result = (numerator * scale.unsqueeze(-1)).permute(2, 1, 0, 3)
        if out is None:
            return result.contiguous()
        out.copy_(result)
        return out
    by_head = values.new_empty(H, T, B, d)  # V laid out for the batched matmul
    if valid is None:
        by_head.copy_(values.permute(2, 1, 0, 3))
    else:
        torch.mul(values.permute(2, 1, 0, 3), valid_t[None, :, :, None], out=by_head)
    numerator = torch.bmm(constant, by_head.view(H, T, B * d)).view(H, T, B, d)
    if out is None:
        out = values.new_empty(B, T, H, d)
    torch.mul(numerator, scale.unsqueeze(-1), out=out.permute(2, 1, 0, 3))
    return out


def mean_output(means, valid, batch_size):
    """The mean-output ablation: each head outputs its training-set mean context vector per position.

    means: (H, T, d) → (B, T, H, d), zero on padded positions (as norm(·) zeroes padded rows).
    """
    H, T, d = means.shape
    out = means.permute(1, 0, 2).unsqueeze(0).expand(batch_size, T, H, d)
    return out if valid is None else out * valid[:, :, None, None]
