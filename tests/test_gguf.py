"""GGUF files as --model_name_or_path (papa.models.gguf, papa.models.bundled): bad files are one clear error and leave nothing in
the cache; a file is converted once, keyed by its content. Small GGUF files are written here with the `gguf`
package's writer; the real models' conversion is checked in tests/test_bundled_decoders.py."""

import os

import numpy as np
import pytest

from papa.models.bundled import local_model_path
from papa.errors import PapaError
from papa.models.gguf import cache_root, gguf_folder
from test_errors import expect_error  # noqa: F401 (a fixture)

gguf = pytest.importorskip("gguf")


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPA_CACHE_DIR", str(tmp_path / "cache"))


def write_gguf(path, arch, tensors=()):
    """A GGUF file of architecture `arch` with a few metadata entries and `tensors` ({name: array})."""
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(2)
    writer.add_context_length(16)
    writer.add_embedding_length(8)
    writer.add_head_count(2)
    for name, array in dict(tensors).items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def nothing_cached():
    folder = os.path.join(cache_root(), "gguf")
    return not os.path.isdir(folder) or os.listdir(folder) == []


@pytest.mark.parametrize("arch, message", [
    ("bert", r"transformers cannot read this GGUF file \(ValueError: GGUF model with architecture bert is not "
             r"supported yet\)"),
    ("mamba", r"PAPA supports the model types .* model_type='mamba'"),
])
def test_an_architecture_the_loader_or_papa_lacks_is_one_clear_error(tmp_path, arch, message):
    path = write_gguf(tmp_path / f"{arch}.gguf", arch, {"token_embd.weight": np.zeros((10, 8), np.float32)})
    with pytest.raises(PapaError, match=message):
        gguf_folder(path)
    assert nothing_cached()


def test_a_truncated_file_is_one_clear_error(tmp_path):
    whole = write_gguf(tmp_path / "whole.gguf", "llama", {"token_embd.weight": np.ones((64, 8), np.float32)})
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole.read_bytes()[:-700])  # the tensor's data cut short
    with pytest.raises(PapaError, match="cut.gguf: transformers cannot read this GGUF file"):
        gguf_folder(cut)
    assert nothing_cached()


def test_a_foreign_or_missing_file_is_one_clear_error(tmp_path):
    (tmp_path / "notes.gguf").write_text("hello")
    with pytest.raises(PapaError, match=r"notes.gguf is not a GGUF file \(it starts with b'hell'"):
        local_model_path(tmp_path / "notes.gguf")
    with pytest.raises(PapaError, match="there is no such .gguf file"):
        local_model_path(tmp_path / "nothere.gguf")


def test_the_scripts_refuse_a_bad_gguf_file_in_one_line(tmp_path, expect_error):
    (tmp_path / "notes.gguf").write_text("hello")
    expect_error("run_papa_glue.py", ["--model_name_or_path", tmp_path / "notes.gguf", "--task_name", "repeat",
                                      "--do_eval"], "is not a GGUF file")


def test_other_names_pass_through(tmp_path):
    assert local_model_path(None) is None
    assert local_model_path("bert-base-uncased") == "bert-base-uncased"
    (tmp_path / "smollm2").mkdir()  # a folder of a bundled name's name wins
    assert local_model_path(str(tmp_path / "smollm2")) == str(tmp_path / "smollm2")


def test_a_converted_folder_is_reused_not_rebuilt(tmp_path, monkeypatch):
    """A folder already in the cache (its gguf_source.json written last) is returned without converting again;
    a copy of the file elsewhere (the same content) finds the same folder."""
    path = write_gguf(tmp_path / "m.gguf", "llama")
    calls = []
    monkeypatch.setattr("papa.models.gguf.convert_gguf", lambda src, out: calls.append(src))
    first = gguf_folder(path)
    copy = tmp_path / "elsewhere" / "n.gguf"
    copy.parent.mkdir()
    copy.write_bytes(path.read_bytes())
    assert gguf_folder(copy) == first and len(calls) == 1
    assert os.path.isfile(os.path.join(first, "gguf_source.json"))
