"""How exact a decoder's float32 attention sums are: the same averaging pass summed in float32 (the default for
lower triangles) and in float64, compared (findings/long_context_sum_precision/README.md).

    HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 python findings/long_context_sum_precision/sum_precision.py \
        --seq_len 128 --blocks 256

SmolLM2-135M on lm_qnli's blocks (QNLI's sentences), batch --batch; one forward per batch feeds both averagers.
Prints the largest absolute and relative differences of the sums and of the averages, as JSON.
"""

import argparse
import json
import os

import torch
from torch.utils.data import DataLoader
from transformers import AutoModel, default_data_collator

from papa.data.lm import lm_blocks, load_lm_texts
from papa.data.task_folders import resolve_data_dir
from papa.data.tasks import get_task
from papa.method.averaging import AttentionAverager, accumulate_attention
from papa.models.bundled import local_model_path
from papa.models.pretrained import load_config_and_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root


class Both(AttentionAverager):
    """Float32 lower triangles, and a float64 copy of the same sums beside them."""

    def __init__(self, num_layers, num_heads, seq_len, device="cpu", head_dim=None, *rest):
        shape = (num_layers, num_heads, seq_len, device, head_dim)
        super().__init__(*shape, lower_triangle=True, sum_dtype=torch.float32)
        self.exact = AttentionAverager(*shape, lower_triangle=True, sum_dtype=torch.float64)

    def add_batch(self, attention_mask):
        super().add_batch(attention_mask)
        self.exact.add_batch(attention_mask)

    def add_attention(self, layer, probs, valid):
        super().add_attention(layer, probs, valid)
        self.exact.add_attention(layer, probs, valid)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--blocks", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--data_dir", default=os.path.join(ROOT, "..", "shared", "data"))
    args = parser.parse_args()
    task = get_task("lm_qnli")
    path = local_model_path("smollm2")
    _, _, tokenizer = load_config_and_tokenizer(path, None, task, None, args.seq_len)
    texts = load_lm_texts(task, ("train",), data_dir=resolve_data_dir(args.data_dir, task, False))
    blocks = lm_blocks(texts, tokenizer, args.seq_len, {"train": args.blocks})["train"]
    blocks = blocks.with_format("torch", columns=["input_ids", "attention_mask"])
    model = AutoModel.from_pretrained(path, attn_implementation="eager")
    import papa.method.averaging as averaging

    original = averaging.AttentionAverager
    averaging.AttentionAverager = Both  # accumulate_attention builds its averager by this name
    try:
        both = accumulate_attention(model, DataLoader(blocks, batch_size=args.batch, collate_fn=default_data_collator),
                                    args.seq_len)
    finally:
        averaging.AttentionAverager = original
    f32, f64 = both.attention_sums.double(), both.exact.attention_sums
    avg32, avg64 = both.stored_averages().double(), both.exact.stored_averages().double()
    seen = f64 > 1e-3  # relative differences where a sum is not tiny
    print(json.dumps({
        "seq_len": args.seq_len, "blocks": len(blocks), "batch": args.batch, "batches": -(-len(blocks) // args.batch),
        "sums_max_abs_diff": (f32 - f64).abs().max().item(), "sums_max": f64.max().item(),
        "sums_max_rel_diff": ((f32 - f64).abs()[seen] / f64[seen]).max().item(),
        "avgs_max_abs_diff": (avg32 - avg64).abs().max().item(),
        "avgs_max_rel_diff": ((avg32 - avg64).abs()[seen] / avg64[seen]).max().item(),
        "float32_eps": torch.finfo(torch.float32).eps}, indent=1))


if __name__ == "__main__":
    main()
