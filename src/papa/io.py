"""Atomic artifact writes: a temp file in the same folder, then `os.replace`.

A run killed mid-write leaves either the previous file or none, never a truncated `avgs.pt` or
`sorted_heads.json` that looks valid.
"""

import json
import os
import tempfile
from contextlib import contextmanager

import numpy as np
import torch


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
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def save_tensor(tensor, path):
    with atomic_path(path) as tmp:
        torch.save(tensor, tmp)


def save_json(obj, path, indent=None):
    with atomic_path(path) as tmp:
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=indent)
            f.write("\n")


def save_npy(array, path):
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, array)


def save_text(text, path):
    with atomic_path(path) as tmp:
        with open(tmp, "w") as f:
            f.write(text)
