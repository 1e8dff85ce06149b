"""Tiny random decoders of every supported decoder family, and right-padded batches for them.

Each config exercises what its family adds: grouped keys/values (4 query heads read 2 K/V heads) and
rotary embeddings everywhere but GPT-2; a sliding window shorter than T (Mistral on every layer, Qwen2 on
its upper layers, Gemma2 on alternate layers); Qwen3's per-head q/k norms; Gemma2's attention-logit
soft-capping (small, so it bends the logits) and query_pre_attn_scalar ≠ head_dim; Gemma3's (1 + w) q/k norms
and windows; Granite's attention_multiplier; SmolLM3's layer without rotary; GPT-2's fused c_attn.
"""

import torch
import transformers
from transformers import (GPT2Config, Gemma2Config, Gemma3TextConfig, GraniteConfig, LlamaConfig, MistralConfig,
                          Qwen2Config, Qwen3Config, SmolLM3Config)

L, H, KV, D_HEAD, HIDDEN, T, PAD = 3, 4, 2, 8, 32, 12, 0
ROPE = dict(num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=KV, head_dim=D_HEAD, hidden_size=HIDDEN,
            intermediate_size=48, max_position_embeddings=64, pad_token_id=PAD, bos_token_id=1, eos_token_id=2,
            attention_dropout=0.1)


def _configs(vocab_size):
    common = dict(ROPE, vocab_size=vocab_size)
    return {
        "llama": LlamaConfig(**common, attention_bias=True),
        "mistral": MistralConfig(**common, sliding_window=4),
        "qwen2": Qwen2Config(**common, use_sliding_window=True, sliding_window=5, max_window_layers=1),
        "qwen3": Qwen3Config(**common),
        "gemma2": Gemma2Config(**common, sliding_window=4, attn_logit_softcapping=2.0, query_pre_attn_scalar=12,
                               final_logit_softcapping=None),
        "gemma3_text": Gemma3TextConfig(**common, sliding_window=4, query_pre_attn_scalar=12,
                                        layer_types=["sliding_attention", "full_attention", "sliding_attention"]),
        "granite": GraniteConfig(**common, attention_multiplier=0.3, embedding_multiplier=2.0, residual_multiplier=0.5,
                                 logits_scaling=2.0),
        "smollm3": SmolLM3Config(**common, no_rope_layers=[1, 0, 1]),  # layer 1 without rotary embeddings
        "gpt2": GPT2Config(vocab_size=vocab_size, n_positions=64, n_embd=HIDDEN, n_layer=L, n_head=H, n_inner=48,
                           pad_token_id=PAD, bos_token_id=1, eos_token_id=2, attn_pdrop=0.1, resid_pdrop=0.1,
                           embd_pdrop=0.1),
    }


DECODER_NAMES = tuple(_configs(120))
SDPA_DECODERS = [n for n in DECODER_NAMES if n != "gemma2"]  # stock sdpa refuses Gemma2's soft-capping


def tiny_decoder_config(name, impl="eager", vocab_size=120, num_labels=3):
    config = _configs(vocab_size)[name]
    config.num_labels = num_labels
    config._attn_implementation = impl
    return config


PREFIX = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3", "gemma2": "Gemma2",
          "gemma3_text": "Gemma3Text", "granite": "Granite", "smollm3": "SmolLM3", "gpt2": "GPT2"}
SUFFIX = {"causal": "ForCausalLM", "sequence": "ForSequenceClassification", "token": "ForTokenClassification",
          "base": "Model"}
SPECIAL = {("gpt2", "causal"): "GPT2LMHeadModel", ("gemma3_text", "causal"): "Gemma3ForCausalLM"}


def decoder_class_name(name, head):
    """The transformers class of `name` with `head`, or None when the family has none."""
    class_name = SPECIAL.get((name, head), PREFIX[name] + SUFFIX[head])
    return class_name if hasattr(transformers, class_name) else None


def tiny_decoder(name, impl="eager", head="causal", seed=0, vocab_size=120):
    """A random tiny decoder: head "causal" (LM), "sequence" (last-token classifier), "token" or "base", eval mode."""
    config = tiny_decoder_config(name, impl, vocab_size)
    torch.manual_seed(seed)
    return getattr(transformers, decoder_class_name(name, head))(config).eval()


def right_padded_batch(seed=2, lengths=(T, 7, 3), vocab_size=120):
    """(input_ids, attention_mask): examples of the given lengths, right-padded to T with the pad id."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab_size, (len(lengths), T), generator=g)
    mask = torch.zeros(len(lengths), T, dtype=torch.long)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
    ids[mask == 0] = PAD
    return ids, mask


def tiny_family_model(name, impl="eager", head="sequence", seed=0):
    """A tiny random model of any family, encoder (tests/tiny_encoders.py) or decoder: the same L, H, T.
    A decoder family without the head asked for (Granite's classifiers, Gemma3's token classifier) gets its
    causal LM head: logits per position, as a token classifier's."""
    from tiny_encoders import tiny_model

    if name in DECODER_NAMES:
        return tiny_decoder(name, impl, head=head if decoder_class_name(name, head) else "causal", seed=seed)
    return tiny_model(name, impl, head=head, seed=seed)


def family_batch(name, **kwargs):
    """A padded batch for any family: right padding for decoders (tiny_encoders.padded_batch for encoders)."""
    from tiny_encoders import padded_batch

    return right_padded_batch(**kwargs) if name in DECODER_NAMES else padded_batch(name, **kwargs)


# ----------------------------------------------------------------------------- saved with a tokenizer

def make_decoder_tokenizer(name):
    """A small tokenizer as the family's real one is, without a pad token: GPT-2's byte-level BPE (eos
    <|endoftext|>, add_prefix_space=False, right padding); for the Llama family a SentencePiece-style BPE
    (<s> before every text, </s> as eos) that pads on the left, as many Llama tokenizers do."""
    import json

    from tiny_encoders import _bpe, _corpus

    if name == "gpt2":
        vocab, merges = _bpe(["<|endoftext|>"])
        return transformers.GPT2Tokenizer(vocab=vocab, merges=merges)
    from tokenizers import SentencePieceBPETokenizer

    trainer = SentencePieceBPETokenizer()
    trainer.train_from_iterator(_corpus(), vocab_size=400, min_frequency=1, special_tokens=["<unk>", "<s>", "</s>"],
                                show_progress=False)
    model = json.loads(trainer._tokenizer.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    return transformers.LlamaTokenizer(vocab=model["vocab"], merges=merges, add_bos_token=True, padding_side="left")


def save_tiny_decoder(name, folder, seed=0):
    """A tiny random `name` decoder (the bare model) and its tokenizer saved to `folder`, as a hub checkpoint
    is: config.pad_token_id None (the tokenizer has no pad token either), positions for T up to 160."""
    tokenizer = make_decoder_tokenizer(name)
    config = tiny_decoder_config(name, vocab_size=len(tokenizer))
    config.pad_token_id = None
    config.bos_token_id, config.eos_token_id = tokenizer.bos_token_id, tokenizer.eos_token_id
    config.max_position_embeddings = 160  # GPT-2: n_positions
    config._attn_implementation = None
    torch.manual_seed(seed)
    transformers.AutoModel.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)
