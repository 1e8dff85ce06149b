"""GGUF checkpoints (llama.cpp's format) as ordinary HF model folders, converted once per file.

transformers reads a .gguf file (`from_pretrained(folder, gguf_file=name)`, with the `gguf` package) by
dequantising every tensor to float32, some 20-30 s for SmolLM2-135M on two cores, and a model loaded so
refuses `save_pretrained`. A sweep loads its model in every stage, so a .gguf path is converted once into
an HF folder — config.json without the quantisation entry, model.safetensors (float32, the dequantised
values exactly), the tokenizer — in a cache keyed by the file's sha256 and the transformers version (a newer
loader may dequantise otherwise), written to a temp folder and renamed into place, so a killed conversion
leaves nothing that looks finished. Every later load, in any stage or run, reads that folder.

The cache is $PAPA_CACHE_DIR, else $XDG_CACHE_HOME/papa, else ~/.cache/papa (`cache_root`); on a cluster,
point PAPA_CACHE_DIR at a shared filesystem, or convert before submitting (the sweep converts in its own
process before any stage runs).
"""

import hashlib
import json
import os
import shutil
import tempfile

from ..console import stage
from ..errors import PapaError, first_line
from ..io import follow_umask

GGUF_MAGIC = b"GGUF"
SOURCE_FILE = "gguf_source.json"  # beside the converted model: what it was made from


def cache_root():
    """PAPA's cache folder: $PAPA_CACHE_DIR, else $XDG_CACHE_HOME/papa, else ~/.cache/papa."""
    if os.environ.get("PAPA_CACHE_DIR"):
        return os.path.abspath(os.path.expanduser(os.environ["PAPA_CACHE_DIR"]))
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "papa")


def is_gguf(path):
    return isinstance(path, (str, os.PathLike)) and os.fspath(path).lower().endswith(".gguf")


def file_sha256(path, chunk=1 << 20):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def check_gguf_file(path):
    """A clear PapaError unless `path` is a file that starts as a GGUF file does."""
    if not os.path.isfile(path):
        raise PapaError(f"{path}: there is no such .gguf file; pass a GGUF model file, a model folder or a hub name")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise PapaError(f"{path} is not a GGUF file (it starts with {magic!r}, not {GGUF_MAGIC!r}); pass a model "
                        f"saved by llama.cpp's convert scripts, or an HF model folder")


def gguf_folder(path):
    """The HF folder converted from GGUF file `path` (converting it on first use); see the module docstring."""
    import transformers

    path = os.path.abspath(os.path.expanduser(os.fspath(path)))
    check_gguf_file(path)
    digest = file_sha256(path)
    key = f"{digest[:24]}-transformers{transformers.__version__}"
    folder = os.path.join(cache_root(), "gguf", key)
    if os.path.isfile(os.path.join(folder, SOURCE_FILE)):
        return folder
    stage(f"converting {os.path.basename(path)} to an HF model folder, once (dequantising to float32): {folder}")
    os.makedirs(os.path.dirname(folder), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=os.path.dirname(folder))
    try:
        convert_gguf(path, tmp)
        with open(os.path.join(tmp, SOURCE_FILE), "w") as f:
            json.dump({"gguf_file": path, "sha256": digest, "transformers": transformers.__version__}, f,
                      indent=2)
        follow_umask(tmp)  # mkdtemp makes 0700: the user's usual modes, so a group may share the cache
        try:
            os.rename(tmp, folder)
        except OSError:  # another process converted the same file meanwhile: keep its folder
            if not os.path.isfile(os.path.join(folder, SOURCE_FILE)):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def convert_gguf(path, out):
    """Dequantise GGUF file `path` into an HF folder `out`: config, float32 safetensors, tokenizer."""
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer

    from ..families import family_for

    where, name = os.path.split(path)
    try:
        config = AutoConfig.from_pretrained(where, gguf_file=name)
    except Exception as err:  # truncated, an architecture transformers' loader does not know, no gguf package
        raise PapaError(f"{path}: transformers cannot read this GGUF file ({type(err).__name__}: "
                        f"{first_line(err).rstrip('.')}); its loader supports llama, mistral, qwen2, qwen3, gemma2, "
                        f"gemma3, gpt2 and a few more, from an intact file") from None
    try:
        family = family_for(config)
    except PapaError as err:
        raise PapaError(f"{path}: {err}") from None
    model_class = AutoModelForCausalLM if family.causal else AutoModel
    try:
        model = model_class.from_pretrained(where, gguf_file=name, config=config)
        tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=name)
    except Exception as err:
        raise PapaError(f"{path}: transformers could not load this GGUF file's weights or tokenizer "
                        f"({type(err).__name__}: {first_line(err).rstrip('.')}); is the file complete?") from None
    if getattr(model, "hf_quantizer", None) is not None:  # else save_pretrained refuses: "not serializable"
        model.hf_quantizer.remove_quantization_config(model)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
