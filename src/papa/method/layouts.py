"""How `avgs.pt` and `attention_sums.pt` are laid out on disk: the original's full tensor, or a decoder's lower triangle.

Layout 1 (the original's, every encoder, every file written before layout 2): a float32 tensor [L, H, T, T].

Layout 2 (decoders): a decoder attends only to keys j ≤ i, so every entry above the diagonal of its averages (and
sums) is exactly 0. Only the lower triangle is stored, row by row (row i's entries j = 0..i start at i(i+1)/2):

    {"papa_layout": 2, "layout": "lower_triangle", "seq_len": T, "values": float32 [L, H, T(T+1)/2]}

half the bytes of layout 1 (T(T+1)/2 against T² per head). `unpack` turns it back into layout 1's values exactly
(the same float32 numbers, zeros above the diagonal). Both load through `load_head_tensor`, layout 2 memory-mapped
as a `PackedConstants`, which hands out one layer's heads at a time (`heads`), so a patched model never holds
the whole [L, H, T, T] tensor, nor the file's pages, beside its own constants.
"""

import functools
import os

import torch

from ..errors import PapaError, first_line

LAYOUT_KEY = "papa_layout"
LOWER_TRIANGLE = 2  # the layout number in the file; 1 is the original's bare tensor


def triangle_size(seq_len):
    return seq_len * (seq_len + 1) // 2


@functools.lru_cache(maxsize=4)
def _flat_positions(seq_len):
    """The flat indices i·T + j of the lower triangle (j ≤ i), row by row: (T(T+1)/2,) int64."""
    rows, cols = torch.tril_indices(seq_len, seq_len)
    return rows * seq_len + cols


def pack(full):
    """[..., T, T] → [..., T(T+1)/2]: the lower triangle, row by row (what is above the diagonal is dropped)."""
    T = full.shape[-1]
    return full.reshape(*full.shape[:-2], T * T).index_select(-1, _flat_positions(T).to(full.device))


def unpack(packed, seq_len):
    """[..., T(T+1)/2] → [..., T, T], zeros above the diagonal (differentiable: a trainable triangle stays one)."""
    if packed.shape[-1] != triangle_size(seq_len):
        raise PapaError(f"a lower triangle of T={seq_len} has {triangle_size(seq_len)} entries, got {packed.shape[-1]}")
    flat = packed.new_zeros(*packed.shape[:-1], seq_len * seq_len)
    flat = flat.index_copy(-1, _flat_positions(seq_len).to(packed.device), packed)
    return flat.view(*packed.shape[:-1], seq_len, seq_len)


def packed_record(values, seq_len):
    """What layout 2's file holds: `values` [L, H, T(T+1)/2]."""
    return {LAYOUT_KEY: LOWER_TRIANGLE, "layout": "lower_triangle", "seq_len": int(seq_len), "values": values}


def is_packed_record(obj):
    return isinstance(obj, dict) and LAYOUT_KEY in obj


class PackedConstants:
    """A layout-2 file, read lazily: `shape` is the full [L, H, T, T]; `heads(layer, heads)` the full (S, T, T)
    matrices of some heads of one layer (the file memory-mapped for that call only); `full()` all of them;
    indexing `[layer]`, `[layer, head]` and `numpy.asarray` work as on layout 1's tensor."""

    def __init__(self, path, shape, dtype=torch.float32):
        self.path, self.shape, self.dtype = path, torch.Size(shape), dtype
        self.seq_len = self.shape[-1]

    def dim(self):
        return 4

    def _values(self):
        return torch.load(self.path, map_location="cpu", weights_only=True, mmap=True)["values"]

    def packed(self, layer=None, heads=None):
        """The stored triangles [L, H, N] (or of one layer's `heads`: [S, N]), copied out of the file."""
        values = self._values()
        if layer is None:
            return values.clone()
        chosen = values[layer] if heads is None else values[layer, list(heads)]
        return chosen.clone()

    def layers(self):
        """The stored triangles a layer at a time, [H, N] each, the file mapped once (what papa.artifacts checks)."""
        values = self._values()
        for layer in range(values.shape[0]):
            yield values[layer]

    def heads(self, layer, heads=None, dtype=torch.float32, device="cpu"):
        return unpack(self.packed(layer, heads), self.seq_len).to(device, dtype)

    def full(self):
        return unpack(self.packed(), self.seq_len)

    def __getitem__(self, key):
        if isinstance(key, tuple):
            layer, rest = key[0], key[1:]
            return self.heads(int(layer))[rest] if rest else self.heads(int(layer))
        return self.heads(int(key))

    def __array__(self, dtype=None, copy=None):
        array = self.full().numpy()
        return array if dtype is None else array.astype(dtype)

    def __repr__(self):
        return f"PackedConstants({self.path!r}, shape={list(self.shape)})"


def read_head_file(path, producer):
    """The tensor of a layout-1 file, or a `PackedConstants` of a layout-2 one; unreadable: a PapaError."""
    mapped = True
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # files of the old (pre-zip) serialisation cannot be mapped: read them whole
        mapped = False
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # torch's own message runs to many lines of advice that does not apply here
            raise PapaError(f"{path} is not a readable tensor file ({type(err).__name__}: {first_line(err)[:160]}); "
                            f"{producer}") from None
    if is_packed_record(obj):
        return _packed_constants(path, obj)
    if not isinstance(obj, torch.Tensor):
        raise PapaError(f"{path} holds a {type(obj).__name__}, not a [layers, heads, ...] tensor")
    return obj.clone() if mapped else obj  # read off the file once; the mapping goes with `obj`


def _packed_constants(path, record):
    version, values, seq_len = record.get(LAYOUT_KEY), record.get("values"), record.get("seq_len")
    if version != LOWER_TRIANGLE:
        raise PapaError(f"{path} is in avgs layout {version!r}, which this papa does not know (it reads layouts 1 "
                        f"and {LOWER_TRIANGLE}): upgrade papa, or recompute the averages with this one")
    if not isinstance(values, torch.Tensor) or values.dim() != 3 or not isinstance(seq_len, int) \
            or values.shape[-1] != triangle_size(seq_len):
        raise PapaError(f"{path} is a damaged lower-triangle file (values {getattr(values, 'shape', None)}, "
                        f"T={seq_len!r}); recompute it with the averaging script")
    return PackedConstants(os.fspath(path), (*values.shape[:2], seq_len, seq_len), values.dtype)
