"""What a head's constant matrix looks like: where its average attention goes, in a few numbers and one word.

For an average matrix A (T, T) (rows: queries, each summing to 1 where some example reached it) the shares are
means over the query rows i ≥ 1 that carry mass (row 0 can only attend to itself in a decoder):

    first     A[i, 0]          the first token (a decoder's attention sink; an encoder's [CLS])
    previous  A[i, i − 1]      the token before
    self      A[i, i]          the token itself
    distance  Σ_j A[i, j]·|i − j|   how far, on average, the attended tokens are

`head_kind` names the share that holds at least half of the mass ("first token", "previous token", "self"),
else "broad". These describe the averages only: a broad average can come from a head that attends sharply to
content (a different place in every example), which is exactly what a constant matrix cannot copy.
"""

import torch

def head_profiles(avgs):
    """{"first", "previous", "self", "distance"}: (L, H) float64 tensors from averages (L, H, T, T)."""
    a = torch.as_tensor(avgs).double()
    T = a.shape[-1]
    i = torch.arange(1, T)
    rows = a[..., 1:, :]  # (L, H, T − 1, T): queries 1..T−1
    mass = rows.sum(-1)  # (L, H, T − 1); 0 where no example reached the query
    reached = (mass > 0).double()
    count = reached.sum(-1).clamp_min(1)

    def mean(per_row):  # mean over the reached query rows, each row's value relative to its mass
        return (per_row / mass.clamp_min(1e-30) * reached).sum(-1) / count

    distance = (rows * (i[:, None] - torch.arange(T)[None, :]).abs().double()).sum(-1)
    return {"first": mean(rows[..., 0]), "previous": mean(a[..., i, i - 1]), "self": mean(a[..., i, i]),
            "distance": mean(distance)}


def head_kind(profiles, layer, head):
    """One word for head (layer, head): the share of at least one half, else "broad"."""
    for key, kind in (("first", "first token"), ("previous", "previous token"), ("self", "self")):
        if profiles[key][layer, head] >= 0.5:
            return kind
    return "broad"
