"""The math of constant attention heads, independent of any model family.

For a padding mask m (1 = real token) the original PAPA code (Hassid et al., 2022) uses

    P[i, j]  = m_i · m_j                        the padding pattern
    norm(X)  = X·P / max(Σ_j |X·P|_ij, 1e-12)    F.normalize(p=1): an all-zero row stays zero

A constant head's attention is norm(C) for its (T, T) matrix C. A layer that restricts attention
further (ModernBERT's sliding-window layers) multiplies C by its band B[i, j] = 1 where j may be
attended from i, so the constant head stays inside the window: norm(C⊙B). The band is the same
for every example, so callers fold it into C and these functions only see the padding.

Precision: the row sums Σ_j |X·P|_ij and the division by them are computed in float32 for any input
of fewer bits (float64 stays float64: `reduction_dtype`), and the result rounded back once. In
float16 the original's eps (1e-12) underflows to 0, so an all-zero row (every real `avgs.pt` has
them: positions no training example reaches) became 0/0 = NaN, and NaN·0 spread it to every
position of the next layer. Here an all-zero row stays exactly zero in every precision, as
F.normalize keeps it (`row_divisor`).
"""

import torch

from .block_triangle import BlockTriangle, dense, stored_values

NORM_EPS = 1e-12  # F.normalize's eps, as in the original's mask_and_normalize


def in_place_ok(*tensors):
    """Whether the out= writes below may be used: not under autograd (it cannot record them) and not
    while torch.compile traces (it refuses out= into non-contiguous views, and fuses the plain form)."""
    if torch.compiler.is_compiling():
        return False
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


def reduction_dtype(dtype):
    """Where norm(·)'s row sums and divisions run: float32, or float64 for float64 inputs."""
    return torch.promote_types(dtype, torch.float32)


def row_divisor(row_sums):
    """max(row sums, eps) in float32 (float64 for float64), +inf where a row is all zero.

    x / row_divisor(Σ_j |x_ij|) is F.normalize(x, p=1)'s value in every row (an all-zero row stays exactly 0);
    the +inf makes the gradient of an all-zero row 0 rather than F.normalize's upstream / 1e-12 (1e12 times the
    upstream gradient: in float16 that is inf, and inf · 0 from the padding pattern is NaN). Such rows are the
    query positions no training example reached, so no training step of the original ever saw that gradient.
    """
    row_sums = row_sums.to(reduction_dtype(row_sums.dtype))
    return torch.where(row_sums > 0, row_sums.clamp_min(NORM_EPS), torch.inf)


def constants_in(constant, dtype):
    """(…, T, T) constants (or a `BlockTriangle`) in `dtype`. For float16/bfloat16 each row is first scaled to unit
    sum in float32: norm(C·P) does not change under row scaling, and so a row of tiny mass keeps its precision when
    rounded."""
    if torch.finfo(dtype).bits >= 32:
        return constant.elementwise(lambda v: v.to(dtype)) if isinstance(constant, BlockTriangle) else constant.to(dtype)
    if isinstance(constant, BlockTriangle):
        return constant.map_rows(lambda strip: l1_normalize(strip.float()).to(dtype))
    return l1_normalize(constant.float()).to(dtype)


def padding_pattern(valid):
    """P = m_i · m_j: (B, T) → (B, 1, T, T)."""
    return valid[:, None, :, None] * valid[:, None, None, :]


def l1_normalize(x):
    """x / max(Σ_j |x_ij|, eps) along the last dim (F.normalize(p=1)), divided in float32 (float64 for float64),
    in x's dtype."""
    return (x / row_divisor(x.abs().sum(-1, keepdim=True, dtype=reduction_dtype(x.dtype)))).to(x.dtype)


def normalize_rows(probs, valid):
    """norm(X) for (B, H, T, T) probabilities; `valid` None means no padding."""
    if valid is not None:
        probs = probs * padding_pattern(valid).to(probs.dtype)
    return l1_normalize(probs)


def normalized_constant(constant, valid):
    """norm(C·P): (H, T, T) constants → (B, H, T, T) probabilities ((1, H, T, T) without padding)."""
    constant = dense(constant)
    if valid is None:
        return l1_normalize(constant).unsqueeze(0)
    return l1_normalize(constant.unsqueeze(0) * padding_pattern(valid).to(constant.dtype))


def inverse_row_sums(constant, nonnegative=False):
    """1 / max(Σ_j |C_ij|, eps) in float32 (float64 for float64), 0 on all-zero rows: (H, T, 1). `row_scale`
    without padding, kept by a frozen layer (`call_cache.constant_facts`) to serve every call."""
    dtype = reduction_dtype(constant.dtype)
    if isinstance(constant, BlockTriangle):
        sums = (constant if nonnegative else constant.elementwise(torch.abs)).row_sums(dtype)
    else:
        sums = (constant if nonnegative else constant.abs()).sum(-1, dtype=dtype)
    return 1 / row_divisor(sums)[:, :, None]


def row_scale(constant, valid, nonnegative=False, inverse_rows=None):
    """m_i / max(Σ_j |C_ij| m_j, eps) in float32 (float64 for float64 constants): (H, T, B), or (H, T, 1) without
    padding (valid None).

    The factor that turns the rows of C·P into those of norm(C·P); 0 on padded and all-zero rows. nonnegative:
    the caller knows C ≥ 0 (every average of probabilities is), so |C| is C and its (H, T, T) copy is skipped.
    inverse_rows: `inverse_row_sums(C)`, given when Σ_j |C_ij| equals Σ_j |C_ij| m_j for every real query i (no
    padding, or a decoder's lower-triangular C with right padding: every key j ≤ i of a real query is real), so
    no pass over C.
    """
    if inverse_rows is not None:
        return inverse_rows if valid is None else inverse_rows * valid.t().to(inverse_rows.dtype)  # (H, T, B)
    if valid is None:
        return inverse_row_sums(constant, nonnegative)  # (H, T, 1)
    dtype = reduction_dtype(constant.dtype)
    valid_t = valid.t().to(dtype)  # (T, B)
    if isinstance(constant, BlockTriangle):
        magnitude = constant.elementwise(lambda v: (v if nonnegative else v.abs()).to(dtype))
        return valid_t / row_divisor(magnitude.matmul(valid_t[None]))  # (H, T, B)
    magnitude = constant if nonnegative else constant.abs()
    return valid_t / row_divisor(torch.matmul(magnitude.to(dtype), valid_t))  # (H, T, B)


def constant_product(constant, rhs):
    """C @ rhs for (H, T, T) constants or a `BlockTriangle` (strip by strip, the zero triangle skipped) and
    (H, T, N) rhs."""
    if isinstance(constant, BlockTriangle):
        return constant.matmul(rhs, in_place=in_place_ok(constant.values, rhs))
    return torch.bmm(constant, rhs)


def constant_attention_output(constant, values, valid, out=None, nonnegative=False, inverse_rows=None):
    """norm(C·P) · V without materialising (B, H, T, T).

    constant: (H, T, T), or a decoder's `BlockTriangle`; values: (B, T, H, d); valid: (B, T) or None → (B, T, H, d).
    Row i of norm(C·P)·V is m_i · Σ_j C_ij m_j V_j / max(Σ_j |C_ij| m_j, eps), so one
    (H, T, T) @ (H, T, B·d) batched matmul serves the whole batch. Without autograd the masking
    and the scaling write straight into the layouts the matmul and the caller want (out=), which
    saves two copies of V per layer on CPU; `out`, if given, is a (B, T, H, d) view to fill.
    The matmul runs in the values' dtype; the row sums, their reciprocals and the scaling in float32
    (`reduction_dtype`); a `BlockTriangle`'s product skips its zero triangle (`constant_product`). nonnegative,
    inverse_rows: what the caller knows of C (`row_scale`)."""
    B, T, H, d = values.shape
    scale = row_scale(constant, valid, nonnegative, inverse_rows)  # (H, T, B) or (H, T, 1)
    valid_t = None if valid is None else valid.t()  # (T, B)
    if not in_place_ok(values, stored_values(constant)):
        masked = values if valid is None else values * valid[:, :, None, None].to(values.dtype)
        numerator = constant_product(constant, masked.permute(2, 1, 0, 3).reshape(H, T, B * d)).view(H, T, B, d)
        result = (numerator * scale.unsqueeze(-1)).to(values.dtype).permute(2, 1, 0, 3)
        if out is None:
            return result.contiguous()
        out.copy_(result)
        return out
    by_head = values.new_empty(H, T, B, d)  # V laid out for the batched matmul
    if valid is None:
        by_head.copy_(values.permute(2, 1, 0, 3))
    else:
        torch.mul(values.permute(2, 1, 0, 3), valid_t[None, :, :, None].to(values.dtype), out=by_head)
    numerator = constant_product(constant, by_head.view(H, T, B * d)).view(H, T, B, d)
    if out is None:
        out = values.new_empty(B, T, H, d)
    torch.mul(numerator, scale.unsqueeze(-1), out=out.permute(2, 1, 0, 3))  # float32 product, rounded once
    return out


def mean_output(means, valid, batch_size):
    """The mean-output ablation: each head outputs its training-set mean context vector per position.

    means: (H, T, d) → (B, T, H, d), zero on padded positions (as norm(·) zeroes padded rows).
    """
    H, T, d = means.shape
    out = means.permute(1, 0, 2).unsqueeze(0).expand(batch_size, T, H, d)
    return out if valid is None else out * valid[:, :, None, None].to(out.dtype)


def add_corrections(output, corrections, valid):
    """The mean_corrected replacement: norm(C·P)·V + c, c = E[A V] − Ā·E[V] per head and position
    (papa.method.averaging), so a constant head's mean output is its own head's. output: (B, T, S, d) constant heads'
    output, added to in place where allowed (it may be a caller's `out` view); corrections: (S, T, d) or None
    (unchanged); zero on padded positions, as every replaced head's output."""
    if corrections is None:
        return output
    bias = mean_output(corrections.to(output.dtype), valid, output.shape[0])  # (B, T, S, d)
    return output.add_(bias) if in_place_ok(output, corrections) else output + bias


def dropped_constant_output(constant, mask, scale, values, valid, out=None, nonnegative=False, inverse_rows=None):
    """(keep ⊙ norm(C·P)) · V, attention dropout on constant heads, without materialising norm(C·P).

    constant: (H, T, T); mask: (B, H, T, T) dropout mask of 0/1; scale: 1/(1−p), so keep = mask · scale (0-dim);
    values: (B, T, H, d); valid: (B, T) or None → (B, T, H, d). Row i is m_i·scale/r_bi · Σ_j mask_bij C_ij m_j V_bj,
    r_bi the row sum of norm(·), so the (B, H, T, T) work is one product mask ⊙ C and one batched matmul (the
    probabilities path builds C·P, its row sums, their quotient and the dropout product besides), and the scale
    joins the (H, T, B) row factors. Without autograd the product is written into `mask`, which the caller drew
    for this call, and V·m and the scaled rows straight into the layouts the matmul and the caller want (out=, as
    in `constant_attention_output`): no (B, T, H, d) pass beyond the stock attention's. `out`, if given, is a
    (B, T, H, d) view to fill. nonnegative, inverse_rows: what the caller knows of C (`row_scale`).
    """
    B, T, H, d = values.shape
    constant = dense(constant)  # the dropout mask is (B, H, T, T) anyway
    rows = (row_scale(constant, valid, nonnegative, inverse_rows) * scale).permute(2, 0, 1).unsqueeze(-1)  # (B, H, T, 1) or (1, H, T, 1)
    if not in_place_ok(mask, constant, values):
        masked = values if valid is None else values * valid[:, :, None, None].to(values.dtype)
        numerator = torch.matmul(mask * constant, masked.transpose(1, 2))  # (B, H, T, d)
        result = (numerator * rows).to(values.dtype).transpose(1, 2)  # float32 product, rounded once
        return result if out is None else out.copy_(result)
    by_head = values.new_empty(B, H, T, d)  # V·m laid out for the batched matmul
    if valid is None:
        by_head.copy_(values.transpose(1, 2))
    else:
        torch.mul(values.transpose(1, 2), valid[:, None, :, None].to(values.dtype), out=by_head)
    numerator = torch.matmul(torch.mul(mask, constant, out=mask), by_head)  # (B, H, T, d)
    if out is None:
        out = values.new_empty(B, T, H, d)
    torch.mul(numerator, rows, out=out.transpose(1, 2))  # float32 product, rounded once
    return out
