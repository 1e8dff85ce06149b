"""`papa-duo-export SORT_DIR --model_name_or_path M --output_dir OUT`: a ranking's K/V groups as DuoAttention's attention
pattern (papa.method.duo_pattern)."""

import argparse

from . import command


def parse(argv):
    parser = argparse.ArgumentParser(
        prog="papa-duo-export",
        description="Write a PAPA ranking (sorted_heads.json) as DuoAttention's attention pattern: "
                    "full_attention_heads.tsv (layers x K/V heads, the groups PAPA makes constant first scoring "
                    "lowest) and config.json (sink_size, recent_size), for duo_attn.utils.load_attn_pattern and "
                    "kvpress's DuoAttentionPress.")
    parser.add_argument("sorting_heads_dir", metavar="SORT_DIR", help="A ranking run's folder (or its sorted_heads.json).")
    parser.add_argument("--model_name_or_path", required=True,
                        help="The ranked model (a folder, a hub name, or smollm2 / gemma3): its layers, query heads "
                             "and K/V heads.")
    parser.add_argument("--output_dir", required=True, help="The pattern's folder (written atomically).")
    parser.add_argument("--sink_size", type=int, default=64,
                        help="Tokens a streaming head keeps from the start (default 64, DuoAttention's evaluation).")
    parser.add_argument("--recent_size", type=int, default=256,
                        help="Recent tokens a streaming head keeps (default 256, DuoAttention's evaluation).")
    return parser.parse_args(argv)


def run(argv):
    from transformers import AutoConfig

    from ..console import stage
    from ..method.duo_pattern import group_order, pattern_scores, write_pattern
    from ..method.ranking import load_sorted_heads
    from ..models.bundled import local_model_path

    args = parse(argv)
    config = AutoConfig.from_pretrained(local_model_path(args.model_name_or_path))
    L, H = config.num_hidden_layers, config.num_attention_heads
    G = getattr(config, "num_key_value_heads", None) or H
    order = group_order(load_sorted_heads(args.sorting_heads_dir, L, H), L, H, G)
    write_pattern(args.output_dir, pattern_scores(order, L, G), args.sink_size, args.recent_size,
                  source=str(args.sorting_heads_dir))
    stage(f"wrote DuoAttention's pattern of {len(order)} K/V groups ({L} layers x {G}) to {args.output_dir}")


def main(argv=None):
    return command(run, argv)
