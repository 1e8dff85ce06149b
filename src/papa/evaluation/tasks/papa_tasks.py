"""Loaded by lm-eval, by path, for the `!function papa_tasks.<name>` tags of the YAMLs beside it; the functions
are papa.evaluation.data's."""

from papa.evaluation.data import glue_validation, perplexity_results, text_documents  # noqa: F401
