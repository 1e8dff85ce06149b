"""Sequence-task data, offline first: local GLUE TSVs / CSV / JSON, the synthetic generator, the hub
only as a fallback (token tasks: papa.conll).

Every source ends up with the column names of the HF `glue` dataset, so the scripts never care
where the data came from. What a task's files look like (columns, label format, file names) is in
its `papa.tasks.TaskSpec`. Bad files raise `PapaError` naming the file and line, because a silently
skipped row would quietly change the probing results.
"""

import csv
import os
from pathlib import Path

import datasets

from .errors import PapaError
from .tasks import get_task

DATA_FLAGS_HINT = ("pass --data_dir (a folder with the official GLUE TSVs: train.tsv, dev.tsv) "
                   "or --train_file/--validation_file")


def hub_is_offline() -> bool:
    """True when HF_HUB_OFFLINE or HF_DATASETS_OFFLINE is set to a true value (read at call time)."""
    return any(os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on")
               for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


# ----------------------------------------------------------------------------- GLUE files

def _label_to_id(value, task, where):
    """A label as found in a file (name, id, or score) -> int id (float for regression), or PapaError."""
    if task.labels is None:  # stsb: a similarity score
        try:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        except (TypeError, ValueError):
            raise PapaError(f"{where}: label {value!r} is not a number ({task.name} labels are similarity scores)")
    names = list(task.labels)
    if isinstance(value, str):
        if value in names:
            return names.index(value)
        ids_as_text = [str(i) for i in range(len(names))]
        if value in ids_as_text:
            return int(value)
        raise PapaError(f"{where}: label {value!r} is not a {task.name} label; valid: "
                        f"{', '.join(names + ids_as_text)}")
    if isinstance(value, float) and value.is_integer():  # e.g. pandas reads ids as floats beside a gap
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
        return value
    raise PapaError(f"{where}: label {value!r} is not a {task.name} label; valid: ids 0..{len(names) - 1} "
                    f"or names {', '.join(names)}")


def _tsv_label_values(task) -> dict[str, int]:
    """The label strings an official TSV of `task` may hold -> label id."""
    values = {}
    if task.tsv_labels in ("names", "any"):
        values.update({name: i for i, name in enumerate(task.labels)})
    if task.tsv_labels in ("ids", "any"):
        values.update({str(i): i for i in range(len(task.labels))})
    return values


def _tsv_positions(rows, path, task):
    """(fields per line, {column: position}) of a GLUE TSV: from the task's layout, or from its header."""
    wanted = dict(task.tsv_columns)
    if task.tsv_fields is not None:  # no header: fixed positions
        return task.tsv_fields, {column: position for position, column in wanted.items()}
    header = next(rows, None)
    if header is None:
        raise PapaError(f"GLUE file {path} is empty")
    missing = [name for name in wanted if name not in header]
    if missing:
        raise PapaError(f"{path}:1: header lacks column(s) {', '.join(missing)} of the official "
                        f"{task.name} TSV (found: {', '.join(header)})")
    return len(header), {column: header.index(name) for name, column in wanted.items()}


def read_glue_tsv(path, task) -> dict[str, list]:
    """Read an official GLUE TSV into {text columns..., "label"}; label is an id (float for stsb).

    Quote characters are data, not quoting (GLUE files are unquoted), and a BOM is dropped. Columns
    are found by header name, so MNLI train (12 columns) and dev (16 columns) both work.
    """
    task = get_task(task, "sequence")
    path = Path(path)
    if not path.is_file():
        raise PapaError(f"GLUE file {path} does not exist")
    label_values = None if task.labels is None else _tsv_label_values(task)
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        num_fields, where_is = _tsv_positions(rows, path, task)
        data = {c: [] for c in task.text_columns + ("label",)}
        for fields in rows:
            if not fields:  # blank line (e.g. a trailing one)
                continue
            where = f"{path}:{rows.line_num}"
            if len(fields) != num_fields:
                raise PapaError(f"{where}: expected {num_fields} tab-separated fields, found {len(fields)}")
            for c in task.text_columns:
                data[c].append(fields[where_is[c]])
            raw = fields[where_is["label"]]
            if label_values is None:
                data["label"].append(_label_to_id(raw, task, where))
            elif raw in label_values:
                data["label"].append(label_values[raw])
            else:
                raise PapaError(f"{where}: label {raw!r} is not a {task.name} label; valid: "
                                f"{', '.join(label_values)}")
    if not data["label"]:
        raise PapaError(f"GLUE file {path} has no data rows")
    return data


def _read_hf_file(path, task, cache_dir) -> dict[str, list]:
    """A CSV/JSON(L) file with the task's columns and "label" (names or ids), as HF run_glue reads it."""
    builder = {".csv": "csv", ".json": "json", ".jsonl": "json"}[path.suffix.lower()]
    try:
        table = datasets.load_dataset(builder, data_files={"data": str(path)}, cache_dir=cache_dir)["data"]
    except Exception as err:  # a parse error deep inside pyarrow/pandas: name the file instead
        raise PapaError(f"could not read {path} as {builder.upper()}: {type(err).__name__}: {err}") from err
    needed = list(task.text_columns) + ["label"]
    missing = [c for c in needed if c not in table.column_names]
    if missing:
        raise PapaError(f"{path} lacks column(s) {', '.join(missing)} needed for {task.name} "
                        f"(found: {', '.join(table.column_names)}; expected: {', '.join(needed)})")
    if len(table) == 0:
        raise PapaError(f"{path} has no data rows")
    data = table.select_columns(needed).to_dict()
    data["label"] = [_label_to_id(v, task, f"{path} row {i + 1}") for i, v in enumerate(data["label"])]
    return data


def _read_sequence_file(path, task, flag, cache_dir) -> dict[str, list]:
    path = Path(path)
    if not path.is_file():
        raise PapaError(f"{flag} {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".tsv":
        return read_glue_tsv(path, task)
    if suffix in (".csv", ".json", ".jsonl"):
        return _read_hf_file(path, task, cache_dir)
    raise PapaError(f"{flag} {path}: unsupported file type {suffix!r}; use .tsv (official GLUE), .csv, "
                    f".json or .jsonl")


def _sequence_features(task) -> datasets.Features:
    features = {c: datasets.Value("string") for c in task.text_columns}
    features["label"] = (datasets.Value("float32") if task.labels is None
                         else datasets.ClassLabel(names=list(task.labels)))
    return datasets.Features(features)


def _glue_dir_file(data_dir, task, split) -> Path:
    """The official file of `split` in a GLUE task folder; a missing folder/file names --data_dir."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise PapaError(f"--data_dir {data_dir} is not a folder")
    names = {"train": "train.tsv", **{s: file for s, file, _ in task.eval_splits}}
    path = data_dir / names[split]
    if not path.is_file():
        hint = ""
        if task.glue_folder and (data_dir / task.glue_folder).is_dir():
            hint = f" (did you mean --data_dir {data_dir / task.glue_folder}?)"
        elif split == "validation":
            hint = " (or pass --validation_file)"
        raise PapaError(f"--data_dir {data_dir} has no {names[split]} for the {split} split of {task.name}{hint}")
    return path


def load_from_hub(task, what, hint, cache_dir) -> datasets.DatasetDict:
    """The task's hub dataset (`task.hub`); a failure is one PapaError naming `what` and the local-data `hint`."""
    path, config = task.hub
    try:
        return datasets.load_dataset(path, config, cache_dir=cache_dir)
    except Exception as err:  # network down, hub changed: one clear line instead of a traceback
        raise PapaError(f"could not load {what} from the Hugging Face hub ({type(err).__name__}: {err}); "
                        f"{hint}") from err


def _load_glue_from_hub(task, splits, cache_dir) -> datasets.DatasetDict:
    hub = load_from_hub(task, f"glue/{task.name}", DATA_FLAGS_HINT, cache_dir)
    if "validation_matched" in hub:
        hub["validation"] = hub.pop("validation_matched")
    columns = list(task.text_columns) + ["label"]
    return datasets.DatasetDict({s: hub[s].select_columns(columns).cast(_sequence_features(task))
                                 for s in splits})


def load_sequence_task(task, data_dir=None, train_file=None, validation_file=None, cache_dir=None,
                       splits=("train", "validation")) -> datasets.DatasetDict:
    """The requested splits of a sequence task (a TaskSpec or a name), columns = its text columns + "label".

    Sources, per split: the task's generator (synthetic tasks); --train_file/--validation_file;
    the official files in --data_dir; the hub, only when online. For a task with more than one
    evaluation split (mnli), requesting "validation" without --validation_file also yields the
    others ("validation_mismatched"). Only requested splits are read, so a folder with just
    train.tsv is enough for the averaging scripts.
    """
    task = get_task(task, "sequence")
    valid_splits = ("train",) + tuple(s for s, _, _ in task.eval_splits)
    splits = list(dict.fromkeys(splits))
    for split in splits:
        if split not in valid_splits:
            raise PapaError(f"unknown split {split!r} for {task.name}; valid: {', '.join(valid_splits)}")
    # run_glue evaluates mnli on both dev sets; a --validation_file, though, is just one file
    if "validation" in splits and validation_file is None:
        splits += [s for s, _, _ in task.eval_splits[1:] if s not in splits]
    features = _sequence_features(task)

    if task.generator is not None:
        generated = task.generator()
        return datasets.DatasetDict({s: generated[s].select_columns(list(features)).cast(features)
                                     for s in splits})

    flag_files = {"train": (train_file, "--train_file"), "validation": (validation_file, "--validation_file")}
    loaded, from_hub = {}, []
    for split in splits:
        file, flag = flag_files.get(split, (None, None))
        if file is not None:
            data = _read_sequence_file(file, task, flag, cache_dir)
        elif data_dir is not None:
            data = read_glue_tsv(_glue_dir_file(data_dir, task, split), task)
        else:
            from_hub.append(split)
            continue
        loaded[split] = datasets.Dataset.from_dict(data, features=features)
    if from_hub:
        if hub_is_offline():
            raise PapaError(f"no local data for the {'/'.join(from_hub)} split(s) of {task.name} and the hub is "
                            f"offline (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE); {DATA_FLAGS_HINT}")
        loaded.update(_load_glue_from_hub(task, from_hub, cache_dir))
    return datasets.DatasetDict({s: loaded[s] for s in splits})
