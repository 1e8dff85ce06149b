"""What the scripts load by name — config, tokenizer, the weights' folder — with HF's example-script flags.

--config_name / --tokenizer_name load those from elsewhere than the model; --model_revision and
--token (transformers 4: --use_auth_token) pick a hub version and authenticate; --use_fast_tokenizer
false asks for a slow tokenizer, which token tasks cannot use (they align tags with word_ids, as
HF's run_ner requires). The averaging scripts' --model_type averages an untrained model of a type.

Tokenizers are set up for PAPA's fixed positions (`fit_tokenizer`): right padding always, and a pad
token for decoders' tokenizers that have none (GPT-2's, most Llama ones).
"""

import os

from transformers import AutoConfig, AutoTokenizer

from ..console import stage
from ..data.glue import hub_is_offline
from ..errors import PapaError, first_line
from ..families import FAMILIES, family_for
from .bundled import check_model_path, default_model_path, local_model_path

# what a model folder needs: config, tokenizer files, weights (no TF/Flax/ONNX copies)
SNAPSHOT_FILES = ["*.json", "*.txt", "*.model", "*.safetensors", "*.bin"]


def model_folder(path, revision="main", token=None, cache_dir=None):
    """`path`, or for a hub model at another revision or behind a token, its local snapshot folder; for a .gguf
    file or a bundled name (`smollm2`), its HF folder (papa.models.bundled.local_model_path).

    papa.models.modeling.build_model loads weights by path alone, so the revision and the token are applied
    here, once, and every later load reads the folder.
    """
    path = local_model_path(path)
    if path is None or os.path.isdir(path) or (revision in (None, "main") and token is None):
        return path
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(path, revision=revision, token=token, cache_dir=cache_dir,
                                 allow_patterns=SNAPSHOT_FILES)
    except Exception as err:  # offline, unknown revision, bad token
        raise PapaError(f"cannot fetch model {path!r} at revision {revision!r} from the hub "
                        f"({type(err).__name__}: {first_line(err)}); pass a local folder as "
                        f"--model_name_or_path") from None


def check_model_paths(model_name_or_path=None, config_name=None, tokenizer_name=None):
    """The cheap local checks, before any data is read or the network is asked: every name that can only be a
    local path (papa.models.bundled.path_reason) exists."""
    for flag, name in (("--model_name_or_path", model_name_or_path), ("--config_name", config_name),
                       ("--tokenizer_name", tokenizer_name)):
        check_model_path(name, flag)


def _load(what, loader, name, **kwargs):
    check_model_path(name, f"the {what}")
    try:
        return loader(name, **kwargs)
    except (OSError, ValueError) as err:
        offline = hub_is_offline() and not os.path.isdir(name)
        raise PapaError(f"cannot load {what} {name!r}: {first_line(err).rstrip('.')}"
                        + ("; the hub is offline (HF_HUB_OFFLINE): pass a local folder" if offline else "")) from None


def check_lm_model(config, name):
    """The lm task scores text with a decoder's own causal LM head: an encoder (a family without one) is an error."""
    if not family_for(config).causal:
        decoders = ", ".join(t for t, f in FAMILIES.items() if f.causal)
        raise PapaError(f"--task_name lm scores text with a causal language model's own LM head; {name} is a "
                        f"{config.model_type} encoder, which has none: use a decoder ({decoders})")


def load_config_and_tokenizer(model_name_or_path, cache_dir, task, label_list, max_length, config_name=None,
                              tokenizer_name=None, revision="main", token=None, use_fast=True, model_type=None):
    """(model folder or None, config with the task's labels, tokenizer); checks the family and T.

    The folder is None for an untrained `model_type` model (no --model_name_or_path); without both,
    the bundled MiniLM. The lm task needs a decoder (a family with a causal LM head).
    """
    if model_name_or_path is None and model_type is None:
        model_name_or_path = default_model_path()
    path = model_folder(model_name_or_path, revision, token, cache_dir)
    # lm scores with the model's own LM head: no labels to set
    labels = {} if task.kind == "lm" else {"num_labels": 1 if label_list is None else len(label_list)}
    hub = dict(cache_dir=cache_dir, revision=revision, token=token)
    if config_name or path:
        config = _load("config", AutoConfig.from_pretrained, config_name or path, **labels, **hub)
    else:
        try:
            config = AutoConfig.for_model(model_type, **labels)
        except ValueError as err:
            raise PapaError(f"--model_type {model_type!r}: {first_line(err)}") from None
    try:
        family = family_for(config)
    except PapaError as err:
        raise PapaError(f"{path or model_type}: {err}") from None
    if task.kind == "lm":
        check_lm_model(config, path or model_type)
        config.use_cache = False  # full-sequence forwards unless asked (use_cache=True: papa/families/generation.py)
    if label_list is not None:
        config.id2label = dict(enumerate(label_list))
        config.label2id = {label: i for i, label in enumerate(label_list)}
    # RoBERTa-style models reserve their first position ids for padding
    limit = config.max_position_embeddings - (config.pad_token_id + 1 if family.position_offset else 0)
    if max_length > limit:
        raise PapaError(f"sequence length {max_length} exceeds the model's {limit} position embeddings; lower it")

    tokenizer_path = tokenizer_name or path
    if tokenizer_path is None:
        raise PapaError("--model_type builds an untrained model but no tokenizer: pass --tokenizer_name")
    if task.kind == "token" and not use_fast:
        raise PapaError("token tasks need a fast tokenizer (its word_ids() align tags to sub-tokens), as in HF's "
                        "run_ner; drop --use_fast_tokenizer false / --use_slow_tokenizer")
    tokenizer = _load("tokenizer", AutoTokenizer.from_pretrained, tokenizer_path, use_fast=use_fast, **hub)
    if task.kind == "token" and getattr(tokenizer, "add_prefix_space", None) is False:
        # byte-level BPE (RoBERTa, DeBERTa v1) marks word starts by a preceding space: pre-split words
        # need one, as the original set for its token tasks
        tokenizer = _load("tokenizer", AutoTokenizer.from_pretrained, tokenizer_path, use_fast=use_fast,
                          add_prefix_space=True, **hub)
    if task.kind == "token" and not getattr(tokenizer, "is_fast", False):
        raise PapaError(f"{tokenizer_path} has no fast tokenizer; token tasks need one (word_ids()), as in HF's run_ner")
    fit_tokenizer(tokenizer, config, family.causal, tokenizer_path)
    return path, config, tokenizer


def fit_tokenizer(tokenizer, config, causal, name):
    """Set `tokenizer` (and a decoder's `config`) up for PAPA's fixed positions, in place; each change logged.

    - Right padding: rows start at position 0, as avgs.pt's positions do (many Llama tokenizers pad on
      the left, for generation).
    - A tokenizer without a pad token gets pad = eos, the standard fix for GPT-2 and Llama; one with
      neither cannot pad to T: a clear error. A pad id outside the model's embeddings (a token added on top of
      its vocabulary) is replaced by eos the same way, or is a clear error without an eos inside them.
    - A decoder's config.pad_token_id becomes the tokenizer's pad id (saved with the model): its sequence
      classifier pools the last token that is not the pad id, and refuses batches without one.
    """
    if tokenizer.padding_side != "right":
        stage(f"tokenizer {name} pads on the {tokenizer.padding_side}: switched to right padding, so positions "
              f"line up with avgs.pt")
        tokenizer.padding_side = "right"
    vocab = getattr(config, "vocab_size", None)
    missing = tokenizer.pad_token is None
    if missing or (vocab is not None and tokenizer.pad_token_id >= vocab):  # e.g. a pad token added on top of the vocabulary
        if tokenizer.eos_token is None:
            raise PapaError(f"tokenizer {name} has neither a pad token nor an eos token, so rows cannot be padded "
                            f"to T; give it one (\"pad_token\" in its tokenizer_config.json) or pass another "
                            f"--tokenizer_name")
        reason = " has no pad token" if missing else (f"'s pad token (id {tokenizer.pad_token_id}) is outside the "
                                                      f"model's {vocab} embeddings")
        if vocab is not None and tokenizer.eos_token_id >= vocab:
            where = f"the model's {vocab} embeddings" if missing else "them too"
            raise PapaError(f"tokenizer {name}{reason}, and its eos token (id {tokenizer.eos_token_id}) is outside "
                            f"{where}: nothing to pad with; pass a tokenizer that matches the model (--tokenizer_name)")
        tokenizer.pad_token = tokenizer.eos_token
        stage(f"tokenizer {name}{reason}: padding with its eos token {tokenizer.eos_token!r} "
              f"(id {tokenizer.eos_token_id})")
    if causal and getattr(config, "pad_token_id", None) != tokenizer.pad_token_id:
        stage(f"config.pad_token_id {getattr(config, 'pad_token_id', None)} -> {tokenizer.pad_token_id} (the "
              f"tokenizer's pad id, saved with the model: a decoder's sequence classifier pools the last token "
              f"before the padding)")
        config.pad_token_id = tokenizer.pad_token_id
