"""What papa writes follows the user's umask, as HF's own files do (files 0666 & ~umask, folders 0777 & ~umask),
not tempfile's owner-only 0600 / 0700: on a shared machine a group reads a lab's models and caches."""

import os
import stat

import numpy as np
import pytest
import torch
from datasets import Dataset
from tiny_encoders import save_tiny_pretrained

import papa
from papa.data import tokenized_cache
from papa.io import atomic_files, save_json, save_npy, save_tensor, save_text
from papa.models import gguf


@pytest.fixture(params=[0o022, 0o027, 0o077])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def modes(root):
    """{path under root: its permission bits}, root's own included (as ".")."""
    found = {".": stat.S_IMODE(os.stat(root).st_mode)}
    for folder, folders, files in os.walk(root):
        for name in folders + files:
            path = os.path.join(folder, name)
            found[os.path.relpath(path, root)] = stat.S_IMODE(os.stat(path).st_mode)
    return found


def assert_follow(root, umask):
    for path, mode in modes(root).items():
        want = (0o777 if os.path.isdir(os.path.join(root, path)) else 0o666) & ~umask
        assert mode == want, f"{path}: {oct(mode)}, not {oct(want)} (umask {oct(umask)})"


def owner_only_file(path):
    """A file written as safetensors and tempfile write theirs: 0600 whatever the umask."""
    with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write("x")


def test_the_io_helpers(tmp_path, umask):
    root = tmp_path / "out"
    save_json({"a": 1}, root / "sub" / "a.json")
    save_tensor(torch.zeros(2), root / "avgs.pt")
    save_npy(np.zeros(2), root / "l.npy")
    save_text("t", root / "t.md")
    with atomic_files(root / "model") as tmp:
        owner_only_file(os.path.join(tmp, "model.safetensors"))
        os.makedirs(os.path.join(tmp, "nested"))
        owner_only_file(os.path.join(tmp, "nested", "f.txt"))
    assert sorted(os.listdir(root / "model")) == ["model.safetensors", "nested"]
    assert_follow(root, umask)


def test_a_saved_papa_model(tmp_path, umask):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    save_tiny_pretrained("bert", tmp_path / "tiny")
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "tiny", num_labels=2)
    papa.save_papa_model(model, tmp_path / "saved", AutoTokenizer.from_pretrained(tmp_path / "tiny"))
    assert "model.safetensors" in os.listdir(tmp_path / "saved")
    assert_follow(tmp_path / "saved", umask)


def test_the_converted_gguf_cache(tmp_path, umask, monkeypatch):
    monkeypatch.setenv("PAPA_CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "m.gguf"
    source.write_bytes(gguf.GGUF_MAGIC + b"\0" * 60)
    monkeypatch.setattr(gguf, "convert_gguf", lambda src, out: owner_only_file(os.path.join(out, "model.safetensors")))
    folder = gguf.gguf_folder(source)
    assert sorted(os.listdir(folder)) == ["gguf_source.json", "model.safetensors"]
    assert_follow(tmp_path / "cache", umask)


def test_the_tokenized_cache(tmp_path, umask):
    tokenized_cache._save(Dataset.from_dict({"x": [1, 2]}), str(tmp_path / "cache" / "entry"))
    assert_follow(tmp_path / "cache", umask)
