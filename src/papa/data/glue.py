"""Sequence-task data, offline first: local GLUE TSVs / CSV / JSON, the synthetic generator, the hub
(`--dataset_name`, else the task's own dataset) only as a fallback (token tasks: papa.data.conll).

Every source ends up with the column names of the HF `glue` dataset (a custom task's: its own, see
papa.data.custom), so the scripts never care where the data came from. What a task's files look like
(columns, label format, file names) is in its `papa.data.tasks.TaskSpec`. Test splits (--do_predict) carry
no labels: the official GLUE test files have none. Bad files raise `PapaError` naming the file and
line, because a silently skipped row would quietly change the probing results.
"""

import csv
import os
from pathlib import Path

import datasets

from ..errors import PapaError
from .tasks import get_task

DATA_FLAGS_HINT = ("pass --data_dir (a folder with the official GLUE TSVs: train.tsv, dev.tsv) "
                   "or --train_file/--validation_file")


def hub_is_offline() -> bool:
    """True when HF_HUB_OFFLINE or HF_DATASETS_OFFLINE is set to a true value (read at call time)."""
    return any(os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on")
               for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def hub_dataset(task, dataset_name, dataset_config_name, cache_dir, missing, hint) -> datasets.DatasetDict:
    """The hub dataset for the `missing` splits (no local file): --dataset_name, else the task's own (`task.hub`).

    Offline, or on any failure, one PapaError naming the splits and the local-data `hint`.
    """
    path, config = (dataset_name, dataset_config_name) if dataset_name else (task.hub or (None, None))
    what = f"the {'/'.join(missing)} split(s) of {task.name}"
    if path is None:
        raise PapaError(f"no data for {what}: {hint}")
    if hub_is_offline():
        via = f" (--dataset_name {path} needs it)" if dataset_name else ""
        raise PapaError(f"no local data for {what} and the hub is offline (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE)"
                        f"{via}; {hint}")
    try:
        return datasets.load_dataset(path, config, cache_dir=cache_dir)
    except Exception as err:  # network down, hub changed: one clear line instead of a traceback
        name = path if config is None else f"{path} ({config})"
        raise PapaError(f"could not load {name} from the Hugging Face hub ({type(err).__name__}: {err}); "
                        f"{hint}") from err


def hub_split(hub, split, where):
    """`split` of a hub DatasetDict; MNLI's hub names its first evaluation and test splits `*_matched`."""
    for key in (split, f"{split}_matched"):
        if key in hub:
            return hub[key]
    raise PapaError(f"{where} has no {split} split (it has: {', '.join(hub)})")


def read_table(path, flag, cache_dir=None) -> datasets.Dataset:
    """A CSV or JSON(L) file as a datasets.Dataset, as HF's example scripts load one; a bad file names `flag`."""
    path = Path(path)
    if not path.is_file():
        raise PapaError(f"{flag} {path} does not exist")
    builder = {".csv": "csv", ".json": "json", ".jsonl": "json"}.get(path.suffix.lower())
    if builder is None:
        raise PapaError(f"{flag} {path}: unsupported file type {path.suffix!r} here; use .csv, .json or .jsonl")
    try:
        table = datasets.load_dataset(builder, data_files={"data": str(path)}, cache_dir=cache_dir)["data"]
    except Exception as err:  # a parse error deep inside pyarrow/pandas: name the file instead
        raise PapaError(f"could not read {path} as {builder.upper()}: {type(err).__name__}: {err}") from err
    if len(table) == 0:
        raise PapaError(f"{path} has no data rows")
    return table


# ----------------------------------------------------------------------------- labels

def _label_to_id(value, task, where):
    """A label as found in a file (name, id, or score) -> int id (float for regression), or PapaError."""
    if task.labels is None:  # stsb, or a custom regression task: a score
        try:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        except (TypeError, ValueError):
            raise PapaError(f"{where}: label {value!r} is not a number ({task.name} labels are scores)")
    names = list(task.labels)
    if isinstance(value, float) and value.is_integer():  # e.g. pandas reads ids as floats beside a gap
        value = int(value)
    if task.custom:  # labels are the training file's values, matched as text (HF: sorted unique values)
        if str(value) in names:
            return names.index(str(value))
        raise PapaError(f"{where}: label {value!r} does not occur in the training data; labels: {', '.join(names)}")
    if isinstance(value, str):
        if value in names:
            return names.index(value)
        ids_as_text = [str(i) for i in range(len(names))]
        if value in ids_as_text:
            return int(value)
        raise PapaError(f"{where}: label {value!r} is not a {task.name} label; valid: "
                        f"{', '.join(names + ids_as_text)}")
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
        return value
    raise PapaError(f"{where}: label {value!r} is not a {task.name} label; valid: ids 0..{len(names) - 1} "
                    f"or names {', '.join(names)}")


def table_columns(table, task, where, labels=True) -> dict[str, list]:
    """{text columns..., "label" (ids; with `labels`)} of a datasets table with the task's columns.

    ClassLabel columns (hub datasets) are read by name, so ids follow the task's order whatever the source's.
    """
    needed = list(task.text_columns) + (["label"] if labels else [])
    missing = [c for c in needed if c not in table.column_names]
    if missing:
        raise PapaError(f"{where} lacks column(s) {', '.join(missing)} needed for {task.name} "
                        f"(found: {', '.join(table.column_names)}; expected: {', '.join(needed)})")
    data = table.select_columns(needed).to_dict()
    if labels:
        feature = table.features["label"]
        values = [feature.int2str(v) for v in data["label"]] if isinstance(feature, datasets.ClassLabel) else data["label"]
        data["label"] = [_label_to_id(v, task, f"{where} row {i + 1}") for i, v in enumerate(values)]
    return data


# ----------------------------------------------------------------------------- GLUE files

def _tsv_label_values(task) -> dict[str, int]:
    """The label strings an official TSV of `task` may hold -> label id."""
    values = {}
    if task.tsv_labels in ("names", "any"):
        values.update({name: i for i, name in enumerate(task.labels)})
    if task.tsv_labels in ("ids", "any"):
        values.update({str(i): i for i in range(len(task.labels))})
    return values


def _tsv_positions(rows, path, task, labels):
    """(fields per line, {column: position}) of a GLUE TSV: from the task's layout, or from its header.

    A test file (no `labels`) has a header even for a task whose other files have none (CoLA): its text
    columns are found by name, the HF name where the layout gives only a position.
    """
    wanted = {name: column for name, column in task.tsv_columns if labels or column != "label"}
    if task.tsv_fields is not None and labels:  # no header: fixed positions
        return task.tsv_fields, {column: position for position, column in wanted.items()}
    wanted = {column if isinstance(name, int) else name: column for name, column in wanted.items()}
    header = next(rows, None)
    if header is None:
        raise PapaError(f"GLUE file {path} is empty")
    missing = [name for name in wanted if name not in header]
    if missing:
        raise PapaError(f"{path}:1: header lacks column(s) {', '.join(missing)} of the official "
                        f"{task.name} TSV (found: {', '.join(header)})")
    return len(header), {column: header.index(name) for name, column in wanted.items()}


def read_glue_tsv(path, task, labels=True) -> dict[str, list]:
    """Read an official GLUE TSV into {text columns..., "label"}; label is an id (float for stsb).

    Quote characters are data, not quoting (GLUE files are unquoted), and a BOM is dropped. Columns
    are found by header name, so MNLI train (12 columns) and dev (16 columns) both work. Without
    `labels` (a test file) only the text columns are read.
    """
    task = get_task(task, "sequence")
    path = Path(path)
    if not path.is_file():
        raise PapaError(f"GLUE file {path} does not exist")
    label_values = None if task.labels is None else _tsv_label_values(task)
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        num_fields, where_is = _tsv_positions(rows, path, task, labels)
        data = {c: [] for c in task.text_columns + (("label",) if labels else ())}
        for fields in rows:
            if not fields:  # blank line (e.g. a trailing one)
                continue
            where = f"{path}:{rows.line_num}"
            if len(fields) != num_fields:
                raise PapaError(f"{where}: expected {num_fields} tab-separated fields, found {len(fields)}")
            for c in task.text_columns:
                data[c].append(fields[where_is[c]])
            if not labels:
                continue
            raw = fields[where_is["label"]]
            if label_values is None:
                data["label"].append(_label_to_id(raw, task, where))
            elif raw in label_values:
                data["label"].append(label_values[raw])
            else:
                raise PapaError(f"{where}: label {raw!r} is not a {task.name} label; valid: "
                                f"{', '.join(label_values)}")
    if not data[task.text_columns[0]]:
        raise PapaError(f"GLUE file {path} has no data rows")
    return data


def _read_sequence_file(path, task, flag, cache_dir, labels=True) -> dict[str, list]:
    path = Path(path)
    if not path.is_file():
        raise PapaError(f"{flag} {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".tsv" and not task.custom:
        return read_glue_tsv(path, task, labels)
    if suffix in (".csv", ".json", ".jsonl"):
        return table_columns(read_table(path, flag, cache_dir), task, str(path), labels)
    raise PapaError(f"{flag} {path}: unsupported file type {suffix!r}; use .csv, .json or .jsonl"
                    + ("" if task.custom else " (or an official GLUE .tsv)"))


def _sequence_features(task, labels=True) -> datasets.Features:
    features = {c: datasets.Value("string") for c in task.text_columns}
    if labels:
        features["label"] = (datasets.Value("float32") if task.labels is None
                             else datasets.ClassLabel(names=list(task.labels)))
    return datasets.Features(features)


def _glue_dir_file(data_dir, task, split) -> Path:
    """The official file of `split` in a GLUE task folder; a missing folder/file names --data_dir."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise PapaError(f"--data_dir {data_dir} is not a folder")
    names = {"train": "train.tsv", **{s: file for s, file, _ in task.eval_splits + task.test_splits}}
    path = data_dir / names[split]
    if not path.is_file():
        hint = ""
        if task.glue_folder and (data_dir / task.glue_folder).is_dir():
            hint = f" (did you mean --data_dir {data_dir / task.glue_folder}?)"
        elif split in ("validation", "test"):
            hint = f" (or pass --{split}_file)"
        raise PapaError(f"--data_dir {data_dir} has no {names[split]} for the {split} split of {task.name}{hint}")
    return path


def _expand_splits(task, splits, validation_file, test_file):
    """The splits to load: checked, and with MNLI's mismatched ones when its directory files are read."""
    valid = ("train",) + tuple(s for s, _, _ in task.eval_splits + task.test_splits)
    splits = list(dict.fromkeys(splits))
    for split in splits:
        if split not in valid:
            raise PapaError(f"unknown split {split!r} for {task.name}; valid: {', '.join(valid)}")
    # run_glue evaluates (and predicts) mnli on both sets; a --validation_file or --test_file, though, is one file
    for first, more, file in (("validation", task.eval_splits[1:], validation_file),
                              ("test", task.test_splits[1:], test_file)):
        if first in splits and file is None:
            splits += [s for s, _, _ in more if s not in splits]
    return splits


def load_sequence_task(task, data_dir=None, train_file=None, validation_file=None, cache_dir=None,
                       splits=("train", "validation"), test_file=None, dataset_name=None,
                       dataset_config_name=None) -> datasets.DatasetDict:
    """The requested splits of a sequence task (a TaskSpec or a name), columns = its text columns + "label".

    Sources, per split: the task's generator (synthetic tasks); --train_file/--validation_file/--test_file;
    the official files in --data_dir; the hub (--dataset_name, else the task's own), only when online.
    For a task with more than one evaluation (test) split (mnli), requesting "validation" ("test")
    without a file also yields the others ("validation_mismatched"). Only requested splits are read,
    so a folder with just train.tsv is enough for the averaging scripts. Test splits have no "label".
    """
    task = get_task(task, "sequence")
    splits = _expand_splits(task, splits, validation_file, test_file)
    if task.generator is not None:
        generated = task.generator()
        missing = [s for s in splits if s not in generated]
        if missing:
            raise PapaError(f"the built-in {task.name} task has no {'/'.join(missing)} split")
        return datasets.DatasetDict({s: generated[s].select_columns(list(_sequence_features(task)))
                                     .cast(_sequence_features(task)) for s in splits})

    flag_files = {"train": (train_file, "--train_file"), "validation": (validation_file, "--validation_file"),
                  "test": (test_file, "--test_file")}
    loaded, from_hub = {}, []
    for split in splits:
        labels = not split.startswith("test")
        file, flag = flag_files.get(split, (None, None))
        if file is not None:
            data = _read_sequence_file(file, task, flag, cache_dir, labels)
        elif data_dir is not None:
            data = read_glue_tsv(_glue_dir_file(data_dir, task, split), task, labels)
        else:
            from_hub.append(split)
            continue
        loaded[split] = datasets.Dataset.from_dict(data, features=_sequence_features(task, labels))
    if from_hub:
        hub = hub_dataset(task, dataset_name, dataset_config_name, cache_dir, from_hub, DATA_FLAGS_HINT)
        for split in from_hub:
            labels = not split.startswith("test")
            data = table_columns(hub_split(hub, split, dataset_name or task.hub[0]), task,
                                 f"{dataset_name or task.hub[0]} {split}", labels)
            loaded[split] = datasets.Dataset.from_dict(data, features=_sequence_features(task, labels))
    return datasets.DatasetDict({s: loaded[s] for s in splits})


def read_glue_split(task, data_dir, split="validation") -> datasets.Dataset:
    """One split of a GLUE task folder's official files, alone: MNLI's "validation" is dev_matched.tsv without
    dev_mismatched.tsv, which load_sequence_task would add (and require)."""
    task = get_task(task, "sequence")
    labels = not split.startswith("test")
    data = read_glue_tsv(_glue_dir_file(data_dir, task, split), task, labels)
    return datasets.Dataset.from_dict(data, features=_sequence_features(task, labels))
