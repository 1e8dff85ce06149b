"""PAPA: replace attention heads by constant matrices and measure what probing loses.

    patch_model            make heads constant (or mix all heads), in place
    accumulate_attention   average each head's attention over data → the constant matrices
    build_model, set_trainable, save_papa_model, load_papa_model
    default_model_path, default_decoder_path   the bundled MiniLM (encoder) and SmolLM2-135M (decoder, .gguf)
    sorted_heads_from_lambdas, save_ranking, load_sorted_heads, first_k_heads
    plain_output           off a terminal: no progress bars, no colour codes (as the commands do it)

Importing papa changes nothing in the process; the commands (papa.cli) ask PyTorch for huge pages
when they start (papa/hugepages.py), and a script of your own may call `papa.hugepages.enable()`
before its first model.
"""

from .method.attention import lambdas_array, load_constant_matrices, patch_model
from .method.averaging import AttentionAverager, accumulate_attention
from .models.bundled import default_decoder_path
from .console import plain_output
from .errors import PapaError
from .models.modeling import build_model, default_model_path, load_papa_model, save_papa_model, set_trainable
from .models.poolers import FreezeExtractForSequenceClassification, FreezeExtractForTokenClassification
from .method.ranking import first_k_heads, load_sorted_heads, save_ranking, sorted_heads_from_lambdas

__all__ = [
    "AttentionAverager", "FreezeExtractForSequenceClassification", "FreezeExtractForTokenClassification",
    "PapaError", "accumulate_attention", "build_model", "default_decoder_path", "default_model_path", "first_k_heads", "lambdas_array",
    "load_constant_matrices", "load_papa_model", "load_sorted_heads", "patch_model", "plain_output", "save_papa_model",
    "save_ranking", "set_trainable", "sorted_heads_from_lambdas",
]
