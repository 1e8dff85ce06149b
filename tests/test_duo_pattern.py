"""A PAPA ranking as DuoAttention's attention pattern (papa.method.duo_pattern, papa-duo-export), read back by the
format's own readers, copied here from their sources: DuoAttention's `load_attn_pattern` and
`sparsify_attention_heads` (duo_attn/utils.py) and kvpress 0.5.5's DuoAttentionPress.post_init_from_model, which
must stream exactly the K/V groups PAPA makes constant first, at every fraction."""

import json

import numpy as np
import pytest
import transformers

from papa.errors import PapaError
from papa.method.duo_pattern import CONFIG_FILE, PATTERN_FILE, group_order, pattern_scores, write_pattern


def load_attn_pattern(attn_load_dir):  # duo_attn/utils.py, verbatim but for the imports
    import os

    full_attention_heads = np.loadtxt(
        os.path.join(attn_load_dir, "full_attention_heads.tsv"),
        dtype=float,
        delimiter="\t",
    )
    full_attention_heads = np.clip(full_attention_heads, 0, 1)
    config = json.load(open(os.path.join(attn_load_dir, "config.json")))
    sink_size = config["sink_size"]
    recent_size = config["recent_size"]
    return full_attention_heads, sink_size, recent_size


def sparsify_attention_heads(full_attention_heads, threshold=None, sparsity=None):  # duo_attn/utils.py, verbatim
    # add a very small random noise to full_attention_heads to break ties
    full_attention_heads += np.random.uniform(0, 1e-6, full_attention_heads.shape)

    if sparsity is not None:
        # ignore the threshold and use the sparsity
        # set the sparsity small values to 0 and others to 1
        threshold = np.quantile(full_attention_heads, sparsity)
    else:
        assert threshold is not None, "Either threshold or sparsity must be provided"

    if sparsity >= 1:
        # all heads are pruned
        threshold = 2
    if sparsity <= 0:
        # no heads are pruned
        threshold = -1

    full_attention_heads = (full_attention_heads >= threshold).astype(float)
    sparsity = 1 - np.mean(full_attention_heads)
    return full_attention_heads, sparsity


def kvpress_streaming_mask(head_scores, head_compression_ratio):  # DuoAttentionPress.post_init_from_model's core
    n_pruned = round(head_scores.size * head_compression_ratio)
    streaming_mask = np.zeros(head_scores.shape, dtype=bool)
    if n_pruned > 0:
        indices = np.argsort(head_scores, axis=None)[:n_pruned]
        streaming_mask[np.unravel_index(indices, head_scores.shape)] = True
    return streaming_mask


L, H, G = 5, 6, 3  # 2 query heads per K/V group, 15 groups


def shuffled_heads(seed):
    """A ranking of every query head, its groups completing in a seeded order, heads of a group apart."""
    rng = np.random.default_rng(seed)
    heads = [[layer, head] for layer in range(L) for head in range(H)]
    return [heads[i] for i in rng.permutation(len(heads))]


def first_groups(sorted_heads, count):
    """The first `count` groups the ranking completes, computed here: a group's heads all among the first n heads."""
    size = H // G
    for n in range(len(sorted_heads) + 1):
        done = {(layer, head // size) for layer, head in sorted_heads[:n]}
        complete = [g for g in done if all([g[0], g[1] * size + i] in sorted_heads[:n] for i in range(size))]
        if len(complete) == count:
            return set(complete)
    raise AssertionError


@pytest.mark.parametrize("seed", [0, 1])
def test_duoattention_and_kvpress_stream_papas_first_groups_at_every_fraction(tmp_path, seed):
    sorted_heads = shuffled_heads(seed)
    write_pattern(tmp_path / "pattern", pattern_scores(group_order(sorted_heads, L, H, G), L, G), 64, 256)
    scores, sink, recent = load_attn_pattern(str(tmp_path / "pattern"))
    assert scores.shape == (L, G) and (sink, recent) == (64, 256)
    assert scores.min() == 0 and scores.max() == 1
    N = L * G
    for k in range(N + 1):
        np.random.seed(k)
        full, sparsity = sparsify_attention_heads(scores.copy(), sparsity=k / N)
        streaming = {(layer, g) for layer in range(L) for g in range(G) if full[layer, g] == 0}
        assert streaming == first_groups(sorted_heads, k) and sparsity == pytest.approx(k / N)
        mask = kvpress_streaming_mask(scores, k / N)
        assert {(int(a), int(b)) for a, b in zip(*np.nonzero(mask))} == first_groups(sorted_heads, k)


def test_the_command_writes_the_pattern_of_a_ranking_and_refuses_an_incomplete_one(tmp_path, capsys):
    from papa.cli.duo_export import main

    config = transformers.LlamaConfig(num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=G,
                                      hidden_size=24, intermediate_size=32, vocab_size=50)
    config.save_pretrained(tmp_path / "model")
    sorted_heads = shuffled_heads(3)
    (tmp_path / "sort").mkdir()
    (tmp_path / "sort" / "sorted_heads.json").write_text(json.dumps(sorted_heads))
    main([str(tmp_path / "sort"), "--model_name_or_path", str(tmp_path / "model"), "--output_dir",
          str(tmp_path / "out"), "--sink_size", "4", "--recent_size", "64"])
    scores, sink, recent = load_attn_pattern(str(tmp_path / "out"))
    assert (sink, recent) == (4, 64) and sorted(p.name for p in (tmp_path / "out").iterdir()) == [CONFIG_FILE,
                                                                                                   PATTERN_FILE]
    # the row of each layer, the column of each K/V head: the scores of the groups in their order of completion
    order = group_order(sorted_heads, L, H, G)
    assert [scores[layer, g] for layer, g in order] == pytest.approx(np.linspace(0, 1, L * G))
    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path / "sort"), "--model_name_or_path", str(tmp_path / "model"), "--output_dir",
              str(tmp_path / "bad"), "--sink_size", "0"])
    assert exit_.value.code != 0 and "--sink_size must be a positive number" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists() or not any((tmp_path / "bad").iterdir())  # nothing half-written
    with pytest.raises(PapaError, match="leaves 1 K/V groups incomplete"):
        group_order(sorted_heads[:-1], L, H, G)
