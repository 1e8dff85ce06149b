"""Tiny random encoders of every supported family, their inputs and constants, and small tokenizers for them.

No pretrained DeBERTa, XLM-R, ELECTRA or ModernBERT weights are reachable offline, so the tests
build tiny random models (a few layers, 4 heads, hidden 32) and, for the end-to-end runs, save
them to a folder together with a tokenizer of the family's kind: byte-level BPE for RoBERTa and
DeBERTa v1, SentencePiece-style Unigram for XLM-R, CamemBERT and DeBERTa-v2, and the bundled
MiniLM's WordPiece for BERT, ELECTRA and ModernBERT (whose real tokenizer cannot be had offline).
"""

import json

import torch
import transformers
from transformers import (
    AutoTokenizer,
    BertConfig,
    CamembertConfig,
    DebertaConfig,
    DebertaV2Config,
    ElectraConfig,
    ModernBertConfig,
    RobertaConfig,
    XLMRobertaConfig,
)

L, H, HIDDEN, T = 3, 4, 32, 12
COMMON = dict(num_hidden_layers=L, num_attention_heads=H, hidden_size=HIDDEN, intermediate_size=48,
              max_position_embeddings=64, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)


def _configs(vocab_size):
    """name → config; names are model types, plus variants of DeBERTa-v2."""
    common = dict(COMMON, vocab_size=vocab_size)
    return {
        "bert": BertConfig(**common),
        "roberta": RobertaConfig(**common, pad_token_id=1),
        "xlm-roberta": XLMRobertaConfig(**common, pad_token_id=1),
        "camembert": CamembertConfig(**common, pad_token_id=1),
        "electra": ElectraConfig(**dict(common, embedding_size=16)),
        # DeBERTa v1 as deberta-base, with a relative span (8) shorter than T so positions clamp
        "deberta": DebertaConfig(**common, relative_attention=True, pos_att_type="c2p|p2c",
                                 max_relative_positions=8, type_vocab_size=0),
        # DeBERTa-v3 style: shared position keys, log-bucketed positions, layer-normed relative embeddings
        "deberta-v2": DebertaV2Config(**common, relative_attention=True, pos_att_type="p2c|c2p",
                                      position_buckets=4, max_relative_positions=16, share_att_key=True,
                                      norm_rel_ebd="layer_norm", position_biased_input=False, type_vocab_size=0),
        # DeBERTa-v2 (xlarge) style: own position projections, no buckets, a conv layer
        "deberta-v2-unshared": DebertaV2Config(**common, relative_attention=True, pos_att_type="c2p|p2c",
                                               max_relative_positions=8, share_att_key=False, conv_kernel_size=3,
                                               type_vocab_size=0),
        # every second layer global, the others a sliding window |i - j| <= 2
        "modernbert": ModernBertConfig(vocab_size=vocab_size, hidden_size=HIDDEN, num_hidden_layers=L,
                                       num_attention_heads=H, intermediate_size=48, max_position_embeddings=64,
                                       global_attn_every_n_layers=2, local_attention=4, attention_dropout=0.1,
                                       pad_token_id=0, bos_token_id=2, eos_token_id=3, cls_token_id=2,
                                       sep_token_id=3),
    }


FAMILY_NAMES = tuple(_configs(120))
PAD_IDS = {name: config.pad_token_id for name, config in _configs(120).items()}


def tiny_config(name, impl="eager", vocab_size=120, num_labels=3):
    config = _configs(vocab_size)[name]
    config.num_labels = num_labels
    config._attn_implementation = impl
    return config


def tiny_model(name, impl="eager", head="sequence", seed=0, vocab_size=120):
    """A random tiny model: head "sequence", "token" or "base", in eval mode."""
    config = tiny_config(name, impl, vocab_size)
    suffix = {"sequence": "ForSequenceClassification", "token": "ForTokenClassification", "base": "Model"}[head]
    torch.manual_seed(seed)
    cls = getattr(transformers, type(config).__name__.replace("Config", suffix))
    return cls(config).eval()


def random_constants(seed=1):
    """Random [L, H, T, T] constant matrices (not normalised: papa normalises them)."""
    return torch.rand(L, H, T, T, generator=torch.Generator().manual_seed(seed))


def padded_batch(name, seed=2, lengths=(T, 7, 3), vocab_size=120):
    """(input_ids, attention_mask) with examples of the given lengths, padded to T with the pad id."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab_size, (len(lengths), T), generator=g)
    mask = torch.zeros(len(lengths), T, dtype=torch.long)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
    ids[mask == 0] = PAD_IDS[name]
    return ids, mask


# ----------------------------------------------------------------------------- tokenizers

SPECIALS_BERT = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SPECIALS_ROBERTA = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def _corpus():
    from papa.data.synthetic import NOUNS

    words = list(NOUNS) + ("EU rejects German call to boycott British lamb . Peter Blackburn BRUSSELS "
                           "the a of and in to is was for on with as by at from").split()
    return [" ".join(words)] * 5


def _bpe(specials):
    from tokenizers import ByteLevelBPETokenizer

    trainer = ByteLevelBPETokenizer()
    trainer.train_from_iterator(_corpus(), vocab_size=600, min_frequency=1, special_tokens=specials,
                                show_progress=False)
    model = json.loads(trainer._tokenizer.to_str())["model"]
    return model["vocab"], [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]


def _unigram(specials, unk_token):
    from tokenizers import SentencePieceUnigramTokenizer

    trainer = SentencePieceUnigramTokenizer()
    trainer.train_from_iterator(_corpus(), vocab_size=400, special_tokens=specials, unk_token=unk_token,
                                show_progress=False)
    return [tuple(piece) for piece in json.loads(trainer._tokenizer.to_str())["model"]["vocab"]]


def make_tokenizer(name):
    """A small tokenizer of the family's kind (see the module docstring)."""
    from papa.models.modeling import default_model_path

    if name in ("bert", "electra", "modernbert"):
        return AutoTokenizer.from_pretrained(default_model_path())
    if name == "roberta":
        vocab, merges = _bpe(SPECIALS_ROBERTA)
        return transformers.RobertaTokenizer(vocab=vocab, merges=merges)
    if name == "deberta":
        vocab, merges = _bpe(SPECIALS_BERT)
        return transformers.DebertaTokenizer(vocab=vocab, merges=merges)
    if name.startswith("deberta-v2"):
        return transformers.DebertaV2Tokenizer(vocab=_unigram(SPECIALS_BERT, "[UNK]"))
    cls = transformers.XLMRobertaTokenizer if name == "xlm-roberta" else transformers.CamembertTokenizer
    return cls(vocab=_unigram(SPECIALS_ROBERTA, "<unk>"))


def save_tiny_pretrained(name, folder, seed=0):
    """A tiny random `name` model and its tokenizer saved to `folder` (as a hub checkpoint would be)."""
    tokenizer = make_tokenizer(name)
    config = tiny_config(name, vocab_size=len(tokenizer))
    config.max_position_embeddings = 160
    config.pad_token_id = tokenizer.pad_token_id
    for attribute in ("bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id"):
        if hasattr(config, attribute):
            setattr(config, attribute, tokenizer.cls_token_id if attribute in ("bos_token_id", "cls_token_id")
                    else tokenizer.sep_token_id)
    config._attn_implementation = None
    torch.manual_seed(seed)
    model = transformers.AutoModel.from_config(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)
