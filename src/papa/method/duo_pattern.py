"""A PAPA ranking as DuoAttention's attention pattern (Xiao et al. 2024, mit-han-lab/duo-attention), so that
DuoAttention's own loader and kvpress's DuoAttentionPress can run a model with PAPA's order of K/V groups.

The format, as `duo_attn.utils.load_attn_pattern` reads it: a folder with

    full_attention_heads.tsv   one row per layer, one column per K/V head, tab-separated, no header (numpy.savetxt),
                               a score in [0, 1] each: 1 a full-attention ("retrieval") head, 0 a streaming one
    config.json                {"sink_size": s, "recent_size": r, ...}: what a streaming head keeps

DuoAttention keeps as full the heads at or above the `sparsity` quantile of the scores (`sparsify_attention_heads`, over
all layers at once); kvpress's DuoAttentionPress streams the round(N · ratio) lowest (`argsort`). A PAPA ranking
makes K/V groups constant in order, a group once all its query heads are: the r-th of N groups to go scores
r / (N − 1), so both readers stream exactly PAPA's first groups at every fraction (the groups' scores are evenly
spaced, far wider apart than DuoAttention's 1e-6 tie-breaking noise). The scores are ranks, not the ranker's own
numbers: every ranker's order exports alike.
"""

import json
import os

import numpy as np

from ..errors import PapaError
from ..io import atomic_files

PATTERN_FILE, CONFIG_FILE = "full_attention_heads.tsv", "config.json"


def group_order(sorted_heads, num_layers, num_heads, num_kv_heads):
    """[(layer, K/V head)] in the order the ranking completes them: a group goes when its last query head does."""
    if num_heads % num_kv_heads:
        raise PapaError(f"{num_heads} query heads do not split into {num_kv_heads} K/V groups")
    size = num_heads // num_kv_heads
    left = {(layer, g): size for layer in range(num_layers) for g in range(num_kv_heads)}
    order = []
    for layer, head in sorted_heads:
        group = (layer, head // size)
        left[group] -= 1
        if left[group] == 0:
            order.append(group)
    if len(order) != len(left):
        raise PapaError(f"the ranking leaves {len(left) - len(order)} K/V groups incomplete: it must list every head "
                        "(sorted_heads.json of a ranking run)")
    return order


def pattern_scores(order, num_layers, num_kv_heads):
    """(layers, K/V heads) float64: the r-th group of `order` scores r / (N − 1) (0: made constant first)."""
    scores = np.zeros((num_layers, num_kv_heads))
    last = max(len(order) - 1, 1)
    for rank, (layer, group) in enumerate(order):
        scores[layer, group] = rank / last
    return scores


def write_pattern(folder, scores, sink_size, recent_size, source=None):
    """full_attention_heads.tsv and config.json in `folder`, atomically; `source`: recorded in the config."""
    for value, flag in ((sink_size, "--sink_size"), (recent_size, "--recent_size")):
        if not isinstance(value, int) or value < 1:
            raise PapaError(f"{flag} must be a positive number of tokens; got {value!r}")
    config = {"sink_size": sink_size, "recent_size": recent_size, "papa_ranking": source,
              "scores": "rank / (groups - 1): 0 made constant first (papa.method.duo_pattern)"}
    with atomic_files(folder) as tmp:
        np.savetxt(os.path.join(tmp, PATTERN_FILE), scores, delimiter="\t")
        with open(os.path.join(tmp, CONFIG_FILE), "w") as f:
            json.dump(config, f)
            f.write("\n")
