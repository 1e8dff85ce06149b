"""Train a small real decoder here: a byte-level BPE tokenizer and a Llama-family causal LM on the shared text.

    nice -n 5 python benchmarks/train_decoder.py --data_dir ../shared/data --output_dir outputs/decoder_small

No pretrained decoder checkpoint is reachable offline (issue 26), so PAPA's decoder path needs weights trained
here. The text is every training sentence of the shared GLUE tasks (CoLA, SST-2, MRPC, WNLI; a pair's two
sentences one after the other) and of CoNLL-2003, in file order, each followed by the eos token, concatenated and
cut into --seq_len chunks as HF's run_clm.py does (the first 64 chunks of the dev/valid files the same way, for the validation loss).
The tokenizer is GPT-2's kind (byte-level BPE, `<|endoftext|>` as bos/eos/unk, no pad token: a consumer sets
pad = eos) saved as a GPT2 tokenizer class, so `add_prefix_space=True` works for pre-split words. The model is a
LlamaForCausalLM with grouped K/V and rotary embeddings, trained for --max_steps (deterministic for a --seed
on one machine and thread count; --max_minutes only stops early, and says so). --repeat_span_fraction plants a
copied span of real text (--repeat_span_min to --repeat_span_max tokens) in that share of the training chunks (induction heads form quickly when data repeats).

At the end it runs the attention check of benchmarks/decoder_heads.py (previous-token and induction heads, loss
on repeated random spans) and writes it beside the model as heads_check.md. Weights go to --output_dir (outside
git: outputs/ is ignored); never commit them.
"""

import argparse
import math
import os
import sys
import time
from pathlib import Path

import torch
from tokenizers import ByteLevelBPETokenizer
from transformers import GPT2TokenizerFast, LlamaConfig, LlamaForCausalLM

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from decoder_heads import check_heads, chunks, read_sentences  # noqa: E402  (a sibling script: the shared helpers)

from papa.io import save_json, save_text  # noqa: E402

EOS = "<|endoftext|>"


def train_tokenizer(sentences, vocab_size):
    bpe = ByteLevelBPETokenizer()  # GPT-2's pre-tokenizer and byte alphabet; no prefix space by default
    bpe.train_from_iterator(sentences, vocab_size=vocab_size, min_frequency=2, special_tokens=[EOS],
                            show_progress=False)
    # the GPT-2 class (not the bare PreTrainedTokenizerFast) honours add_prefix_space=True when loaded with it
    return GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, bos_token=EOS, eos_token=EOS, unk_token=EOS,
                             add_prefix_space=False)


def plant_repeated_spans(batch, fraction, generator, shortest=8, longest=32):
    """In `fraction` of the rows, copy a random span of `shortest`–`longest` tokens to a later place in the same
    row (real text, repeated in context: what an induction head predicts)."""
    batch = batch.clone()
    B, T = batch.shape
    for row in range(B):
        if torch.rand((), generator=generator) >= fraction:
            continue
        m = int(torch.randint(shortest, longest + 1, (), generator=generator))
        a = int(torch.randint(0, T - 2 * m, (), generator=generator))
        b = int(torch.randint(a + m, T - m + 1, (), generator=generator))
        batch[row, b:b + m] = batch[row, a:a + m]
    return batch


@torch.no_grad()
def validation_loss(model, data, batch_size):
    model.eval()
    losses = [model(input_ids=data[i:i + batch_size], labels=data[i:i + batch_size]).loss.item()
              for i in range(0, len(data), batch_size)]
    model.train()
    return sum(losses) / len(losses)


def learning_rate(step, args):
    """Linear warm-up, then cosine decay to a tenth."""
    if step < args.warmup_steps:
        return args.learning_rate * (step + 1) / args.warmup_steps
    progress = (step - args.warmup_steps) / max(1, args.max_steps - args.warmup_steps)
    return args.learning_rate * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", default=str(REPO.parent / "shared" / "data"),
                   help="shared data folder (glue/<Task>/train.tsv, dev.tsv; conll2003/train.txt, valid.txt); read only")
    p.add_argument("--output_dir", default=str(REPO / "outputs" / "decoder_small"),
                   help="where the model, tokenizer, training log and heads check go (outputs/ is not committed)")
    p.add_argument("--seed", type=int, default=0, help="seed of the initialisation, chunk order and planted spans")
    p.add_argument("--vocab_size", type=int, default=2048, help="BPE vocabulary size (with the 256 byte tokens)")
    p.add_argument("--seq_len", type=int, default=128, help="tokens per training chunk")
    p.add_argument("--num_layers", type=int, default=3, help="decoder layers")
    p.add_argument("--hidden_size", type=int, default=128, help="model width")
    p.add_argument("--num_heads", type=int, default=4, help="query heads per layer")
    p.add_argument("--num_kv_heads", type=int, default=2, help="key/value heads per layer (grouped K/V)")
    p.add_argument("--intermediate_size", type=int, default=512, help="SwiGLU feed-forward width")
    p.add_argument("--batch_size", type=int, default=8, help="chunks per training step")
    p.add_argument("--max_steps", type=int, default=1000, help="training steps (the schedule's length)")
    p.add_argument("--max_minutes", type=float, default=10.0,
                   help="stop early after this many minutes of training, recorded in the log (the machine is shared)")
    p.add_argument("--learning_rate", type=float, default=2e-3, help="peak AdamW learning rate")
    p.add_argument("--warmup_steps", type=int, default=50, help="linear warm-up steps")
    p.add_argument("--weight_decay", type=float, default=0.01, help="AdamW weight decay")
    p.add_argument("--repeat_span_fraction", type=float, default=0.0,
                   help="share of training chunks in which a span of the chunk's text is copied to a later place "
                        "(0: the text as it is)")
    p.add_argument("--repeat_span_min", type=int, default=8, help="shortest copied span, in tokens")
    p.add_argument("--repeat_span_max", type=int, default=32, help="longest copied span, in tokens")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (the machine is shared: 1-2)")
    p.add_argument("--eval_every", type=int, default=100, help="validation loss every this many steps")
    args = p.parse_args(argv)
    if args.num_heads % args.num_kv_heads or args.hidden_size % args.num_heads:
        p.error("--num_heads must be a multiple of --num_kv_heads and divide --hidden_size")
    if not 0.0 <= args.repeat_span_fraction <= 1.0 or not 1 <= args.repeat_span_min <= args.repeat_span_max:
        p.error("--repeat_span_fraction must lie in [0, 1] and 1 ≤ --repeat_span_min ≤ --repeat_span_max")
    if args.seq_len <= 2 * args.repeat_span_max:
        p.error("--seq_len must exceed twice --repeat_span_max (room for a span and its copy)")
    return args


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    train_text, dev_text = read_sentences(args.data_dir, "train"), read_sentences(args.data_dir, "dev")
    tokenizer = train_tokenizer(train_text, args.vocab_size)
    train, dev = chunks(tokenizer, train_text, args.seq_len), chunks(tokenizer, dev_text, args.seq_len)[:64]
    print(f"[train] {len(train_text)} sentences -> {train.numel()} tokens in {len(train)} chunks; vocab "
          f"{len(tokenizer)}; dev {dev.numel()} tokens ({time.perf_counter() - started:.0f}s)", flush=True)

    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=args.hidden_size, num_hidden_layers=args.num_layers,
                         num_attention_heads=args.num_heads, num_key_value_heads=args.num_kv_heads,
                         intermediate_size=args.intermediate_size, max_position_embeddings=4 * args.seq_len,
                         bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
                         tie_word_embeddings=True, use_cache=False)
    model = LlamaForCausalLM(config).train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                   {"params": rest, "weight_decay": 0.0}], lr=args.learning_rate, betas=(0.9, 0.95))
    generator = torch.Generator().manual_seed(args.seed)
    order, cursor, log = torch.randperm(len(train), generator=generator), 0, []
    train_started, stopped_early = time.perf_counter(), False
    for step in range(args.max_steps):
        if cursor + args.batch_size > len(order):  # next epoch, reshuffled
            order, cursor = torch.randperm(len(train), generator=generator), 0
        batch = plant_repeated_spans(train[order[cursor:cursor + args.batch_size]], args.repeat_span_fraction,
                                     generator, args.repeat_span_min, args.repeat_span_max)
        cursor += args.batch_size
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, args)
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        minutes = (time.perf_counter() - train_started) / 60
        last = step + 1 == args.max_steps or minutes >= args.max_minutes
        if (step + 1) % args.eval_every == 0 or last or step == 0:
            entry = {"step": step + 1, "train_loss": loss.item(), "minutes": round(minutes, 2),
                     "dev_loss": validation_loss(model, dev, 32)}
            log.append(entry)
            print(f"[train] step {entry['step']}: train {entry['train_loss']:.3f} dev {entry['dev_loss']:.3f} "
                  f"({minutes:.1f} min)", flush=True)
        if minutes >= args.max_minutes and not last:
            stopped_early = True
            print(f"[train] stopped early at step {step + 1} of {args.max_steps} (--max_minutes {args.max_minutes})")
            break
        if last:
            break

    model.eval()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    record = {"args": vars(args), "command": " ".join(["python", "benchmarks/train_decoder.py", *(argv or sys.argv[1:])]),
              "train_tokens": train.numel(), "dev_tokens": dev.numel(), "steps_done": log[-1]["step"],
              "stopped_early": stopped_early, "parameters": sum(p.numel() for p in model.parameters()),
              "torch": torch.__version__, "log": log}
    save_json(record, out / "training_log.json", indent=2)
    table = check_heads(out, text_ids=dev[:16], seed=args.seed)
    save_text(table, out / "heads_check.md")
    print(table)
    print(f"[train] saved to {out} ({(time.perf_counter() - started) / 60:.1f} min in all)")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
