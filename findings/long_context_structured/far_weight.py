"""How much of a Toeplitz constant's last row lies beyond a distance, for the first k heads of a ranking.

    python findings/long_context_structured/far_weight.py --constants outputs/lc51/toep_t1024 --sorting_heads_dir SORT \
        --k 135 --beyond 127

The constant's row i is sink[j] (j < S) and profile[i − j] (j ≥ S), renormalised (papa.families.structured); for
the last row, i = T − 1, this prints the median, mean and largest share of that row's weight at distances > beyond,
and the median share on the sink, over the ranking's first k heads.
"""

import argparse
import json
import os

import torch


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--constants", required=True, help="a folder with a toeplitz structured_constants.pt")
    parser.add_argument("--sorting_heads_dir", required=True, help="a ranking folder (sorted_heads.json)")
    parser.add_argument("--k", type=int, default=135, help="the ranking's first k heads")
    parser.add_argument("--beyond", type=int, default=127, help="the distance beyond which weight counts as far")
    args = parser.parse_args()
    data = torch.load(os.path.join(args.constants, "structured_constants.pt"), weights_only=False)
    with open(os.path.join(args.sorting_heads_dir, "sorted_heads.json")) as f:
        heads = json.load(f)[:args.k]
    sink, profile = data["sink"].double(), data["profile"].double()  # (L, H, S), (L, H, T)
    S, T = sink.shape[-1], profile.shape[-1]
    last = T - 1  # row i = T − 1 sees keys S .. T − 1 at distances 0 .. T − 1 − S
    far, on_sink = [], []
    for layer, head in heads:
        near = profile[layer, head, :last - S + 1]
        total = sink[layer, head].sum() + near.sum()
        far.append(float(near[args.beyond + 1:].sum() / total))
        on_sink.append(float(sink[layer, head].sum() / total))
    far, on_sink = torch.tensor(far), torch.tensor(on_sink)
    print(f"{len(heads)} heads, T = {T}, last row: weight beyond distance {args.beyond}: median {far.median():.4f}, "
          f"mean {far.mean():.4f}, largest {far.max():.4f}; on the sink: median {on_sink.median():.4f}")


if __name__ == "__main__":
    main()
