"""Atomic artifact writes, and the one way JSON files are read back.

A file (`atomic_path`, the save_* helpers): written to a temp file in the same folder, then
`os.replace`d over the target, so a run killed mid-write leaves either the previous file or none,
never a truncated `avgs.pt` or `sorted_heads.json` that looks valid. Whatever lands follows the user's umask
(`follow_umask`: files 0666 & ~umask, folders 0777 & ~umask), as HF's own writes do, not tempfile's 0600 / 0700.

Files that a library writes into a folder (a model's config.json and model.safetensors, a
tokenizer's files: `atomic_files`): written into a temp folder `<folder>/.tmp-*`, then moved into
`folder` one by one with `os.replace`, the weights last. Each file is atomic; the set is not: a run
killed during the moves (microseconds, after everything was written) can leave new small files
beside the previous weights. The folder itself cannot be swapped, as other files (results, logs,
checkpoints) live in it. HF Trainer's checkpoint-<step> folders are written by the Trainer as it
writes them.

`load_json` / `load_json_object`: JSON read back, anything unreadable one PapaError saying what to do.
"""

import json
import os
import shutil
import tempfile
from contextlib import contextmanager

import numpy as np
import torch


def current_umask():
    """The process's umask, read without changing it (Linux: /proc/self/status); elsewhere set and restored."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # no way to read it but to set it: put it back at once
    os.umask(mask)
    return mask


def follow_umask(path):
    """Give `path` (a file, or a folder and all under it) the modes a plain open() / os.makedirs would: files
    0666 & ~umask, folders 0777 & ~umask. tempfile makes 0600 files and 0700 folders, and some libraries
    (safetensors) write 0600: on a shared machine a group must be able to read a lab's models and caches, as
    HF's own files (written with the user's umask)."""
    umask = current_umask()
    path = os.fspath(path)
    if not os.path.isdir(path):
        os.chmod(path, 0o666 & ~umask)
        return
    for folder, _, files in os.walk(path):
        os.chmod(folder, 0o777 & ~umask)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o666 & ~umask)


def missing_folders(path):
    """The folders on the way to `path` (itself included) that do not exist yet, outermost first."""
    missing, path = [], os.path.abspath(os.fspath(path))
    while not os.path.exists(path) and os.path.dirname(path) != path:
        missing.insert(0, path)
        path = os.path.dirname(path)
    return missing


@contextmanager
def removed_on_failure(path, keep=lambda folder: False):
    """Run a block that makes folder `path`; if it raises, remove the outermost folder on the way that the block
    made, unless keep(that folder) (it holds work worth resuming): a failed command leaves no folder it created.
    Yields a list that holds the removed folder once it is removed."""
    created, removed = missing_folders(path), []
    try:
        yield removed
    except Exception:
        if created and os.path.isdir(created[0]) and not keep(created[0]):
            shutil.rmtree(created[0], ignore_errors=True)
            removed.append(created[0])
        raise


@contextmanager
def atomic_path(path):
    """Yield a temp path beside `path`; on success rename it over `path`, on failure delete it."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        follow_umask(tmp)  # mkstemp makes 0600 files; give the usual permissions
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")  # moved last by atomic_files


@contextmanager
def atomic_files(folder):
    """Yield a temp folder inside `folder`; on success move each file written there into `folder`
    (`os.replace`, weights last), on failure delete them all (see the module docstring)."""
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=folder)
    try:
        yield tmp
        names = sorted(os.listdir(tmp), key=lambda name: (name.endswith(WEIGHT_SUFFIXES), name))
        for name in names:
            if os.path.isfile(os.path.join(tmp, name)):
                with open(os.path.join(tmp, name), "rb+") as f:
                    os.fsync(f.fileno())
            follow_umask(os.path.join(tmp, name))  # what a library wrote 0600 (safetensors) gets the usual modes
        for name in names:
            os.replace(os.path.join(tmp, name), os.path.join(folder, name))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def save_tensor(tensor, path):
    # through a file object: torch.save names the archive's inner folder after a path's file name, and the
    # temp name is random, so the same tensor would give different bytes (and change the sweep's fingerprints)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            torch.save(tensor, f)


def load_json(path, fix):
    """The JSON value in `path`; a missing or unreadable file, or invalid JSON, is a PapaError ending with
    `fix`, what to do about it."""
    from .errors import PapaError

    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as err:
        raise PapaError(f"cannot read {path} ({err}); {fix}") from None


def load_json_object(path, fix):
    """The JSON object (a dict) in `path`; anything else is a PapaError ending with `fix`."""
    from .errors import PapaError

    value = load_json(path, fix)
    if not isinstance(value, dict):
        raise PapaError(f"{path} is not a JSON object ({{\"name\": value, ...}}); {fix}")
    return value


def save_json(obj, path, indent=None, sort_keys=False):
    with atomic_path(path) as tmp:
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=indent, sort_keys=sort_keys)
            f.write("\n")


def save_npy(array, path):
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, array)


def save_text(text, path):
    with atomic_path(path) as tmp:
        with open(tmp, "w") as f:
            f.write(text)
