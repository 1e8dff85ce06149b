"""Loading, training modes, and save/reload of PAPA models.

`build_model` assembles what a script trains: an HF encoder of a supported family, PAPA-patched, optionally
behind a freeze-extract probe. Everything needed to rebuild it is recorded in `config.papa`, so
`load_papa_model(folder)` restores a saved model — pruned Q/K, constant matrices, lambdas and
probe included — to identical logits, which HF's `from_pretrained` alone cannot do.
"""

import copy
import os

import torch
import transformers
from safetensors.torch import load_file, save_file

from ..method.attention import HEAD_LAYOUT, head_dim, patch_model, reorder_heads
from .bundled import default_model_path, local_model_path  # noqa: F401 (default_model_path: papa's API, here before)
from ..errors import PapaError
from ..io import atomic_files
from .poolers import FreezeExtractForSequenceClassification, FreezeExtractForTokenClassification

WEIGHTS_NAME = "model.safetensors"
TRAINING_MODES = ("sort_calculating", "grad_for_classifier_only", "grad_for_classifier_and_static_only")
CLASSIFIER_NAMES = ("classifier", "score")  # the task heads: encoders' and GPT-2's token head; Llama's and GPT-2's `score`
PROBES = {"sequence": FreezeExtractForSequenceClassification, "token": FreezeExtractForTokenClassification}


def training_mode(sort_calculating=False, grad_for_classifier_only=False, grad_for_classifier_and_static_only=False):
    """The one training mode requested (None = train everything); two at once is an error."""
    chosen = [
        name
        for name, on in zip(TRAINING_MODES, (sort_calculating, grad_for_classifier_only, grad_for_classifier_and_static_only))
        if on
    ]
    if len(chosen) > 1:
        raise PapaError(f"choose one training mode, not {' and '.join('--' + c for c in chosen)}")
    return chosen[0] if chosen else None


def set_trainable(model, mode):
    """Freeze parameters as the original did, by name; returns the names left trainable.

    Always trainable in a probing mode: the classifier (`classifier`; decoders' HF heads: `score`) and
    anything named `pooler`; plus the constant matrices, or a mean-output run's mean outputs (the optimal_output
    control), with grad_for_classifier_and_static_only, or the lambdas (sort_calculating).
    """
    extra = {"sort_calculating": ("lambdas",),
             "grad_for_classifier_and_static_only": ("constant_matrices", "mean_outputs")}.get(mode)
    trainable = []
    for name, param in model.named_parameters():
        keep = (mode is None or name.startswith(CLASSIFIER_NAMES) or "pooler" in name
                or (extra is not None and any(e in name for e in extra)))
        param.requires_grad_(keep)
        if keep:
            trainable.append(name)
    return trainable


def check_task_head(model_class, config):
    """A clear error when transformers has no `model_class` (an Auto class) for this model type: some decoders
    (Granite; Gemma3's text model for token tasks) come without classification heads."""
    mapping = getattr(getattr(transformers, model_class), "_model_mapping", None)
    if mapping is not None and type(config) not in mapping:
        head = model_class.removeprefix("AutoModelFor")
        raise PapaError(f"transformers {transformers.__version__} has no {head} model for model_type="
                        f"{config.model_type!r}, so this task cannot be probed on it; use a model type that has one")


def build_model(
    model_class,
    config,
    model_name_or_path=None,
    constant_matrices=None,
    static_heads=None,
    mix_all_heads=False,
    freeze_extract_seq_len=None,
    cache_dir=None,
    mean_outputs=None,
    reorder=True,
    output_corrections=None,
    structured=None,
):
    """An HF model (`model_class`, e.g. "BertForSequenceClassification" or an Auto class name)
    loaded from `model_name_or_path` (a folder, hub name, .gguf file or bundled name: papa.models.bundled; randomly
    initialised from `config` when None), patched
    when constant matrices (or, for the mean-ablation control, mean head outputs) are given, and
    wrapped in a freeze-extract probe when `freeze_extract_seq_len` is set. `config.papa` records
    all of it."""
    cls = getattr(transformers, model_class)
    if model_name_or_path is None:
        model = cls.from_config(config) if hasattr(cls, "from_config") else cls(config)
    else:
        model = cls.from_pretrained(local_model_path(model_name_or_path), config=config, cache_dir=cache_dir)
    if constant_matrices is not None or mean_outputs is not None or structured is not None:
        patch_model(model, constant_matrices, static_heads=static_heads, mix_all_heads=mix_all_heads,
                    mean_outputs=mean_outputs, reorder=reorder, output_corrections=output_corrections,
                    structured=structured)
    if freeze_extract_seq_len is not None:
        kind = "token" if "TokenClassification" in type(model).__name__ else "sequence"
        return PROBES[kind](model, freeze_extract_seq_len)
    return model


def save_papa_model(model, output_dir, tokenizer=None):
    """config.json (with the `papa` block), model.safetensors and, when given, the tokenizer's files; each
    file atomic, the weights moved in last (papa.io.atomic_files)."""
    papa = dict(getattr(model.config, "papa", None) or {})
    papa.setdefault("model_class", type(model).__name__)  # a patched HF model saved as it is
    model.config.papa = papa
    state, seen = {}, set()
    for name, tensor in model.state_dict().items():
        tensor = tensor.detach().contiguous().cpu()
        if tensor.data_ptr() in seen:  # tied weights (a decoder's LM head and embeddings): safetensors wants copies
            tensor = tensor.clone()
        seen.add(tensor.data_ptr())
        state[name] = tensor
    with atomic_files(output_dir) as tmp:
        model.config.save_pretrained(tmp)
        save_file(state, os.path.join(tmp, WEIGHTS_NAME), metadata={"format": "pt"})
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)


def load_papa_model(path, device="cpu"):
    """Rebuild a model saved by `save_papa_model` (or a PAPA training run) from its folder."""
    weights = os.path.join(path, WEIGHTS_NAME)
    if not os.path.isfile(weights):
        raise PapaError(f"{weights} not found: the run was saved with --save_total_limit 0 (config only)?")
    config = transformers.AutoConfig.from_pretrained(path)
    papa = copy.deepcopy(getattr(config, "papa", None) or {})
    if "model_class" not in papa:
        raise PapaError(f"{path}/config.json has no 'papa' section: not a PAPA model folder")
    config.papa = None
    constants = means = corrections = structured = None
    shape = (config.num_hidden_layers, config.num_attention_heads)
    if "structured" in papa:
        structured = (torch.zeros(*shape, papa["structured"]["sink_len"]),
                      torch.zeros(*shape, papa["structured"]["profile_len"]))
    if "seq_len" in papa:  # placeholders of the right shapes; the state dict fills them
        t, shape = papa["seq_len"], (config.num_hidden_layers, config.num_attention_heads)
        if papa.get("head_mode", "constant") == "mean_output":
            means = torch.zeros(*shape, t, head_dim(config))
        else:
            constants = torch.zeros(()).expand(*shape, t, t)  # a view: patch_model copies only the replaced heads
            if papa.get("output_corrections"):
                corrections = torch.zeros(()).expand(*shape, t, head_dim(config))
    # folders saved before heads were laid out [dynamic | replaced] hold the stock layout: load it as
    # it is, then lay it out
    stock_layout = "seq_len" in papa and papa.get("head_layout") != HEAD_LAYOUT
    model = build_model(papa["model_class"], config, None, constants, papa.get("static_heads"),
                        papa.get("mix_all_heads", False), mean_outputs=means, reorder=not stock_layout,
                        output_corrections=corrections, structured=structured)
    probe = papa.get("probe")
    if probe:
        model = PROBES[probe["kind"]](model, probe["seq_len"])
    model.load_state_dict(load_file(weights), strict=True)
    if stock_layout:
        reorder_heads(model)
    return model.to(device).eval()
