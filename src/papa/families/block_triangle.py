"""A decoder's constant matrices held as block-row strips of their lower triangle.

A causal head never attends above the diagonal, so its constant C (T, T) is zero there. Cut the rows into blocks
of b: rows [s, s + b) are zero in every column ≥ s + b, so the strip C[s:s+b, :s+b] holds all of them. The strips
of S heads, each flattened and laid end to end, are one (S, N) tensor, N = Σ_r rows_r · cols_r = b²·n(n + 1)/2
for n = T/b blocks: (n + 1)/2n of the T² a full matrix stores (56% at T = 2048, b = 256). A patched decoder's
layer stores its constants so (`patch_model` packs them from T ≥ 2b on), and the constant heads' product
C·V runs strip by strip (`matmul`): each strip needs only V's first cols_r rows, so it also does (n + 1)/2n of
the full product's multiply-adds.

`BlockTriangle` wraps the (S, N) tensor (a parameter, or a per-call copy in another dtype) for the code that needs
its structure: the product, the row sums, row-wise maps, and `full()` for the paths that materialise
probabilities. Elementwise work (the band, a dtype) runs on the (S, N) tensor itself. Every strip is a view, so
gradients reach the stored values.
"""

import functools

import torch
import torch.nn.functional as F

BLOCK = 256  # rows per strip: `patch_model` holds a decoder's constants so from T = 2·BLOCK on

@functools.lru_cache(maxsize=16)
def strip_bounds(seq_len, block):
    """((row start, row end, columns, flat offset), ...) of each strip, and N, the values per head."""
    bounds, offset = [], 0
    for start in range(0, seq_len, block):
        end = min(start + block, seq_len)  # the last strip may be shorter; its columns are all T
        bounds.append((start, end, end, offset))
        offset += (end - start) * end
    return tuple(bounds), offset


def block_triangle_size(seq_len, block):
    """N: values per head of T × T lower-triangular matrices held in strips of `block` rows."""
    return strip_bounds(seq_len, block)[1]


def pack_blocks(full, block):
    """(S, T, T) → (S, N): the strips of `full`, row-major each, end to end (entries above them are dropped)."""
    T = full.shape[-1]
    bounds, _ = strip_bounds(T, block)
    return torch.cat([full[:, start:end, :cols].reshape(full.shape[0], -1) for start, end, cols, _ in bounds], dim=1)


class BlockTriangle:
    """(S, T, T) lower-triangular matrices as (S, N) strips (`pack_blocks`); see the module docstring."""

    def __init__(self, values, seq_len, block):
        self.values, self.seq_len, self.block = values, seq_len, block
        self.bounds, size = strip_bounds(seq_len, block)
        if values.shape[-1] != size:
            raise ValueError(f"{values.shape[-1]} values per head are not T={seq_len}'s strips of {block} rows "
                             f"({size})")

    @property
    def shape(self):
        return torch.Size((self.values.shape[0], self.seq_len, self.seq_len))

    @property
    def dtype(self):
        return self.values.dtype

    def strips(self):
        """(row start, row end, (S, rows, cols) view) per strip."""
        S = self.values.shape[0]
        for start, end, cols, offset in self.bounds:
            yield start, end, self.values[:, offset:offset + (end - start) * cols].view(S, end - start, cols)

    def elementwise(self, fn):
        """fn applied to the stored values (abs, a dtype, the band's product): a BlockTriangle of the same strips."""
        return BlockTriangle(fn(self.values), self.seq_len, self.block)

    def map_rows(self, fn):
        """fn applied to each strip, (S, rows, cols) → the same shape, for maps of whole rows (a strip's rows hold
        every nonzero entry of theirs, so a row-wise map sees the same row as on the full matrix)."""
        S = self.values.shape[0]
        return BlockTriangle(torch.cat([fn(strip).reshape(S, -1) for _, _, strip in self.strips()], dim=1),
                             self.seq_len, self.block)

    def row_sums(self, dtype):
        """Σ_j C_ij in `dtype`: (S, T)."""
        return torch.cat([strip.sum(-1, dtype=dtype) for _, _, strip in self.strips()], dim=1)

    def matmul(self, rhs, in_place=False):
        """C @ rhs for rhs (S or 1, T, K) → (S, T, K), strip by strip (each reads rhs's first `cols` rows only);
        C @ rhs up to the order of the float sums (the zeros are skipped). in_place: write the strips' products into
        one output (not under autograd or torch.compile: `constant_math.in_place_ok`) instead of concatenating."""
        parts = ((start, end, torch.matmul(strip, rhs[:, :strip.shape[-1]])) for start, end, strip in self.strips())
        if not in_place:
            return torch.cat([part for _, _, part in parts], dim=1)
        out = None
        for start, end, part in parts:  # (matmul's out= into these strided views measured slower than the copy)
            if out is None:
                out = part.new_empty(part.shape[0], self.seq_len, part.shape[-1])
            out[:, start:end] = part
        return out

    def full(self):
        """The (S, T, T) matrices, zeros above the strips (differentiable)."""
        return torch.cat([F.pad(strip, (0, self.seq_len - strip.shape[-1])) for _, _, strip in self.strips()], dim=1)


def dense(constant):
    """(S, T, T) constants as a tensor, whichever way they are held."""
    return constant.full() if isinstance(constant, BlockTriangle) else constant


def stored_values(constant):
    """The tensor the constants' values are stored in ((S, N) strips, or the (S, T, T) matrices)."""
    return constant.values if isinstance(constant, BlockTriangle) else constant
