"""Token-task data (NER, POS, chunk, or your own tags), offline first: CoNLL-2003 text files, JSON lines of
word and tag lists, the hub (`--dataset_name`, else eriktks/conll2003) only as a fallback.

A CoNLL file has one `TOKEN POS CHUNK NER` line per token and a blank line between sentences; the
task's `conll_column` (papa.data.tasks) picks the tag. A JSON file (or hub dataset) has a column of word
lists and one of tag lists, found as HF's run_ner finds them (--text_column_name, else `tokens`, else
the first column; --label_column_name, else `<task>_tags`, else the second). Sentences become
"tokens" and "tags": ids into the task's labels, which are the canonical CoNLL-2003 tag lists for
ner/pos/chunk (so a tag that a training slice lacks still has an id) and the sorted training tags for a
custom task (papa.data.custom). Bad files raise `PapaError` naming the file and line.
"""

from pathlib import Path

import datasets

from .glue import hub_dataset, hub_split, read_table
from ..errors import PapaError
from .tasks import get_task

TOKEN_FLAGS_HINT = ("pass --data_dir (a folder with CoNLL-2003 train.txt and valid.txt) "
                    "or --train_file/--validation_file")
SPLIT_STEMS = {"train": ("train",), "validation": ("valid", "validation", "dev"), "test": ("test",)}


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


def _conll_dir_file(data_dir, split) -> Path:
    """The CoNLL file of `split` in --data_dir (`train`, `valid`/`validation`/`dev`, `test`; .txt or .conll)."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise PapaError(f"--data_dir {data_dir} is not a folder")
    candidates = [data_dir / f"{stem}{ext}" for stem in SPLIT_STEMS[split] for ext in (".txt", ".conll")]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        names = "{" + ",".join(SPLIT_STEMS[split]) + "}" if len(SPLIT_STEMS[split]) > 1 else split
        raise PapaError(f"--data_dir {data_dir} has no {names}.{{txt,conll}} for the {split} split "
                        f"(or pass --{'train' if split == 'train' else split}_file)")
    return path


def token_column_names(table, task_name, where, text_column=None, label_column=None) -> tuple[str, str]:
    """(words column, tags column) of a table, as run_ner finds them: the flags, else `tokens` / `<task>_tags`,
    else the first / second column."""
    names = table.column_names
    text = text_column or ("tokens" if "tokens" in names else names[0])
    label = label_column or (f"{task_name}_tags" if f"{task_name}_tags" in names else names[min(1, len(names) - 1)])
    missing = [c for c in (text, label) if c not in names]
    if missing or text == label:
        raise PapaError(f"{where}: no column(s) {', '.join(missing or [label])} of words and tags (found: "
                        f"{', '.join(names)}); name them with --text_column_name and --label_column_name")
    return text, label


def token_columns(table, task, where, text_column=None, label_column=None) -> tuple[list, list]:
    """(words, tag names) per sentence from a table of word and tag lists (columns: `token_column_names`)."""
    text, label = token_column_names(table, task.name, where, text_column, label_column)
    inner = getattr(table.features[label], "feature", None)
    tags = table[label]
    if isinstance(inner, datasets.ClassLabel):  # hub ids: by name, so any source order maps to the task's
        tags = [[inner.int2str(t) for t in row] for row in tags]
    elif not task.custom:  # ids in a file: the canonical CoNLL-2003 ones, as the hub's export writes them
        tags = [[task.labels[t] if isinstance(t, int) and 0 <= t < len(task.labels) else t for t in row]
                for row in tags]
    return list(table[text]), [[str(t) for t in row] for row in tags]


def _read_token_file(path, flag, task, cache_dir, columns) -> tuple[list, list]:
    path = Path(path)
    if not path.is_file():
        raise PapaError(f"{flag} {path} does not exist")
    suffix = path.suffix.lower()
    if suffix in (".txt", ".conll"):
        if task.conll_column is None:
            raise PapaError(f"{flag} {path}: CoNLL text is read for ner, pos and chunk; for your own tag set use "
                            'JSON lines, one {"tokens": [...], "tags": [...]} per sentence')
        return read_conll(path, task.conll_column)
    if suffix in (".json", ".jsonl"):
        return token_columns(read_table(path, flag, cache_dir), task, str(path), *columns)
    raise PapaError(f"{flag} {path}: unsupported file type {suffix!r}; use CoNLL text (.txt or .conll) or JSON "
                    f"lines of word and tag lists (.json or .jsonl)")


def load_token_task(task, data_dir=None, train_file=None, validation_file=None, cache_dir=None,
                    splits=("train", "validation"), test_file=None, dataset_name=None, dataset_config_name=None,
                    text_column_name=None, label_column_name=None) -> tuple[datasets.DatasetDict, list[str]]:
    """The requested splits of a token task (a TaskSpec or a name): "tokens", "tags" as ids into the task's
    labels, and that label list.

    Sources, per split: --train_file/--validation_file/--test_file; the files in --data_dir; the hub
    (--dataset_name, else the task's own), only when online. A tag outside the labels is an error
    naming the tag and the file.
    """
    task = get_task(task, "token")
    splits = list(dict.fromkeys(splits))
    for split in splits:
        if split not in SPLIT_STEMS:
            raise PapaError(f"unknown split {split!r} for {task.name}; valid: {', '.join(SPLIT_STEMS)}")
    columns = (text_column_name, label_column_name)
    flag_files = {"train": train_file, "validation": validation_file, "test": test_file}
    read, sources, from_hub = {}, {}, []
    for split in splits:
        if flag_files[split] is not None:
            path, flag = flag_files[split], f"--{split}_file"
        elif data_dir is not None:
            path, flag = _conll_dir_file(data_dir, split), "--data_dir"
        else:
            from_hub.append(split)
            continue
        read[split], sources[split] = _read_token_file(path, flag, task, cache_dir, columns), str(path)
    if from_hub:
        hub = hub_dataset(task, dataset_name, dataset_config_name, cache_dir, from_hub, TOKEN_FLAGS_HINT)
        for split in from_hub:
            sources[split] = f"{dataset_name or task.hub[0]} {split}"
            read[split] = token_columns(hub_split(hub, split, sources[split]), task, sources[split], *columns)

    label_list = list(task.labels)
    label_to_id = {label: i for i, label in enumerate(label_list)}
    features = datasets.Features({"tokens": datasets.List(datasets.Value("string")),
                                  "tags": datasets.List(datasets.ClassLabel(names=label_list))})
    result = {}
    for split in splits:
        tokens, tags = read[split]
        unknown = sorted({t for sentence_tags in tags for t in sentence_tags} - set(label_to_id))
        if unknown and task.custom:
            raise PapaError(f"{sources[split]}: tag(s) {', '.join(unknown)} do not occur in the training "
                            f"data; the model has no label for them")
        if unknown:
            raise PapaError(f"{sources[split]}: {', '.join(unknown)} {'is not a' if len(unknown) == 1 else 'are not'} "
                            f"CoNLL-2003 {task.name} tag(s) (valid: {' '.join(label_list)}); for another tag set, "
                            f"name your own task (--task_name my_tags) and pass JSON files")
        ids = [[label_to_id[t] for t in sentence_tags] for sentence_tags in tags]
        result[split] = datasets.Dataset.from_dict({"tokens": tokens, "tags": ids}, features=features)
    return datasets.DatasetDict(result), label_list
