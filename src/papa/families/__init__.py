"""The model families PAPA supports: one adapter each, one registry keyed by `config.model_type`.

A family entry says which stock module is the self-attention of each layer, which adapter
patches it (papa/families/<family>.py), and the few traits the probes need. Adding a BERT-like
family (same self-attention design as BERT) or a Llama-like decoder (same attention design as
Llama) is one `register(...)` line below.
"""

import importlib
import inspect
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

from ..errors import PapaError
from .base import HEAD_MODES, PapaAttention
from .bert import PapaBertLikeAttention
from .deberta import PapaDebertaAttention
from .deberta_v2 import PapaDebertaV2Attention
from .gpt2 import PapaGPT2Attention
from .llama import PapaGemma2Attention, PapaLlamaAttention
from .modernbert import PapaModernBertAttention


@dataclass(frozen=True)
class Family:
    model_type: str
    stock_path: str  # "module:Class" of the stock self-attention module of every layer (imported on first use)
    adapter: type  # the PapaAttention subclass mixed into it
    class_name: str  # name of the patched class, importable from papa.families (so patched models pickle)
    attention_modules: Callable  # base model → its self-attention modules, one per layer
    output_projections: Callable  # base model → per layer, the Linear that reads the heads' concatenated outputs
    probe_dropout: Callable | None  # config → dropout before the sequence probe's classifier (None: none)
    position_offset: bool  # RoBERTa-style position ids: the first pad_token_id + 1 positions are reserved
    probs_need_flag: bool  # the stock module returns probabilities only when its output_attentions argument is set
    causal: bool = False  # a decoder: causal attention, no key/value cache once patched (papa/families/causal.py)

    @cached_property
    def stock_class(self):
        module, name = self.stock_path.split(":")
        return getattr(importlib.import_module(module), name)

    @cached_property
    def patched_class(self):
        return type(self.class_name, (self.adapter, self.stock_class), {"__module__": __name__,
                                                                         "__qualname__": self.class_name})


def _bert_like_layers(base):
    return [layer.attention.self for layer in base.encoder.layer]


def _bert_like_outputs(base):
    return [layer.attention.output.dense for layer in base.encoder.layer]


def _modernbert_layers(base):
    return [layer.attn for layer in base.layers]


def _modernbert_outputs(base):
    return [layer.attn.Wo for layer in base.layers]


def _decoder_layers(base):  # Llama and its copies
    return [layer.self_attn for layer in base.layers]


def _decoder_outputs(base):
    return [layer.self_attn.o_proj for layer in base.layers]


def _gpt2_layers(base):
    return [block.attn for block in base.h]


def _gpt2_outputs(base):
    return [block.attn.c_proj for block in base.h]


def _classifier_dropout(config):
    value = getattr(config, "classifier_dropout", None)
    return getattr(config, "hidden_dropout_prob", 0.0) if value is None else value


def _cls_dropout(config):  # the original's DeBERTa: `cls_dropout`, else hidden_dropout_prob
    value = getattr(config, "cls_dropout", None)
    return config.hidden_dropout_prob if value is None else value


FAMILIES: dict[str, Family] = {}


def register(model_type, stock_path, adapter, class_name, layers=_bert_like_layers, outputs=_bert_like_outputs,
             probe_dropout=_classifier_dropout, position_offset=False, probs_need_flag=False, causal=False):
    """Make `model_type` patchable: its layers' stock modules (`stock_path`) get `adapter` mixed in."""
    FAMILIES[model_type] = Family(model_type, stock_path, adapter, class_name, layers, outputs, probe_dropout,
                                  position_offset, probs_need_flag, causal)


M = "transformers.models."
register("bert", M + "bert.modeling_bert:BertSelfAttention", PapaBertLikeAttention, "PapaBertSelfAttention")
register("roberta", M + "roberta.modeling_roberta:RobertaSelfAttention", PapaBertLikeAttention,
         "PapaRobertaSelfAttention", probe_dropout=None, position_offset=True)
register("xlm-roberta", M + "xlm_roberta.modeling_xlm_roberta:XLMRobertaSelfAttention", PapaBertLikeAttention,
         "PapaXLMRobertaSelfAttention", probe_dropout=None, position_offset=True)
register("camembert", M + "camembert.modeling_camembert:CamembertSelfAttention", PapaBertLikeAttention,
         "PapaCamembertSelfAttention", probe_dropout=None, position_offset=True)
register("electra", M + "electra.modeling_electra:ElectraSelfAttention", PapaBertLikeAttention,
         "PapaElectraSelfAttention")
register("deberta", M + "deberta.modeling_deberta:DisentangledSelfAttention", PapaDebertaAttention,
         "PapaDebertaSelfAttention", probe_dropout=_cls_dropout, probs_need_flag=True)
register("deberta-v2", M + "deberta_v2.modeling_deberta_v2:DisentangledSelfAttention", PapaDebertaV2Attention,
         "PapaDebertaV2SelfAttention", probe_dropout=_cls_dropout, probs_need_flag=True)
register("modernbert", M + "modernbert.modeling_modernbert:ModernBertAttention", PapaModernBertAttention,
         "PapaModernBertAttention", layers=_modernbert_layers, outputs=_modernbert_outputs)

DECODER = dict(layers=_decoder_layers, outputs=_decoder_outputs, probe_dropout=None, causal=True)
for model_type, module, name in [("llama", "llama", "Llama"), ("mistral", "mistral", "Mistral"),
                                 ("qwen2", "qwen2", "Qwen2"), ("qwen3", "qwen3", "Qwen3"),
                                 ("gemma3_text", "gemma3", "Gemma3"), ("granite", "granite", "Granite"),
                                 ("smollm3", "smollm3", "SmolLM3")]:
    register(model_type, f"{M}{module}.modeling_{module}:{name}Attention", PapaLlamaAttention,
             f"Papa{name}Attention", **DECODER)
register("gemma2", M + "gemma2.modeling_gemma2:Gemma2Attention", PapaGemma2Attention, "PapaGemma2Attention",
         **DECODER)
register("gpt2", M + "gpt2.modeling_gpt2:GPT2Attention", PapaGPT2Attention, "PapaGPT2Attention",
         layers=_gpt2_layers, outputs=_gpt2_outputs, probe_dropout=None, causal=True)

SUPPORTED_MODEL_TYPES = tuple(FAMILIES)


def family_for(config_or_model):
    """The `Family` of a model or config; a clear error naming the supported model types."""
    config = getattr(config_or_model, "config", config_or_model)
    model_type = getattr(config, "model_type", None)
    if model_type not in FAMILIES:
        what = type(config_or_model).__name__
        raise PapaError(f"PAPA supports the model types {', '.join(SUPPORTED_MODEL_TYPES)}; this {what} has "
                        f"model_type={model_type!r}")
    return FAMILIES[model_type]


def attention_modules(model):
    """The model's self-attention modules, one per layer; a clear error for other architectures."""
    family = family_for(model)
    modules = family.attention_modules(model.base_model)
    for module in modules:
        if not isinstance(module, family.stock_class):
            raise PapaError(f"unexpected self-attention module {type(module).__name__} in a {family.model_type} model")
    return modules


def __getattr__(name):
    """Patched classes by name (pickle looks them up here), created on first use."""
    for family in FAMILIES.values():
        if family.class_name == name:
            return family.patched_class
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def accepts_token_type_ids(base_model):
    """Whether the encoder's forward takes token_type_ids (ModernBERT's does not)."""
    return "token_type_ids" in inspect.signature(base_model.forward).parameters


__all__ = ["accepts_token_type_ids", "FAMILIES", "Family", "HEAD_MODES", "PapaAttention", "SUPPORTED_MODEL_TYPES", "attention_modules",
           "family_for", "register"]
