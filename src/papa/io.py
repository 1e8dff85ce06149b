"""Atomic artifact writes: a temp file in the same folder, then `os.replace`.

A run killed mid-write leaves either the previous file or none, never a truncated `avgs.pt` or
`sorted_heads.json` that looks valid. (And `load_json_object`, the one way JSON files are read back.)
"""

import json
import os
import tempfile
from contextlib import contextmanager

import numpy as np
import torch


_UMASK = os.umask(0)
os.umask(_UMASK)


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
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600 files; give the usual permissions
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def save_tensor(tensor, path):
    # through a file object: torch.save names the archive's inner folder after a path's file name, and the
    # temp name is random, so the same tensor would give different bytes (and change the sweep's fingerprints)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            torch.save(tensor, f)


def load_json_object(path, fix):
    """The JSON object (a dict) in `path`; anything else is a PapaError ending with `fix`, what to do about it."""
    from .errors import PapaError

    try:
        with open(path) as f:
            value = json.load(f)
    except (OSError, ValueError) as err:
        raise PapaError(f"cannot read {path} ({err}); {fix}") from None
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
