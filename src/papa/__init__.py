"""PAPA: replace attention heads by constant matrices and measure what probing loses."""

from .attention import lambdas_array, load_constant_matrices, patch_model
from .errors import PapaError

__all__ = ["PapaError", "lambdas_array", "load_constant_matrices", "patch_model"]
