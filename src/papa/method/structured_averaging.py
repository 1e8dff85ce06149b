"""Toeplitz-plus-sink constants of a causal decoder, averaged straight from the data with no (T, T) tensor kept.

papa.families.structured defines the constant: sink[j] on the first S keys, profile[i − j] on the others. Its
`toeplitz` values are count-weighted means of the attention the data gives, over every (example, query i, key j)
pair the padding keeps:

    sink[j]    = Σ A[b, i, j] m_bi m_bj / Σ m_bi m_bj          over i ≥ j, for j < S
    profile[d] = Σ A[b, i, i − d] m_bi m_b,i−d / Σ m_bi m_b,i−d   over i − d ≥ S

These are the least-squares fit of the full averages C = sums / counts (papa.method.averaging) by a matrix of that
structure, each entry weighted by its count (how many examples saw that pair): the weighted mean of a column, or
of a diagonal, is what minimises Σ counts · (C − fit)² there. Without padding every count is the number of
examples, and this is the plain Frobenius fit. (tests/test_structured.py checks it against a least-squares
solve on full averages.)

`StructuredAverager` has the `add_batch` / `add_attention` interface of `AttentionAverager`, so the averaging pass's
hooks feed either (papa.method.averaging.accumulate_attention's `averager=`). Per batch it reads the layer's
probabilities' S sink columns and T diagonals under the padding pattern, summed over the batch, and keeps only
those: O(L·H·T) numbers however long the context, and no T × T tensor beside the probabilities the eager layer makes.
"""

from dataclasses import dataclass
import torch


def causal_pair_counts(valid, sink_len):
    """For a (B, T) padding mask: (counts of key j < S over rows i ≥ j: (S,), counts of distance d over keys
    j ≥ S: (T,)), summed over the batch, in float64."""
    m = valid.double()
    B, T = m.shape
    S = min(sink_len, T)
    rows_from = m.flip(-1).cumsum(-1).flip(-1)  # (B, T): Σ_{i ≥ j} m_i
    sink = (m[:, :S] * rows_from[:, :S]).sum(0)
    keys = m.clone()
    keys[:, :S] = 0
    n = 1 << (2 * T - 1).bit_length()
    # Σ_i m_i · keys_{i−d}: the cross-correlation of m with the keys, exact integers up to FFT rounding
    correlation = torch.fft.irfft(torch.fft.rfft(m, n) * torch.fft.rfft(keys, n).conj(), n)[:, :T]
    return sink, correlation.sum(0).round()


def diagonal_sums(matrices, first_key):
    """(..., T, T) → (..., T): entry d sums the d-th lower diagonal, matrices[..., i, i − d], over keys ≥ first_key."""
    T = matrices.shape[-1]
    return torch.stack([matrices.diagonal(-d, dim1=-2, dim2=-1)[..., first_key:].sum(-1, dtype=torch.float64)
                        for d in range(T)], dim=-1)


class StructuredAverager:
    """Streaming sums for `toeplitz` constants: S sink columns and T diagonals per head (module docstring)."""

    def __init__(self, num_layers, num_heads, seq_len, sink_len=1, device="cpu"):
        self.seq_len, self.sink_len = seq_len, min(sink_len, seq_len)
        self.sink_sums = torch.zeros(num_layers, num_heads, self.sink_len, dtype=torch.float64, device=device)
        self.profile_sums = torch.zeros(num_layers, num_heads, seq_len, dtype=torch.float64, device=device)
        self.sink_counts = torch.zeros(self.sink_len, dtype=torch.float64, device=device)
        self.profile_counts = torch.zeros(seq_len, dtype=torch.float64, device=device)
        self.num_examples = 0

    @torch.no_grad()
    def add_batch(self, attention_mask):
        """Count a batch's pairs; attention_mask: (B, T) with 1 for real tokens."""
        sink, profile = causal_pair_counts(attention_mask.to(self.sink_counts.device), self.sink_len)
        self.sink_counts += sink
        self.profile_counts += profile
        self.num_examples += attention_mask.shape[0]

    @torch.no_grad()
    def add_attention(self, layer, probs, valid):
        """probs: (B, H, T, T) of one layer; valid: (B, T) float. Reads the S sink columns and the T diagonals of
        every example's probabilities under its padding pattern m_i m_j straight from `probs`, without a masked or
        batch-summed (B or 1, H, T, T) copy: at long T the layer's own probabilities stay the pass's only T × T
        tensor (at T = 8 192 each such tensor of SmolLM2 is 2.4 GB)."""
        S, T = self.sink_len, probs.shape[-1]
        m = valid.to(probs.dtype)  # (B, T): 0/1, so every product below is exact in probs' dtype
        sink = probs[..., :S] * (m[:, None, :, None] * m[:, None, None, :S])  # (B, H, T, S): rows i, sink keys j
        self.sink_sums[layer] += sink.sum((0, 2), dtype=torch.float64).to(self.sink_sums.device)
        profile = torch.zeros(probs.shape[1], T, dtype=torch.float64, device=probs.device)  # (H, T)
        for d in range(T - S):  # diagonal d: (i, j) = (k + d, k); keys j = k ≥ S
            pairs = m[:, S + d:] * m[:, S:T - d]  # (B, T − S − d): m_i m_{i−d}
            profile[:, d] = (probs.diagonal(-d, dim1=-2, dim2=-1)[..., S:] * pairs[:, None]).sum((0, 2),
                                                                                               dtype=torch.float64)
        self.profile_sums[layer] += profile.to(self.profile_sums.device)

    def add_outputs(self, layer, context, valid):
        raise ValueError("structured constants record no head outputs (mean_outputs needs the full averager)")

    def all_reduce(self):
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            for tensor in (self.sink_sums, self.profile_sums, self.sink_counts, self.profile_counts):
                dist.all_reduce(tensor)
        return self

    def constants(self):
        """(sink (L, H, S), profile (L, H, T)) in float32; 0 where no pair was seen."""
        return (_mean(self.sink_sums, self.sink_counts).float(), _mean(self.profile_sums, self.profile_counts).float())


def _mean(sums, counts):
    return torch.where(counts > 0, sums / counts.clamp_min(1), torch.zeros((), dtype=sums.dtype))


def fit_full_averages(averages, counts, sink_len=1):
    """The same constants from full averages: (L, H, T, T) averages and their (T, T) pair counts (the full pass's
    pattern sums) → (sink (L, H, S), profile (L, H, T)), the count-weighted means over each column and diagonal."""
    T = averages.shape[-1]
    S = min(sink_len, T)
    causal = torch.ones(T, T, dtype=torch.bool, device=counts.device).tril()
    weights = (counts.double() * causal)  # (T, T)
    weighted = averages.double() * weights
    sink = _mean(weighted[..., :S].sum(-2), weights[:, :S].sum(0))
    profile = _mean(diagonal_sums(weighted, S), diagonal_sums(weights, S))
    return sink.float(), profile.float()


STRUCTURED_NAME = "structured_constants.pt"
STRUCTURED_FORMAT = "papa-structured-constants"
STRUCTURED_VERSION = 1


@dataclass(frozen=True)
class ConstantKind:
    """What constant heads attend with (--constants): the averaging stage's file, and how it is made."""

    name: str
    file: str  # what the averaging stage writes and the runs read
    structured: bool  # a sink and a profile per head, any length, a decoder's (else T x T matrices)
    averaged: bool  # from the training data (else from the flags alone)
    default_sinks: int | None = None  # --sink_tokens when not given


CONSTANT_KINDS = {k.name: k for k in (
    ConstantKind("full", "avgs.pt", structured=False, averaged=True),
    ConstantKind("toeplitz", STRUCTURED_NAME, structured=True, averaged=True, default_sinks=1),
    ConstantKind("sink_window", STRUCTURED_NAME, structured=True, averaged=False, default_sinks=4),
)}
KINDS = tuple(name for name, kind in CONSTANT_KINDS.items() if kind.structured)  # what structured_constants.pt holds


def save_structured(path, sink, profile, kind, seq_len, num_examples):
    """Write `structured_constants.pt` atomically: a dict with format, version, kind, sink [L, H, S], profile
    [L, H, D], the length they were averaged at and the examples they saw (docs/artifacts.md)."""
    from ..io import atomic_path

    record = {"format": STRUCTURED_FORMAT, "version": STRUCTURED_VERSION, "kind": kind, "sink": sink.float().cpu(),
              "profile": profile.float().cpu(), "seq_len": int(seq_len), "num_examples": int(num_examples)}
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:  # a file object: the same record gives the same bytes (papa.io.save_tensor)
            torch.save(record, f)


def read_structured(path):
    """The record `save_structured` wrote; a missing, unreadable or foreign file is one clear PapaError."""
    import os

    from ..artifacts import check_structured
    from ..errors import PapaError, first_line

    if not os.path.isfile(path):
        raise PapaError(f"structured constants not found: {path} does not exist (run the averaging script with "
                        "--constants toeplitz, or make sink_window ones with papa.method.structured_averaging."
                        "sink_window)")
    try:
        record = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise PapaError(f"{path} is not a readable structured-constants file ({type(err).__name__}: "
                        f"{first_line(err)[:160]})") from None
    if not isinstance(record, dict) or record.get("format") != STRUCTURED_FORMAT:
        raise PapaError(f"{path} is not a structured-constants file (no format {STRUCTURED_FORMAT!r}): full averages "
                        "are avgs.pt, passed with --static_heads_dir")
    if record.get("version") != STRUCTURED_VERSION:
        raise PapaError(f"{path} is structured-constants version {record.get('version')!r}; this papa reads version "
                        f"{STRUCTURED_VERSION}: upgrade papa, or recompute them with this one")
    check_structured(record, path, KINDS)
    return record


def sink_window(num_layers, num_heads, sinks=4, window=64):
    """StreamingLLM's pattern as constants: uniform weight on the first `sinks` tokens and on the last `window`
    distances (0 … window − 1, the token itself included) → (sink [L, H, sinks], profile [L, H, window])."""
    return torch.ones(num_layers, num_heads, sinks), torch.ones(num_layers, num_heads, window)
