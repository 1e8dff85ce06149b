"""Where a task's files are under a --data_dir: the task's own folder, or a root holding it.

The official folder names are GLUE's (CoLA, SST-2, MRPC, QQP, STS-B, MNLI, QNLI, RTE, WNLI; the lm tasks
read off GLUE text use their task's) and conll2003 for ner, pos and chunk, found directly under the root or one
level down: `../shared/data` holds `glue/CoLA` and `conll2003`. The grid (papa.sweep.grid) and the single
scripts (papa.runs.run) both resolve --data_dir here, so each accepts the root as well as the task's folder.
"""

import os
from pathlib import Path

from ..errors import PapaError

TOKEN_TASKS_FOLDER = "conll2003"


def task_folder_name(task):
    """The task's official folder name (CoLA, SST-2, ..., conll2003); None for built-in tasks."""
    if task.generator is not None:
        return None
    return task.glue_folder or (TOKEN_TASKS_FOLDER if task.kind == "token" else None)


def holds_task_files(folder, task):
    """True when `folder` holds the task's training file itself (train.tsv; CoNLL train.txt/.conll; for an lm task
    read off a GLUE folder, its dev.tsv will do: papa.data.lm)."""
    names = (("train.txt", "train.conll") if task.kind == "token"
             else ("train.tsv", "dev.tsv") if task.kind == "lm" else ("train.tsv",))
    return any((Path(folder) / name).is_file() for name in names)


def _child(folder, name):
    """`folder`/`name`, matching the name case-insensitively; None when absent."""
    try:
        entries = sorted(os.listdir(folder))
    except OSError:
        return None
    match = name if name in entries else next((e for e in entries if e.lower() == name.lower()), None)
    return os.path.join(folder, match) if match and os.path.isdir(os.path.join(folder, match)) else None


def resolve_data_dir(root, task, several_tasks):
    """The folder of `task`'s files under --data_dir `root`.

    The built-in tasks need none (None), nor does plain lm (it reads --train_file/--validation_file). With one task,
    `root` itself when it holds the task's files (as before the grid); otherwise, or with several tasks, the task's official folder
    directly under `root`, else one level down. One task and nothing found: `root` as given (the
    stage names what it lacks). Several tasks and nothing found, or two candidates one level down:
    a PapaError listing what was looked for.
    """
    if task.generator is not None or (task.kind == "lm" and task.glue_folder is None) or root is None:
        return None
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        raise PapaError(f"--data_dir {root} is not a folder")
    if not several_tasks and holds_task_files(root, task):
        return root
    name = task_folder_name(task)
    direct = _child(root, name)
    if direct:
        return direct
    below = [found for sub in sorted(os.listdir(root)) if os.path.isdir(os.path.join(root, sub))
             for found in [_child(os.path.join(root, sub), name)] if found]
    if len(below) == 1:
        return below[0]
    if len(below) > 1:
        raise PapaError(f"--data_dir {root}: {task.name} has several folders ({', '.join(below)}); keep one, "
                        f"or run that task alone with its folder as --data_dir")
    if not several_tasks:
        return root
    raise PapaError(f"--data_dir {root} has no folder for {task.name}: looked for {os.path.join(root, name)} and "
                    f"{os.path.join(root, '*', name)}; put the task's files there (official name {name}) or leave "
                    f"{task.name} out of --task_name")
