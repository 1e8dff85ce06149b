"""Tasks from the user's own data, built as HF's run_glue.py / run_ner.py build them, and `resolve_task`.

`resolve_task` is where a command turns its flags into a `papa.data.tasks.TaskSpec`, once: a registered
task by name, or a custom one read off the training data and then passed down like any other.

- Sequence (no --task_name, as run_glue): CSV/JSON files with a "label" column, or a hub dataset
  (--dataset_name). Text columns: `sentence1` and `sentence2` when both exist, else the first one or
  two other columns. A float label column is a regression (metrics: mse, pearson); anything else is
  classification over the sorted unique training labels (accuracy).
- Token (a --task_name that is not ner/pos/chunk, as run_ner takes any): JSON lines of word and tag
  lists, or a hub dataset; the labels are the hub's ClassLabel names, else the sorted training tags.
"""

from pathlib import Path

import datasets

from ..errors import PapaError
from .tasks import TASKS, TaskSpec, _squash, get_task, task_names

CUSTOM_NAME = "custom"  # a custom sequence task's name (predict_results_custom.txt, papa_sweep_custom/)


def _train_table(train_file, dataset_name, dataset_config_name, cache_dir, what):
    """The training data a custom task is read off: --train_file (CSV/JSON), else --dataset_name's train split."""
    from .glue import hub_dataset, hub_split, read_table

    if train_file is not None:
        return read_table(train_file, "--train_file", cache_dir), str(train_file)
    probe = TaskSpec(what, "sequence", hub=None)
    hub = hub_dataset(probe, dataset_name, dataset_config_name, cache_dir, ["train"],
                      "pass --train_file/--validation_file (CSV or JSON), or --task_name and --data_dir")
    return hub_split(hub, "train", dataset_name), f"{dataset_name} train"


def custom_sequence_task(table, where) -> TaskSpec:
    """A sequence TaskSpec for a table with a "label" column, with run_glue's choices of columns and labels."""
    if "label" not in table.column_names:
        raise PapaError(f"{where} has no 'label' column (found: {', '.join(table.column_names)}); without "
                        f"--task_name the data needs one, as in HF's run_glue")
    others = [c for c in table.column_names if c != "label"]
    if not others:
        raise PapaError(f"{where} has no text column besides 'label'")
    pair = ("sentence1", "sentence2")
    text_columns = pair if set(pair) <= set(others) else tuple(others[:2])
    feature = table.features["label"]
    if isinstance(feature, datasets.ClassLabel):
        labels = tuple(feature.names)
    elif getattr(feature, "dtype", None) in ("float32", "float64"):
        labels = None  # regression
    else:
        values = table.unique("label")
        if None in values:
            raise PapaError(f"{where}: the 'label' column has empty values")
        labels = tuple(str(v) for v in sorted(values))  # sorted values, as run_glue, for the same ids
    if labels is None:
        return TaskSpec(CUSTOM_NAME, "sequence", text_columns, None, metrics=("mse", "pearson"),
                        main_metrics=("pearson", "mse"), lower_is_better=("mse",), custom=True)
    return TaskSpec(CUSTOM_NAME, "sequence", text_columns, labels, custom=True)


def custom_token_task(name, table, where, text_column=None, label_column=None) -> TaskSpec:
    """A token TaskSpec named `name` whose labels are the table's tag set (ClassLabel names, else sorted tags)."""
    from .conll import token_column_names

    _, label = token_column_names(table, name, where, text_column, label_column)
    inner = getattr(table.features[label], "feature", None)
    if isinstance(inner, datasets.ClassLabel):
        labels = tuple(inner.names)
    else:
        labels = tuple(sorted({str(t) for row in table[label] for t in row}))
    if not labels:
        raise PapaError(f"{where} has no tags")
    return TaskSpec(name, "token", labels=labels, metrics=("precision", "recall", "f1", "accuracy"),
                    main_metrics=("f1",), custom=True)


def resolve_task(kind, task_name, train_file=None, dataset_name=None, dataset_config_name=None, cache_dir=None,
                 text_column_name=None, label_column_name=None) -> TaskSpec:
    """The TaskSpec a command runs (kind: "sequence", "token", or None for the sweep, which picks by task).

    Sequence: --task_name, else a custom task from --train_file or --dataset_name. Token: --task_name
    (default ner, as the original); a name other than ner/pos/chunk is a custom tag set.
    """
    if kind == "token" and task_name is None:
        task_name = "ner"
    if task_name is not None:
        if kind != "token" or _squash(task_name) in {_squash(n) for n in TASKS}:
            return get_task(task_name, kind)
        if train_file is None and dataset_name is None:
            raise PapaError(f"unknown task {task_name!r}: the CoNLL-2003 tasks are {', '.join(task_names('token'))}; "
                            f"a task of your own needs --train_file (JSON lines of word and tag lists) or --dataset_name")
        table, where = _train_table(train_file, dataset_name, dataset_config_name, cache_dir, task_name)
        return custom_token_task(task_name, table, where, text_column_name, label_column_name)
    if train_file is None and dataset_name is None:
        raise PapaError(f"--task_name is required (one of: {', '.join(task_names('sequence'))}), or pass "
                        f"--train_file/--validation_file (CSV or JSON with a 'label' column) or --dataset_name "
                        f"for data of your own")
    if train_file is not None and Path(train_file).suffix.lower() not in (".csv", ".json", ".jsonl"):
        raise PapaError(f"--train_file {train_file}: without --task_name the data must be CSV or JSON (as in HF's "
                        f"run_glue); a .tsv is read as an official GLUE file: pass --task_name")
    table, where = _train_table(train_file, dataset_name, dataset_config_name, cache_dir, CUSTOM_NAME)
    return custom_sequence_task(table, where)
