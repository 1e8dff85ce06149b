"""Structured constant heads for a causal decoder: a sink over the first S positions plus a profile over relative
distance, O(S + D) numbers per head for any context length T.

    C[i, j] = sink[j]           for j < S and j ≤ i
            = profile[i − j]    for S ≤ j ≤ i and i − j < D
            = 0                 otherwise (above the diagonal, or farther back than D)

`toeplitz` constants are S = 1 and D = the length they were averaged at (papa.method.structured_averaging fits
them); StreamingLLM's `sink_window` pattern is sink = 1 on the first s positions and profile = 1 on the last w
distances. The head's attention is norm(C·P) as for a full constant (papa.families.constant_math): each row
renormalised over the keys the padding keeps. So row i of its output is

    m_i · (Σ_{j<S, j≤i} sink[j] m_j V_j + Σ_{S≤j≤i} profile[i − j] m_j V_j) / (the same sums with V_j = 1)

The sink term is a cumulative sum over S ≤ a few positions; the profile term is a causal convolution of the
profile with m·V along positions, O(T log T) by FFT instead of a T × T product (`structured_output`).
`dense` materialises C at any T, for the paths that need probabilities and for tests.
"""

import torch

from .constant_math import reduction_dtype, row_divisor


def dense(sink, profile, seq_len):
    """C as (H, T, T) for sink (H, S) and profile (H, D): the matrix of the module docstring at length T."""
    H, S = sink.shape
    D = profile.shape[1]
    i = torch.arange(seq_len, device=profile.device)
    distance = i[:, None] - i[None, :]  # (T, T): i − j
    in_profile = (distance >= 0) & (distance < D) & (i[None, :] >= S)
    C = torch.where(in_profile, profile[:, distance.clamp(0, D - 1)], profile.new_zeros(()))
    columns = min(S, seq_len)
    causal = (distance[:, :columns] >= 0).to(sink.dtype)  # (T, S): j ≤ i
    C[:, :, :columns] = sink[:, None, :columns] * causal
    return C


def causal_convolution(kernel, signal):
    """y[..., i] = Σ_{t=0}^{i} kernel[..., t] · signal[..., i − t], by FFT: kernel (..., D) and signal (..., T),
    broadcast against each other → (..., T), in float64.

    Always float64: an FFT's rounding error is relative to the largest term of the whole transform, not to each
    output, so in float32 the small outputs of early rows came out with absolute errors up to 9e-3 at T = 2048
    (benchmarks/structured_product.py); in float64 they are below 1e-6 of float32's own product."""
    T, D = signal.shape[-1], kernel.shape[-1]
    n = 1 << (T + min(D, T) - 1).bit_length()  # ≥ T + D − 1: no wrap-around into the first T outputs
    dtype = torch.float64
    spectrum = torch.fft.rfft(kernel[..., :T].to(dtype), n) * torch.fft.rfft(signal.to(dtype), n)
    return torch.fft.irfft(spectrum, n)[..., :T]


def structured_output(sink, profile, values, valid, window=None):
    """norm(C·P)·V for structured constants, without any (T, T) tensor.

    sink: (H, S); profile: (H, D); values: (B, T, G, d) with G K/V heads, H a multiple of G (query head h reads
    K/V head h // (H / G)); valid: (B, T) 1 for real tokens, or None → (B, T, H, d) in the values' dtype. `window`:
    a sliding-window layer's (a key j reaches row i while i − j < window): the profile is cut to the window and each
    row reads the sink's keys inside it. The sums run in float32 (float64 for float64 inputs) and each K/V head's
    transform is shared by its query heads.
    """
    B, T, G, d = values.shape
    H, S = sink.shape
    group = H // G
    dtype = reduction_dtype(values.dtype)
    m = values.new_ones(B, T, dtype=dtype) if valid is None else valid.to(dtype)  # (B, T)
    masked = values.to(dtype) * m[:, :, None, None]  # (B, T, G, d): m_j V_j
    sink = sink.to(dtype)
    profile = profile.to(dtype) if window is None else profile[:, :window].to(dtype)
    S = min(S, T)

    # the profile term: causal convolution along positions of profile_h with m·V, the sink's first S keys left out
    after_sink = masked.clone()
    after_sink[:, :S] = 0
    signal = after_sink.permute(0, 2, 3, 1).unsqueeze(2)  # (B, G, 1, d, T)
    kernel = profile.view(G, group, 1, -1)  # (G, group, 1, D)
    numerator = causal_convolution(kernel, signal).reshape(B, H, d, T)
    m_after = m.clone()
    m_after[:, :S] = 0
    denominator = causal_convolution(profile, m_after[:, None, :])  # (B, H, T)

    # the sink term: cumulative over the first S keys, the same for every row i ≥ S − 1 (without a window)
    weights = sink[:, :S].view(G, group, S)  # (G, group, S)
    sink_values = torch.einsum("gks,bsgd->bgkds", weights, masked[:, :S]).reshape(B, H, d, S).cumsum(-1)
    sink_mass = (sink[None, :, :S] * m[:, None, :S]).cumsum(-1)  # (B, H, S)
    rows = torch.arange(T, device=values.device)
    reach = rows.clamp(max=S - 1)  # row i sees the sink's keys up to min(i, S − 1)
    numerator = numerator + sink_values[..., reach]
    denominator = denominator + sink_mass[..., reach]
    if window is not None:  # less the sink's keys that fell out of row i's window: j ≤ i − window
        gone = (rows - window).clamp(max=S - 1)  # (T,) the last key out of reach, < 0: none
        out = gone >= 0
        numerator = numerator - torch.where(out, sink_values[..., gone.clamp(min=0)], 0.0)
        denominator = denominator - torch.where(out, sink_mass[..., gone.clamp(min=0)], 0.0)

    scale = m[:, None, :] / row_divisor(denominator)  # (B, H, T): 0 on padded and all-zero rows
    return (numerator * scale[:, :, None, :]).permute(0, 3, 1, 2).to(values.dtype)


# From this length on the FFT product beats materialising the (H, T, T) matrices per call
# (benchmarks/structured_product.py); below it, and in windowed layers, they are materialised.
FFT_MIN_LENGTH = 1024


def uses_fft(layer, seq_len):
    """Whether a structured layer's constant heads run the FFT product at this length: from FFT_MIN_LENGTH on, a
    sliding-window layer's too (`structured_output`'s window)."""
    return seq_len >= FFT_MIN_LENGTH


def layer_matrices(layer, seq_len):
    """A patched layer's structured constants as (S, T, T) matrices at length `seq_len`, inside the layer's band
    (a sliding window), for the paths that need whole matrices (probabilities, dropout, mix mode, windows)."""
    matrices = dense(layer.structured_sink, layer.structured_profile, seq_len)
    band = layer.papa_band(seq_len)
    return matrices if band is None else matrices * band.to(matrices.device, matrices.dtype)
