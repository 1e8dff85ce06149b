"""The original PAPA probing heads ("freeze-extract" poolers) and the probes built on them.

A probe reads *every* hidden state of the encoder (embeddings + each layer), so it measures what
the whole network computes rather than what the last layer happens to expose:

- sequence tasks: for each hidden state s, a learned weighting over positions
  Σ_i W[s, i] · m_i · h[s, i]  (W initialised to 1/T), the L+1 vectors concatenated
  → Linear((L+1)·H → H) → tanh → dropout → Linear(H → num_labels), the dropout as the original's
  model of that family had it (BERT, ELECTRA: classifier_dropout or hidden_dropout_prob; DeBERTa:
  cls_dropout or hidden_dropout_prob; RoBERTa, XLM-R, CamemBERT: none; see papa.families);
- token tasks: each token's L+1 hidden states concatenated → Linear((L+1)·H → H) → tanh
  → Linear(H → num_labels).

Both need inputs padded to the T they were built for.
"""

import torch
from torch import nn
from torch.nn import CrossEntropyLoss, MSELoss
from transformers.modeling_outputs import SequenceClassifierOutput, TokenClassifierOutput

from ..families import accepts_token_type_ids, family_for
from ..errors import PapaError


def _init_linear(linear, config):
    # as HF's _init_weights does for the original's heads, which lived inside the PreTrainedModel
    nn.init.normal_(linear.weight, std=config.initializer_range)
    nn.init.zeros_(linear.bias)
    return linear


class FreezeExtractPooler(nn.Module):
    """Position-weighted sums of all L+1 hidden states → one vector per example."""

    def __init__(self, config, seq_len):
        super().__init__()
        num_states = config.num_hidden_layers + 1
        self.weights_per_layer = nn.Parameter(torch.full((num_states, seq_len), 1.0 / seq_len))
        self.dense_across_layers = _init_linear(nn.Linear(num_states * config.hidden_size, config.hidden_size), config)
        self.activation = nn.Tanh()

    def forward(self, hidden_states, attention_mask):
        stacked = torch.stack(hidden_states, dim=1)  # (B, L+1, T, H)
        if stacked.shape[2] != self.weights_per_layer.shape[1]:
            raise PapaError(
                f"the freeze-extract pooler was built for length {self.weights_per_layer.shape[1]} but got "
                f"inputs of length {stacked.shape[2]}: pad inputs to max length"
            )
        weights = self.weights_per_layer * attention_mask[:, None, :].to(stacked.dtype)  # (B, L+1, T)
        pooled = torch.einsum("bst,bsth->bsh", weights, stacked).flatten(1)  # (B, (L+1)·H)
        return self.activation(self.dense_across_layers(pooled))


class FreezeExtractTokenHead(nn.Module):
    """Each token's L+1 hidden states, concatenated → tanh layer → label scores."""

    def __init__(self, config, num_labels):
        super().__init__()
        num_states = config.num_hidden_layers + 1
        self.dense_across_layers_1 = _init_linear(nn.Linear(num_states * config.hidden_size, config.hidden_size), config)
        self.activation = nn.Tanh()
        self.decoder = _init_linear(nn.Linear(config.hidden_size, num_labels), config)

    def forward(self, hidden_states):
        concatenated = torch.cat(hidden_states, dim=-1)  # (B, T, (L+1)·H)
        return self.decoder(self.activation(self.dense_across_layers_1(concatenated)))


class _Probe(nn.Module):
    """An HF encoder (kept under its usual name: `bert`, `roberta`, `deberta`, `model`, ...) with a freeze-extract head."""

    def __init__(self, model, kind, seq_len):
        super().__init__()
        self.config = model.config
        # what load_papa_model needs to rebuild this probe around the same HF model class
        papa = dict(getattr(model.config, "papa", None) or {})
        self.config.papa = {**papa, "model_class": type(model).__name__, "probe": {"kind": kind, "seq_len": seq_len}}
        self.base_model_prefix = model.base_model_prefix
        encoder = model.base_model
        if getattr(encoder, "pooler", None) is not None:
            encoder.pooler = None  # BERT's [CLS] pooler is replaced by the freeze-extract head
        setattr(self, self.base_model_prefix, encoder)
        # ModernBERT's encoder takes no token types; the tokenizer may still produce them
        self._takes_token_types = accepts_token_type_ids(encoder)

    @property
    def base_model(self):
        return getattr(self, self.base_model_prefix)

    def encode(self, input_ids, attention_mask, token_type_ids, output_attentions=False):
        """The encoder's outputs: hidden_states, L+1 tensors (B, T, H), and with `output_attentions` the attentions,
        L tensors (B, heads, T, T), which the probe's output passes on as an HF model's does."""
        extra = {"token_type_ids": token_type_ids} if self._takes_token_types and token_type_ids is not None else {}
        if output_attentions:
            extra["output_attentions"] = True
        return self.base_model(
            input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, return_dict=True, **extra
        )


class FreezeExtractForSequenceClassification(_Probe):
    """Sequence probe: dropout before the classifier as the family's original model had it (papa.families)."""

    def __init__(self, model, seq_len):
        super().__init__(model, "sequence", int(seq_len))
        config = model.config
        self.num_labels = config.num_labels
        self.pooler = FreezeExtractPooler(config, seq_len)
        probe_dropout = family_for(config).probe_dropout
        self.dropout = nn.Identity() if probe_dropout is None else nn.Dropout(probe_dropout(config))
        self.classifier = _init_linear(nn.Linear(config.hidden_size, config.num_labels), config)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None, output_attentions=False,
                **kwargs):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        encoded = self.encode(input_ids, attention_mask, token_type_ids, output_attentions)
        logits = self.classifier(self.dropout(self.pooler(encoded.hidden_states, attention_mask)))
        loss = None
        if labels is not None:
            if self.num_labels == 1:  # regression (STS-B)
                loss = MSELoss()(logits.squeeze(-1), labels.to(logits.dtype).view(-1))
            else:
                loss = CrossEntropyLoss()(logits.view(-1, self.num_labels), labels.view(-1))
        return SequenceClassifierOutput(loss=loss, logits=logits, attentions=encoded.attentions)


class FreezeExtractForTokenClassification(_Probe):
    def __init__(self, model, seq_len=None):
        super().__init__(model, "token", None if seq_len is None else int(seq_len))
        self.num_labels = model.config.num_labels
        self.classifier = FreezeExtractTokenHead(model.config, self.num_labels)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None, output_attentions=False,
                **kwargs):
        encoded = self.encode(input_ids, attention_mask, token_type_ids, output_attentions)
        logits = self.classifier(encoded.hidden_states)
        loss = None
        if labels is not None:
            loss = CrossEntropyLoss()(logits.view(-1, self.num_labels), labels.view(-1))
        return TokenClassifierOutput(loss=loss, logits=logits, attentions=encoded.attentions)
