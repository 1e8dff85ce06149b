"""What the benchmark runs: models, inputs, and the variants of each benchmark, as tables.

A variant is a row of INFERENCE_VARIANTS (how many heads are constant, and which), AVERAGING_VARIANTS
(a way to average attention) or TRAINING_VARIANTS (a training mode and its constant heads): a new
model family or head choice is a new row, not new code in the harness. FAMILY_CONFIGS gives a random
model of each family at its base size, for families whose checkpoints cannot be had offline.
"""

import copy
from dataclasses import dataclass

import torch
import transformers
from transformers import AutoConfig, AutoModel, BertConfig

from ..method.attention import dynamic_copy
from ..method.averaging import accumulate_attention
from ..errors import PapaError
from ..families import attention_modules
from ..models.modeling import build_model, set_trainable
from ..method.ranking import first_k_heads, load_sorted_heads


@dataclass(frozen=True)
class InferenceVariant:
    fraction: float  # of all heads made constant
    heads: str = "layer-major"  # which: "layer-major" (first k), "every other" (alternate heads), "ranked" (--sorted_heads)


INFERENCE_VARIANTS = {
    "0 constant": InferenceVariant(0.0),
    "1/2 constant": InferenceVariant(0.5),
    "1/2 constant, every other head": InferenceVariant(0.5, "every other"),
    "1/2 constant, ranked": InferenceVariant(0.5, "ranked"),
    "7/8 constant": InferenceVariant(0.875),
    "7/8 constant, ranked": InferenceVariant(0.875, "ranked"),
    "all constant": InferenceVariant(1.0),
}


@dataclass(frozen=True)
class TrainingVariant:
    mode: str | None  # papa.models.modeling.set_trainable mode; None = full fine-tuning
    constant_fraction: float = 0.0  # the first heads (layer-major) made constant
    mix: bool = False  # every head mixes dynamic and constant attention (the ranking run)
    stock_with_activation_grads: bool = False  # no PAPA; gradients flow back through every layer's activations
    probabilities_path: bool = False  # build every head's (B, H, T, T) attention, as training did before the dropout path

    def constant_heads(self, num_layers, num_heads):
        """{layer: [heads]} made constant: the first `constant_fraction` of all heads, layer by layer."""
        k = int(self.constant_fraction * num_layers * num_heads)
        return first_k_heads(layer_major(num_layers, num_heads), k, num_layers, num_heads)


TRAINING_VARIANTS = {
    "probing": TrainingVariant("grad_for_classifier_only"),
    "probing (1/2 constant)": TrainingVariant("grad_for_classifier_only", constant_fraction=0.5),
    "probing (all constant)": TrainingVariant("grad_for_classifier_only", constant_fraction=1.0),
    # what the dropout path saves: the same step through the probabilities path (papa/families/base.py)
    "probing (all constant, probabilities path)": TrainingVariant("grad_for_classifier_only", constant_fraction=1.0,
                                                                  probabilities_path=True),
    "full fine-tuning": TrainingVariant(None),
    # the work a ranking run cannot avoid: backward through the encoder's activations (to reach the λ)
    "stock probe, backward through the encoder": TrainingVariant("grad_for_classifier_only",
                                                                 stock_with_activation_grads=True),
    "sorting": TrainingVariant("sort_calculating", mix=True),
}

# Random models at each family's base size (the shapes of the checkpoint named, or described), for --model_type.
FAMILY_CONFIGS = {
    "deberta": ("microsoft/deberta-base", lambda: transformers.DebertaConfig(
        vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
        max_position_embeddings=512, relative_attention=True, pos_att_type="c2p|p2c", type_vocab_size=0)),
    "deberta-v2": ("microsoft/deberta-v3-base", lambda: transformers.DebertaV2Config(
        vocab_size=128100, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
        max_position_embeddings=512, relative_attention=True, pos_att_type="p2c|c2p", position_buckets=256,
        norm_rel_ebd="layer_norm", share_att_key=True, position_biased_input=False, type_vocab_size=0)),
    "modernbert": ("answerdotai/ModernBERT-base", lambda: transformers.ModernBertConfig(
        vocab_size=50368, hidden_size=768, num_hidden_layers=22, num_attention_heads=12, intermediate_size=1152,
        global_attn_every_n_layers=3, local_attention=128, pad_token_id=50283, bos_token_id=50281,
        eos_token_id=50282, cls_token_id=50281, sep_token_id=50282)),
    "bert": ("bert-base-uncased", lambda: transformers.BertConfig()),
    # a Llama-shaped decoder (no checkpoint: the shapes of a ~110M Llama): 12 query heads read 4 K/V heads
    "llama": ("12 layers, hidden 768, 12 query / 4 K/V heads, SwiGLU 2048", lambda: transformers.LlamaConfig(
        vocab_size=32000, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
        intermediate_size=2048, max_position_embeddings=2048, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
}


def quiet_transformers():
    """No load reports or bars from transformers (in the benchmark process and its memory children)."""
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def tiny_config():
    return BertConfig(vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=512, pad_token_id=0)


def load_config(args):
    if args.tiny:
        return tiny_config()
    if args.model_type:
        return FAMILY_CONFIGS[args.model_type][1]()
    return AutoConfig.from_pretrained(args.model_name_or_path)


def stock_implementation(config):
    """The fastest stock attention the family has: sdpa, or eager (DeBERTa has no sdpa in transformers 5)."""
    model_class = transformers.MODEL_MAPPING[type(config)]
    return "sdpa" if getattr(model_class, "_supports_sdpa", False) else "eager"


def random_weights(args):
    """Whether models are built from a config with random weights (--tiny, --model_type, --random_weights) rather
    than loaded from the checkpoint: speed does not depend on the weights."""
    return bool(args.tiny or args.model_type or getattr(args, "random_weights", False))


def load_encoder(args, attn_implementation, num_layers=None):
    """The bare encoder (AutoModel, with pooler) in eval mode on args.device; `num_layers` keeps the first ones."""
    extra = {} if num_layers is None else {"num_hidden_layers": num_layers}
    if random_weights(args):
        torch.manual_seed(0)
        config = load_config(args)
        for key, value in extra.items():
            setattr(config, key, value)
        model = AutoModel.from_config(config, attn_implementation=attn_implementation)
    else:
        model = AutoModel.from_pretrained(args.model_name_or_path, attn_implementation=attn_implementation, **extra)
    return model.to(args.device).eval()


def layer_major(num_layers, num_heads):
    """Every head as [[layer, head], ...], layer by layer: a ranking whose first k fill whole layers."""
    return [[layer, head] for layer in range(num_layers) for head in range(num_heads)]


def every_other(num_layers, num_heads):
    """Every head, spread so that the first k mix both kinds in as many layers as possible: odd heads of each
    layer first."""
    return [[layer, head] for start in (1, 0) for layer in range(num_layers) for head in range(start, num_heads, 2)]


def chosen_heads(variant, k, num_layers, num_heads, sorted_heads=None):
    """{layer: [heads]}: the k constant heads of an inference variant, the first k of its order of heads."""
    if variant.heads == "every other":
        order = every_other(num_layers, num_heads)
    elif variant.heads == "ranked":
        if sorted_heads is None:
            raise PapaError("a ranked variant needs --sorted_heads (a sorted_heads.json of this model)")
        order = load_sorted_heads(sorted_heads, num_layers, num_heads)
    else:
        order = layer_major(num_layers, num_heads)
    return first_k_heads(order, k, num_layers, num_heads)


def random_constants(config, seq_len, seed=0):
    """Random [L, H, T, T] constant matrices (their values do not affect speed)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(config.num_hidden_layers, config.num_attention_heads, seq_len, seq_len, generator=generator)


def token_ids(config, lengths, seq_len, generator):
    """[CLS] w … w [SEP] [PAD] … rows with the given real lengths, ids in the word-piece range
    (token types only for families that take them); right padding, as decoders need too."""
    batch = len(lengths)
    low = min(1000, config.vocab_size // 2)
    ids = torch.randint(low, config.vocab_size, (batch, seq_len), generator=generator)
    mask = (torch.arange(seq_len)[None, :] < torch.as_tensor(lengths)[:, None]).long()
    cls_id, sep_id = (101, 102) if config.vocab_size > 1000 else (1, 2)
    ids[:, 0] = cls_id
    ids[torch.arange(batch), torch.as_tensor(lengths) - 1] = sep_id
    ids = ids * mask + (config.pad_token_id or 0) * (1 - mask)
    inputs = {"input_ids": ids, "attention_mask": mask}
    if hasattr(config, "type_vocab_size"):  # ModernBERT and the decoders take none
        inputs["token_type_ids"] = torch.zeros_like(ids)
    return inputs


PADDED_ROWS = {"all": 1, "every third": 3}  # which rows of an inference batch are padded: every n-th, from the first


def inference_inputs(config, batch_size, seq_len, device, seed=0, padded_rows="all"):
    """Rows with their last quarter of positions padded (all of them, or every third), so the masking path is
    exercised; the others run to full length."""
    generator = torch.Generator().manual_seed(seed)
    every = PADDED_ROWS[padded_rows]
    lengths = [seq_len - seq_len // 4 if row % every == 0 else seq_len for row in range(batch_size)]
    return {k: v.to(device) for k, v in token_ids(config, lengths, seq_len, generator).items()}


def averaging_batches(config, num_batches, batch_size, seq_len, seed=0):
    """`num_batches` CPU batches with real lengths drawn uniformly in [T/4, T]."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(num_batches):
        lengths = torch.randint(max(2, seq_len // 4), seq_len + 1, (batch_size,), generator=generator).tolist()
        batches.append(token_ids(config, lengths, seq_len, generator))
    return batches


def touch_parameters(model):
    """Fault in memory-mapped weights so they count before a memory baseline is taken."""
    with torch.no_grad():
        for tensor in list(model.parameters()) + list(model.buffers()):
            tensor.sum()


# ----------------------------------------------------------------------------- the averaging variants


@torch.no_grad()
def plain_attention_pass(model, batches, seq_len, device):
    """The floor: an eager forward with output_attentions=True, attentions discarded."""
    encoder = model.base_model.eval()
    for batch in batches:
        inputs = {k: v.to(device) for k, v in batch.items()}
        encoder(**inputs, output_attentions=True, return_dict=True)


@torch.no_grad()
def original_accumulate(model, batches, seq_len, device):
    """The original PAPA averaging loop: a [B, L, H, T, T] copy per batch, masked, summed in float32."""
    config = model.config
    L, H, T = config.num_hidden_layers, config.num_attention_heads, seq_len
    attention_sums = torch.zeros(L, H, T, T, device=device)
    pattern_sums = torch.zeros(T, T, device=device)
    encoder = model.base_model.eval()
    for batch in batches:
        inputs = {k: v.to(device) for k, v in batch.items()}
        attentions = encoder(**inputs, output_attentions=True, return_dict=True).attentions
        B = inputs["input_ids"].shape[0]
        cur = torch.zeros(B, L, H, T, T, device=device)
        for layer in range(L):
            cur[:, layer] = attentions[layer]
        mask = inputs["attention_mask"].float()
        pattern = mask[:, :, None] * mask[:, None, :]  # (B, T, T)
        cur = cur * pattern.unsqueeze(1).unsqueeze(1)
        attention_sums += cur.sum(0)
        pattern_sums += pattern.sum(0)
    return attention_sums, pattern_sums


@torch.no_grad()
def mean_corrections_pass(model, batches, seq_len, device):
    """accumulate_attention recording the mean_corrected replacement's statistics too (mean values and head outputs),
    as `--mean_corrections` does. It reads a stock model through a PAPA-patched copy with every head dynamic, made
    once per pass by the script; timed batch by batch here, the copy is made once per model and kept beside it."""
    patched = model.__dict__.get("_papa_dynamic_copy")  # not a submodule: the model's own modules stay as they are
    if patched is None:
        patched = model.__dict__["_papa_dynamic_copy"] = dynamic_copy(model, seq_len)
    return accumulate_attention(patched, batches, seq_len, device, value_means=True)


AVERAGING_VARIANTS = {
    "accumulate_attention (ours)": lambda model, batches, T, device: accumulate_attention(model, batches, T, device),
    "accumulate_attention, --mean_corrections": mean_corrections_pass,
    "plain eager forward, output_attentions": plain_attention_pass,
    "original loop": original_accumulate,
}


# ----------------------------------------------------------------------------- training


def training_setup(args, config, variant, seq_len):
    """(model in train mode, AdamW over its trainable parameters, a step function)."""
    cfg = copy.deepcopy(config)
    cfg.num_labels = 2
    L, H = cfg.num_hidden_layers, cfg.num_attention_heads
    spec = TRAINING_VARIANTS[variant]
    constants, static = None, None
    if spec.mix or spec.constant_fraction:
        constants = random_constants(cfg, seq_len)
        if spec.constant_fraction:
            static = spec.constant_heads(L, H)
    torch.manual_seed(0)
    checkpoint = None if random_weights(args) else args.model_name_or_path
    model = build_model("AutoModelForSequenceClassification", cfg, checkpoint,
                        constants, static, spec.mix, freeze_extract_seq_len=seq_len)
    set_trainable(model, spec.mode)
    if spec.probabilities_path:
        for module in attention_modules(model):
            module.papa_return_probs = True  # the probabilities path; the layer above drops the probabilities
    if spec.stock_with_activation_grads:  # the embeddings' output requires grad: backward runs through every layer
        # encoders: the embeddings module; decoders have none, their token embeddings start the forward
        embeddings = getattr(model.base_model, "embeddings", None) or model.base_model.get_input_embeddings()
        embeddings.register_forward_hook(lambda module, args, output: output.requires_grad_(True))
    model.to(args.device).train()  # as the Trainer does: dropout on
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    inputs = averaging_batches(cfg, 1, args.batch_size, seq_len, seed=1)[0]
    inputs = {k: v.to(args.device) for k, v in inputs.items()}
    labels = torch.randint(0, 2, (args.batch_size,), generator=torch.Generator().manual_seed(2)).to(args.device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = model(**inputs, labels=labels).loss
        loss.backward()
        optimizer.step()

    return model, optimizer, step
