"""Head ranking: trained mixing weights λ → `lambdas.npy` and `sorted_heads.json`.

After a mix-mode ("sort calculating") run, head (l, h) with a small λ leans on its constant
matrix. `sorted_heads.json` lists all heads as [layer, head] in ascending order of λ — the head
that prefers its constant matrix most comes first — exactly the original's formats. The first k
rows are the heads made constant in a `--static_heads_num k` run.
"""

import os

import numpy as np

from ..artifacts import RERANK, check_ranking
from ..errors import PapaError
from ..io import load_json, save_json, save_npy


def sorted_heads_from_lambdas(lambdas):
    """[[layer, head], ...] in ascending order of λ (stable, so ties keep layer-major order)."""
    lambdas = np.asarray(lambdas)
    num_heads = lambdas.shape[1]
    order = np.argsort(lambdas.reshape(-1), kind="stable")
    return [[int(i // num_heads), int(i % num_heads)] for i in order]


def save_ranking(lambdas, output_dir):
    """Write `lambdas.npy` (float [L, H]) and `sorted_heads.json`, each atomically."""
    lambdas = np.asarray(lambdas, dtype=np.float32)
    save_npy(lambdas, os.path.join(output_dir, "lambdas.npy"))
    save_json(sorted_heads_from_lambdas(lambdas), os.path.join(output_dir, "sorted_heads.json"))


def load_sorted_heads(folder, num_layers, num_heads):
    """Read and validate `sorted_heads.json` from `folder` (or the file itself)."""
    path = os.path.join(folder, "sorted_heads.json") if os.path.isdir(folder) else folder
    if not os.path.isfile(path):
        raise PapaError(
            f"head ranking not found: {path} does not exist (run run_papa_*.py --sort_calculating True "
            "and pass its --output_dir as --sorting_heads_dir)"
        )
    return check_ranking(load_json(path, RERANK), path, num_layers, num_heads)


def check_static_heads_num(k, num_layers, num_heads):
    """k constant heads must be between 0 and all of the model's heads."""
    total = num_layers * num_heads
    if not 0 <= k <= total:
        raise PapaError(f"--static_heads_num must be between 0 and {total} (the model's heads); got {k}")


def first_k_heads(sorted_heads, k, num_layers, num_heads):
    """{layer: [heads]} of the first k ranked heads (the original's get_sorting_heads_dict)."""
    check_static_heads_num(k, num_layers, num_heads)
    if k > len(sorted_heads):
        raise PapaError(f"the head ranking has {len(sorted_heads)} rows, fewer than --static_heads_num {k}")
    by_layer = {}
    for layer, head in sorted_heads[:k]:
        by_layer.setdefault(layer, []).append(head)
    return by_layer
