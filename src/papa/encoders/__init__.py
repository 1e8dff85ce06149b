"""The encoder families PAPA supports: one adapter each, one registry keyed by `config.model_type`.

A family entry says which stock module is the self-attention of each layer, which adapter
patches it (papa/encoders/<family>.py), and the few traits the probes need. Adding a BERT-like
family (same self-attention design as BERT) is one `register(...)` line below.
"""

import inspect
from dataclasses import dataclass
from typing import Callable

from transformers.models.bert.modeling_bert import BertSelfAttention
from transformers.models.camembert.modeling_camembert import CamembertSelfAttention
from transformers.models.deberta.modeling_deberta import DisentangledSelfAttention as DebertaSelfAttention
from transformers.models.deberta_v2.modeling_deberta_v2 import DisentangledSelfAttention as DebertaV2SelfAttention
from transformers.models.electra.modeling_electra import ElectraSelfAttention
from transformers.models.modernbert.modeling_modernbert import ModernBertAttention
from transformers.models.roberta.modeling_roberta import RobertaSelfAttention
from transformers.models.xlm_roberta.modeling_xlm_roberta import XLMRobertaSelfAttention

from ..errors import PapaError
from .base import HEAD_MODES, PapaAttention
from .bert import PapaBertLikeAttention
from .deberta import PapaDebertaAttention
from .deberta_v2 import PapaDebertaV2Attention
from .modernbert import PapaModernBertAttention


@dataclass(frozen=True)
class Family:
    model_type: str
    stock_class: type  # the stock self-attention module of every layer
    patched_class: type  # stock_class with the family's PAPA adapter mixed in
    attention_modules: Callable  # base model → its self-attention modules, one per layer
    output_projections: Callable  # base model → per layer, the Linear that reads the heads' concatenated outputs
    probe_dropout: Callable | None  # config → dropout before the sequence probe's classifier (None: none)
    position_offset: bool  # RoBERTa-style position ids: the first pad_token_id + 1 positions are reserved
    probs_need_flag: bool  # the stock module returns probabilities only when its output_attentions argument is set


def _bert_like_layers(base):
    return [layer.attention.self for layer in base.encoder.layer]


def _bert_like_outputs(base):
    return [layer.attention.output.dense for layer in base.encoder.layer]


def _modernbert_layers(base):
    return [layer.attn for layer in base.layers]


def _modernbert_outputs(base):
    return [layer.attn.Wo for layer in base.layers]


def _classifier_dropout(config):
    value = getattr(config, "classifier_dropout", None)
    return getattr(config, "hidden_dropout_prob", 0.0) if value is None else value


def _cls_dropout(config):  # the original's DeBERTa: `cls_dropout`, else hidden_dropout_prob
    value = getattr(config, "cls_dropout", None)
    return config.hidden_dropout_prob if value is None else value


FAMILIES: dict[str, Family] = {}


def register(model_type, stock_class, adapter, layers=_bert_like_layers, outputs=_bert_like_outputs,
             probe_dropout=_classifier_dropout, position_offset=False, probs_need_flag=False, class_name=None):
    """Make `model_type` patchable: its layers' `stock_class` modules get `adapter` mixed in."""
    name = class_name or f"Papa{stock_class.__name__}"
    patched = type(name, (adapter, stock_class), {"__module__": __name__, "__qualname__": name})
    globals()[name] = patched  # importable by name, so patched models pickle
    FAMILIES[model_type] = Family(model_type, stock_class, patched, layers, outputs, probe_dropout, position_offset,
                                  probs_need_flag)


register("bert", BertSelfAttention, PapaBertLikeAttention)
register("roberta", RobertaSelfAttention, PapaBertLikeAttention, probe_dropout=None, position_offset=True)
register("xlm-roberta", XLMRobertaSelfAttention, PapaBertLikeAttention, probe_dropout=None, position_offset=True)
register("camembert", CamembertSelfAttention, PapaBertLikeAttention, probe_dropout=None, position_offset=True)
register("electra", ElectraSelfAttention, PapaBertLikeAttention)
register("deberta", DebertaSelfAttention, PapaDebertaAttention, probe_dropout=_cls_dropout, probs_need_flag=True,
         class_name="PapaDebertaSelfAttention")
register("deberta-v2", DebertaV2SelfAttention, PapaDebertaV2Attention, probe_dropout=_cls_dropout,
         probs_need_flag=True, class_name="PapaDebertaV2SelfAttention")
register("modernbert", ModernBertAttention, PapaModernBertAttention, layers=_modernbert_layers,
         outputs=_modernbert_outputs)

SUPPORTED_MODEL_TYPES = tuple(FAMILIES)


def family_for(config_or_model):
    """The `Family` of a model or config; a clear error naming the supported model types."""
    config = getattr(config_or_model, "config", config_or_model)
    model_type = getattr(config, "model_type", None)
    if model_type not in FAMILIES:
        what = type(config_or_model).__name__
        raise PapaError(f"PAPA supports the model types {', '.join(SUPPORTED_MODEL_TYPES)}; this model is "
                        f"{what} (model_type={model_type!r})")
    return FAMILIES[model_type]


def attention_modules(model):
    """The model's self-attention modules, one per layer; a clear error for other architectures."""
    family = family_for(model)
    modules = family.attention_modules(model.base_model)
    for module in modules:
        if not isinstance(module, family.stock_class):
            raise PapaError(f"unexpected self-attention module {type(module).__name__} in a {family.model_type} model")
    return modules


def accepts_token_type_ids(base_model):
    """Whether the encoder's forward takes token_type_ids (ModernBERT's does not)."""
    return "token_type_ids" in inspect.signature(base_model.forward).parameters


__all__ = ["accepts_token_type_ids", "FAMILIES", "Family", "HEAD_MODES", "PapaAttention", "SUPPORTED_MODEL_TYPES", "attention_modules",
           "family_for", "register"]
