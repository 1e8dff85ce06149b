"""Loaded by lm-eval, by path, for the `!function papa_tasks.<name>` tags of the YAMLs beside it; the functions
are papa.evaluation.data's.

It also registers the model type `papa` (papa.evaluation.harness), so that lm-eval's own `lm_eval` command runs
`--model papa` when the tasks are given as these YAML files' paths (`--tasks DIR/papa_sst2.yaml,...`): lm-eval
0.4.13 resolves the `!function` tags of task files given by path while it reads its command line, before it looks
the model type up (tests/test_lm_eval_cli.py). Tasks given by name (`--include_path DIR --tasks papa_sst2`) are
read only after that, so there `lm_eval` answers "no model for this name": use `papa-lm-eval`."""

from papa.evaluation import harness  # noqa: F401 (registers the model type "papa" with lm-eval)
from papa.evaluation.data import (glue_validation, perplexity_results, retrieval_documents,  # noqa: F401
                                  text_documents)
