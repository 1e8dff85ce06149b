"""Token-task data (NER, POS, chunk), offline first: CoNLL-2003 text files, the hub only as a fallback.

A file has one `TOKEN POS CHUNK NER` line per token and a blank line between sentences; the task's
`conll_column` (papa.tasks) picks the tag. Sentences become "tokens" and "tags" (ids into the
sorted list of training tags). Bad files raise `PapaError` naming the file and line.
"""

from pathlib import Path

import datasets

from .data import hub_is_offline, load_from_hub
from .errors import PapaError
from .tasks import get_task

TOKEN_FLAGS_HINT = ("pass --data_dir (a folder with CoNLL-2003 train.txt and valid.txt) "
                    "or --train_file/--validation_file")


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
    hub = load_from_hub(task, task.hub[0], TOKEN_FLAGS_HINT, cache_dir)
    column = f"{task.name}_tags"
    names = hub["train"].features[column].feature.names
    return {s: (list(hub[s]["tokens"]), [[names[i] for i in row] for row in hub[s][column]]) for s in hub}


def load_token_task(task, data_dir=None, train_file=None, validation_file=None, cache_dir=None,
                    splits=("train", "validation")) -> tuple[datasets.DatasetDict, list[str]]:
    """The requested splits of a CoNLL-2003 task (a TaskSpec or a name): "tokens", "tags" as ids, and the
    sorted label list.

    The label list is the sorted set of training tags (sorted so ids are the same on every run); the
    training file is read for it even when "train" is not requested, if it is available.
    """
    task = get_task(task, "token")
    splits = list(dict.fromkeys(splits))
    for split in splits:
        if split not in ("train", "validation"):
            raise PapaError(f"unknown split {split!r} for {task.name}; valid: train, validation")
    column = task.conll_column

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
            raise PapaError(f"no local data for the {'/'.join(missing)} split(s) of {task.name} and the hub is "
                            f"offline (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE); {TOKEN_FLAGS_HINT}")
        hub = _load_conll_from_hub(task, cache_dir)
        for split in missing + ([] if "train" in read else ["train"]):
            read[split], sources[split] = hub[split], f"{task.hub[0]} {split}"

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
