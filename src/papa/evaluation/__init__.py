"""PAPA models in lm-evaluation-harness (lm-eval 0.4.13): a model type `papa` and offline tasks.

- `papa.evaluation.patched_lm`: a causal LM with the first k ranked heads constant, built from the sweep's files
  (avgs.pt, sorted_heads.json), and the aligned forward lm-eval's requests need: every row right-padded to the
  constants' T, generation without a key/value cache.
- `papa.evaluation.harness`: the model type (`lm_eval --model papa` through `papa-lm-eval`), an HFLM subclass.
- `papa.evaluation.tasks/`: task YAMLs for the local GLUE files and a rolling perplexity (`--include_path`),
  read through `papa.evaluation.data`.
- `papa.evaluation.scoring`: evaluate a model on those tasks and write lm_eval_results.json (the probing runs'
  `--lm_eval_tasks`, the sweep's).

lm-eval is an optional dependency (`pip install -e .[lm-eval]`): nothing here imports it until it is used, and
`require_lm_eval` says how to install it.
"""

import os

TASKS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tasks")  # for lm-eval's --include_path
LM_EVAL_VERSION = "0.4.13"
INSTALL_HINT = f"pip install -e '.[lm-eval]' in the repository (or pip install lm_eval=={LM_EVAL_VERSION})"


def require_lm_eval():
    """The imported `lm_eval` package; a clear PapaError saying how to install it when it is absent."""
    from ..errors import PapaError

    try:
        import lm_eval
    except ImportError:
        raise PapaError(f"lm-evaluation-harness (lm_eval) is not installed: {INSTALL_HINT}") from None
    return lm_eval


def lm_eval_model(pretrained, static_heads_dir=None, sorting_heads_dir=None, static_heads_num=0, **kwargs):
    """lm-eval's `papa` model (an HFLM) around the PAPA-patched causal LM: see papa.evaluation.harness.PapaLM."""
    require_lm_eval()
    from .harness import PapaLM

    return PapaLM(pretrained=pretrained, static_heads_dir=static_heads_dir, sorting_heads_dir=sorting_heads_dir,
                  static_heads_num=static_heads_num, **kwargs)
