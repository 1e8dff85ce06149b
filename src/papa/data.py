"""Task data, offline first: local GLUE TSVs / CSV / JSON and CoNLL text, the hub only as a fallback.

Every source ends up with the column names of the HF `glue` dataset (and "tokens"/"tags" for the
CoNLL tasks), so the scripts never care where the data came from. Bad files raise `PapaError`
naming the file and line, because a silently skipped row would quietly change the probing results.
"""

import csv
import os
from pathlib import Path

import datasets

from papa.errors import PapaError

TASK_TO_KEYS = {
    "cola": ("sentence", None),
    "mnli": ("premise", "hypothesis"),
    "mrpc": ("sentence1", "sentence2"),
    "qnli": ("question", "sentence"),
    "qqp": ("question1", "question2"),
    "rte": ("sentence1", "sentence2"),
    "sst2": ("sentence", None),
    "stsb": ("sentence1", "sentence2"),
    "wnli": ("sentence1", "sentence2"),
    "repeat": ("sentence", None),
}
SEQUENCE_TASKS = tuple(TASK_TO_KEYS)
TOKEN_TASKS = ("ner", "pos", "chunk")
TOKEN_TASK_COLUMNS = {"pos": 1, "chunk": 2, "ner": 3}  # column of a CoNLL line `TOKEN POS CHUNK NER`

# HF glue label order: label id = index in this list. stsb is a regression task.
GLUE_LABEL_NAMES = {
    "cola": ["unacceptable", "acceptable"],
    "sst2": ["negative", "positive"],
    "mrpc": ["not_equivalent", "equivalent"],
    "qqp": ["not_duplicate", "duplicate"],
    "mnli": ["entailment", "neutral", "contradiction"],
    "qnli": ["entailment", "not_entailment"],
    "rte": ["entailment", "not_entailment"],
    "wnli": ["not_entailment", "entailment"],
    "stsb": None,
    "repeat": ["new", "repeated"],  # = papa.synthetic.REPEAT_LABELS
}
# Tasks whose official TSV stores the label as its id ("0"/"1") rather than its name.
NUMERIC_FILE_LABELS = {"cola", "sst2", "mrpc", "qqp", "wnli"}

# Official GLUE TSV header name -> canonical column, per task (CoLA has no header: by position).
TSV_HEADER_COLUMNS = {
    "sst2": {"sentence": "sentence", "label": "label"},
    "mrpc": {"#1 String": "sentence1", "#2 String": "sentence2", "Quality": "label"},
    "qqp": {"question1": "question1", "question2": "question2", "is_duplicate": "label"},
    "stsb": {"sentence1": "sentence1", "sentence2": "sentence2", "score": "label"},
    "mnli": {"sentence1": "premise", "sentence2": "hypothesis", "gold_label": "label"},
    "qnli": {"question": "question", "sentence": "sentence", "label": "label"},
    "rte": {"sentence1": "sentence1", "sentence2": "sentence2", "label": "label"},
    "wnli": {"sentence1": "sentence1", "sentence2": "sentence2", "label": "label"},
    "repeat": {"sentence": "sentence", "label": "label"},
}
COLA_COLUMNS = {"sentence": 3, "label": 1}  # source, label, original_label, sentence
GLUE_FOLDER_NAMES = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "qqp": "QQP", "stsb": "STS-B",
                     "mnli": "MNLI", "qnli": "QNLI", "rte": "RTE", "wnli": "WNLI"}

DATA_FLAGS_HINT = ("pass --data_dir (a folder with the official GLUE TSVs: train.tsv, dev.tsv) "
                   "or --train_file/--validation_file")
TOKEN_FLAGS_HINT = ("pass --data_dir (a folder with CoNLL-2003 train.txt and valid.txt) "
                    "or --train_file/--validation_file")


def canonical_task_name(name: str, valid: tuple[str, ...]) -> str:
    """'SST-2', 'sts_b', 'CoLA' -> 'sst2', 'stsb', 'cola'; an unknown name lists the valid ones."""
    def squash(s):
        return s.lower().replace("-", "").replace("_", "")
    by_squashed = {squash(v): v for v in valid}
    if squash(str(name)) not in by_squashed:
        raise PapaError(f"unknown task {name!r}; valid tasks: {', '.join(valid)}")
    return by_squashed[squash(str(name))]


def glue_label_names(task) -> list[str] | None:
    """Label names in HF glue order (label id = index); None for the regression task stsb."""
    names = GLUE_LABEL_NAMES[canonical_task_name(task, SEQUENCE_TASKS)]
    return None if names is None else list(names)


def hub_is_offline() -> bool:
    """True when HF_HUB_OFFLINE or HF_DATASETS_OFFLINE is set to a true value (read at call time)."""
    return any(os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on")
               for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


# ----------------------------------------------------------------------------- GLUE files

def _label_to_id(value, task, where):
    """A label as found in a file (name, id, or score) -> int id (float for stsb), or PapaError."""
    names = GLUE_LABEL_NAMES[task]
    if names is None:  # stsb: a similarity score
        try:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        except (TypeError, ValueError):
            raise PapaError(f"{where}: label {value!r} is not a number (stsb labels are similarity scores)")
    if isinstance(value, str):
        if value in names:
            return names.index(value)
        ids_as_text = [str(i) for i in range(len(names))]
        if value in ids_as_text:
            return int(value)
        raise PapaError(f"{where}: label {value!r} is not a {task} label; valid: "
                        f"{', '.join(names + ids_as_text)}")
    if isinstance(value, float) and value.is_integer():  # e.g. pandas reads ids as floats beside a gap
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
        return value
    raise PapaError(f"{where}: label {value!r} is not a {task} label; valid: ids 0..{len(names) - 1} "
                    f"or names {', '.join(names)}")


def _tsv_label_values(task) -> dict[str, int]:
    """The label strings an official TSV of `task` may hold -> label id."""
    names = GLUE_LABEL_NAMES[task]
    if task in NUMERIC_FILE_LABELS:
        return {str(i): i for i in range(len(names))}
    values = {name: i for i, name in enumerate(names)}
    if task == "repeat":  # no official file: accept ids too
        values.update({str(i): i for i in range(len(names))})
    return values


def read_glue_tsv(path, task) -> dict[str, list]:
    """Read an official GLUE TSV into {canonical columns..., "label"}; label is an id (float for stsb).

    Quote characters are data, not quoting (GLUE files are unquoted), and a BOM is dropped. Columns
    are found by header name, so MNLI train (12 columns) and dev (16 columns) both work.
    """
    task = canonical_task_name(task, SEQUENCE_TASKS)
    path = Path(path)
    if not path.is_file():
        raise PapaError(f"GLUE file {path} does not exist")
    text_columns = [c for c in TASK_TO_KEYS[task] if c is not None]
    label_values = None if task == "stsb" else _tsv_label_values(task)
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        if task == "cola":  # no header: fixed positions
            num_fields, where_is = 4, COLA_COLUMNS
        else:
            header = next(rows, None)
            if header is None:
                raise PapaError(f"GLUE file {path} is empty")
            wanted = TSV_HEADER_COLUMNS[task]
            missing = [name for name in wanted if name not in header]
            if missing:
                raise PapaError(f"{path}:1: header lacks column(s) {', '.join(missing)} of the official "
                                f"{task} TSV (found: {', '.join(header)})")
            num_fields = len(header)
            where_is = {canonical: header.index(name) for name, canonical in wanted.items()}
        data = {c: [] for c in text_columns + ["label"]}
        for fields in rows:
            if not fields:  # blank line (e.g. a trailing one)
                continue
            where = f"{path}:{rows.line_num}"
            if len(fields) != num_fields:
                raise PapaError(f"{where}: expected {num_fields} tab-separated fields, found {len(fields)}")
            for c in text_columns:
                data[c].append(fields[where_is[c]])
            raw = fields[where_is["label"]]
            if label_values is None:
                data["label"].append(_label_to_id(raw, task, where))
            elif raw in label_values:
                data["label"].append(label_values[raw])
            else:
                raise PapaError(f"{where}: label {raw!r} is not a {task} label; valid: "
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
    needed = [c for c in TASK_TO_KEYS[task] if c is not None] + ["label"]
    missing = [c for c in needed if c not in table.column_names]
    if missing:
        raise PapaError(f"{path} lacks column(s) {', '.join(missing)} needed for {task} "
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
    names = GLUE_LABEL_NAMES[task]
    features = {c: datasets.Value("string") for c in TASK_TO_KEYS[task] if c is not None}
    features["label"] = datasets.Value("float32") if names is None else datasets.ClassLabel(names=names)
    return datasets.Features(features)


def _glue_dir_file(data_dir, task, split) -> Path:
    """The official file of `split` in a GLUE task folder; a missing folder/file names --data_dir."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise PapaError(f"--data_dir {data_dir} is not a folder")
    names = {"train": "train.tsv", "validation": "dev.tsv"}
    if task == "mnli":
        names.update(validation="dev_matched.tsv", validation_mismatched="dev_mismatched.tsv")
    path = data_dir / names[split]
    if not path.is_file():
        hint = ""
        folder = GLUE_FOLDER_NAMES.get(task)
        if folder and (data_dir / folder).is_dir():
            hint = f" (did you mean --data_dir {data_dir / folder}?)"
        elif split == "validation":
            hint = " (or pass --validation_file)"
        raise PapaError(f"--data_dir {data_dir} has no {names[split]} for the {split} split of {task}{hint}")
    return path


def _load_glue_from_hub(task, splits, cache_dir) -> datasets.DatasetDict:
    try:
        hub = datasets.load_dataset("nyu-mll/glue", task, cache_dir=cache_dir)
    except Exception as err:  # network down, hub changed: one clear line instead of a traceback
        raise PapaError(f"could not load glue/{task} from the Hugging Face hub ({type(err).__name__}: {err}); "
                        f"{DATA_FLAGS_HINT}") from err
    if "validation_matched" in hub:
        hub["validation"] = hub.pop("validation_matched")
    columns = [c for c in TASK_TO_KEYS[task] if c is not None] + ["label"]
    return datasets.DatasetDict({s: hub[s].select_columns(columns).cast(_sequence_features(task))
                                 for s in splits})


def load_sequence_task(task, data_dir=None, train_file=None, validation_file=None, cache_dir=None,
                       splits=("train", "validation")) -> datasets.DatasetDict:
    """The requested splits of a sequence task, columns = TASK_TO_KEYS[task] + "label".

    Sources, per split: the synthetic generator for "repeat"; --train_file/--validation_file;
    the official files in --data_dir; the hub, only when online. For mnli, requesting "validation"
    (without --validation_file) also yields "validation_mismatched". Only requested splits are read,
    so a folder with just train.tsv is enough for the averaging scripts.
    """
    task = canonical_task_name(task, SEQUENCE_TASKS)
    valid_splits = ("train", "validation") + (("validation_mismatched",) if task == "mnli" else ())
    splits = list(dict.fromkeys(splits))
    for split in splits:
        if split not in valid_splits:
            raise PapaError(f"unknown split {split!r} for {task}; valid: {', '.join(valid_splits)}")
    # run_glue evaluates mnli on both dev sets; a --validation_file, though, is just one file
    if task == "mnli" and "validation" in splits and validation_file is None and "validation_mismatched" not in splits:
        splits.append("validation_mismatched")
    features = _sequence_features(task)

    if task == "repeat":
        from papa.synthetic import make_repeat_dataset  # lazy: only this task needs it
        generated = make_repeat_dataset()
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
            raise PapaError(f"no local data for the {'/'.join(from_hub)} split(s) of {task} and the hub is "
                            f"offline (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE); {DATA_FLAGS_HINT}")
        loaded.update(_load_glue_from_hub(task, from_hub, cache_dir))
    return datasets.DatasetDict({s: loaded[s] for s in splits})


# ----------------------------------------------------------------------------- CoNLL files

def read_conll(path, column) -> tuple[list[list[str]], list[list[str]]]:
    """(tokens, tags) per sentence from CoNLL-2003 text: `TOKEN POS CHUNK NER`, blank line between
    sentences, -DOCSTART- lines skipped; `column` picks the tag (1 POS, 2 chunk, 3 NER)."""
    path = Path(path)
    if column not in (1, 2, 3):
        raise PapaError(f"CoNLL tag column must be 1 (pos), 2 (chunk) or 3 (ner), got {column!r}")
    if not path.is_file():
        raise PapaError(f"CoNLL file {path} does not exist")
    sentences, tags = [], []
    words, labels = [], []
    with open(path, encoding="utf-8-sig") as f:
        for line_number, line in enumerate(f, start=1):
            fields = line.strip().split(" ") if line.strip() else []
            if not fields or fields[0] == "-DOCSTART-":  # sentence or document boundary
                if words:
                    sentences.append(words)
                    tags.append(labels)
                words, labels = [], []
                continue
            if len(fields) != 4:
                raise PapaError(f"{path}:{line_number}: expected 4 space-separated fields "
                                f"(TOKEN POS CHUNK NER), found {len(fields)}")
            words.append(fields[0])
            labels.append(fields[column])
    if words:  # last sentence without a final blank line
        sentences.append(words)
        tags.append(labels)
    if not sentences:
        raise PapaError(f"CoNLL file {path} has no sentences")
    return sentences, tags


def _conll_dir_file(data_dir, split) -> Path | None:
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise PapaError(f"--data_dir {data_dir} is not a folder")
    stems = ["train"] if split == "train" else ["valid", "validation", "dev"]
    candidates = [data_dir / f"{stem}{ext}" for stem in stems for ext in (".txt", ".conll")]
    return next((p for p in candidates if p.is_file()), None)


def _token_split_file(split, data_dir, train_file, validation_file, required) -> Path | None:
    """The CoNLL file of `split` (None when there is none and it is not required)."""
    file, flag = {"train": (train_file, "--train_file"), "validation": (validation_file, "--validation_file")}[split]
    if file is not None:
        path = Path(file)
        if not path.is_file():
            raise PapaError(f"{flag} {path} does not exist")
        if path.suffix.lower() not in (".txt", ".conll"):
            raise PapaError(f"{flag} {path}: unsupported file type {path.suffix!r}; use CoNLL text "
                            f"(.txt or .conll)")
        return path
    if data_dir is None:
        return None
    path = _conll_dir_file(data_dir, split)
    if path is None and required:
        names = "train.txt/train.conll" if split == "train" else "{valid,validation,dev}.{txt,conll}"
        raise PapaError(f"--data_dir {data_dir} has no {names} for the {split} split "
                        f"(or pass {flag})")
    return path


def _load_conll_from_hub(task, cache_dir) -> dict[str, tuple[list, list]]:
    """{split: (tokens, tag strings)} of the hub copy, whose ClassLabel ids follow its own order."""
    try:
        hub = datasets.load_dataset("eriktks/conll2003", cache_dir=cache_dir)
    except Exception as err:  # network down, hub changed: one clear line instead of a traceback
        raise PapaError(f"could not load eriktks/conll2003 from the Hugging Face hub "
                        f"({type(err).__name__}: {err}); {TOKEN_FLAGS_HINT}") from err
    column = f"{task}_tags"
    names = hub["train"].features[column].feature.names
    return {s: (list(hub[s]["tokens"]), [[names[i] for i in row] for row in hub[s][column]]) for s in hub}


def load_token_task(task, data_dir=None, train_file=None, validation_file=None, cache_dir=None,
                    splits=("train", "validation")) -> tuple[datasets.DatasetDict, list[str]]:
    """The requested splits of a CoNLL-2003 task ("tokens", "tags" as ids) and the sorted label list.

    The label list is the sorted set of training tags (sorted so ids are the same on every run); the
    training file is read for it even when "train" is not requested, if it is available.
    """
    task = canonical_task_name(task, TOKEN_TASKS)
    splits = list(dict.fromkeys(splits))
    for split in splits:
        if split not in ("train", "validation"):
            raise PapaError(f"unknown split {split!r} for {task}; valid: train, validation")
    column = TOKEN_TASK_COLUMNS[task]

    local = {s: _token_split_file(s, data_dir, train_file, validation_file, required=True) for s in splits}
    read = {s: read_conll(p, column) for s, p in local.items() if p is not None}
    sources = {s: str(p) for s, p in local.items() if p is not None}
    if "train" not in read:  # the label list comes from the training data when there is any
        train_path = _token_split_file("train", data_dir, train_file, None, required=False)
        if train_path is not None:
            read["train"], sources["train"] = read_conll(train_path, column), str(train_path)
    missing = [s for s, p in local.items() if p is None]
    if missing:
        if hub_is_offline():
            raise PapaError(f"no local data for the {'/'.join(missing)} split(s) of {task} and the hub is "
                            f"offline (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE); {TOKEN_FLAGS_HINT}")
        hub = _load_conll_from_hub(task, cache_dir)
        for split in missing + ([] if "train" in read else ["train"]):
            read[split], sources[split] = hub[split], f"eriktks/conll2003 {split}"

    label_source = ["train"] if "train" in read else splits
    label_list = sorted({t for s in label_source for sentence_tags in read[s][1] for t in sentence_tags})
    label_to_id = {label: i for i, label in enumerate(label_list)}
    features = datasets.Features({"tokens": datasets.List(datasets.Value("string")),
                                  "tags": datasets.List(datasets.ClassLabel(names=label_list))})
    result = {}
    for split in splits:
        tokens, tags = read[split]
        unknown = sorted({t for sentence_tags in tags for t in sentence_tags} - set(label_to_id))
        if unknown:
            raise PapaError(f"{sources[split]}: tag(s) {', '.join(unknown)} do not occur in the training "
                            f"data {sources.get('train', '')}; the model has no label for them")
        ids = [[label_to_id[t] for t in sentence_tags] for sentence_tags in tags]
        result[split] = datasets.Dataset.from_dict({"tokens": tokens, "tags": ids}, features=features)
    return datasets.DatasetDict(result), label_list
