"""Tokenised splits cached on disk, so a sweep tokenises each split once instead of once per stage.

Every stage of a sweep reads the same task and tokenises it the same way (the averaging pass and
every probing run pad to the same T in the same layout); on a large training set that costs more
than the rest of a short stage (SST-2's 67k sentences: about 13 s per stage here, reading them
0.3 s). The sweep sets PAPA_TOKENIZED_CACHE=<output_dir>/tokenized for its stages; there
`tokenize_cached` keeps each tokenised split under a key that hashes everything the result
depends on:

- the raw examples of the split, after --max_*_samples (a changed data file is a new key),
- the tokenizer's serialised state (vocabulary, normaliser, pre-tokeniser, special tokens),
- every argument of the tokenisation (T, layout, padding, label list, label_all_tokens, a decoder's
  layout (`causal`), ...), and the tokenizer's pad id, padding side and add_prefix_space,
- the task's spec, the tokenisation code (papa/data/preprocessing.py) and the library versions.

So a hit is what tokenising again would give (tested), and any change is a miss; old entries stay
(delete `tokenized/` to reclaim the space). Without the variable, or with a tokenizer that has no
serialisable backend, it just tokenises. An entry is written to a temporary folder and renamed
into place: a killed stage leaves a whole entry or none, and stages running at once (--launcher
local or slurm) never read a partial one; the first of two that store the same entry wins.
"""

import dataclasses
import hashlib
import inspect
import json
import os
import shutil
import tempfile

import datasets

from ..io import follow_umask
from . import preprocessing
from .preprocessing import tokenize_dataset

CACHE_ENV = "PAPA_TOKENIZED_CACHE"
VERSION = 1  # bump when what an entry holds changes
SETTINGS = inspect.signature(tokenize_dataset)  # its parameters name every setting of a call


def _sha256(data):
    return hashlib.sha256(data if isinstance(data, (bytes, memoryview)) else data.encode()).hexdigest()


def _json(obj):
    return json.dumps(obj, sort_keys=True, default=repr)


def tokenizer_digest(tokenizer):
    """A hash of everything that decides how `tokenizer` splits text; None when it cannot be serialised."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    state = json.loads(backend.to_str())
    # the padding/truncation settings of its last call, which every call sets anew
    state.pop("padding", None)
    state.pop("truncation", None)
    # what papa.models.pretrained.fit_tokenizer may change (pad = eos, right padding) and the token tasks' prefix space
    own = {"class": type(tokenizer).__name__, "sep": tokenizer.sep_token_id, "pad": tokenizer.pad_token_id,
           "eos": tokenizer.eos_token_id, "padding_side": tokenizer.padding_side,
           "truncation_side": tokenizer.truncation_side, "inputs": list(tokenizer.model_input_names),
           "add_prefix_space": getattr(tokenizer, "add_prefix_space", None)}
    return _sha256(_json([state, own]))


def raw_digest(dataset):
    """A hash of a split's examples (only the selected rows, schema included)."""
    import pyarrow as pa

    table = dataset.with_format("arrow")[:]
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return _sha256(memoryview(sink.getvalue()))


def _code_digest():
    import tokenizers
    import transformers

    with open(preprocessing.__file__, "rb") as f:
        source = f.read()
    return _sha256(_json([VERSION, _sha256(source), transformers.__version__, tokenizers.__version__,
                          datasets.__version__]))


def _save(dataset, entry, replace=False):
    """Write `dataset` as `entry`, whole or not at all: into a temporary folder beside it, then renamed into place.
    Several stages may store the same entry at once (--launcher local or slurm): the first rename wins. With
    `replace`, an existing entry is first renamed away (then deleted), so no reader ever sees a half-deleted one."""
    parent = os.path.dirname(entry)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=parent)
    old = None
    try:
        dataset.save_to_disk(tmp)
        follow_umask(tmp)  # mkdtemp makes 0700: the user's usual modes, so a group may share the cache
        if replace and os.path.isdir(entry):
            old = tempfile.mkdtemp(prefix=".old-", dir=parent)
            try:
                os.rename(entry, os.path.join(old, "entry"))
            except OSError:  # another process replaced or removed it first
                pass
        try:
            os.rename(tmp, entry)
        except OSError:  # another process stored the same entry first: keep theirs
            pass
    finally:
        for folder in (tmp, old):
            if folder and os.path.exists(folder):
                shutil.rmtree(folder, ignore_errors=True)


def _load(entry):
    """The stored split, or None when there is none (or it was just replaced under us by another stage)."""
    if not os.path.isdir(entry):
        return None
    try:
        return datasets.load_from_disk(entry)
    except FileNotFoundError:  # renamed away while being read (papa's _save with replace): tokenise instead
        return None


def tokenize_cached(task, dataset_dict, tokenizer, *args, overwrite=False, **kwargs):
    """`tokenize_dataset(task, dataset_dict, tokenizer, *args, **kwargs)`, each split taken from the cache
    when PAPA_TOKENIZED_CACHE names one and it holds that split (else tokenised and stored there);
    `overwrite` tokenises again and replaces the entries."""
    folder = os.environ.get(CACHE_ENV) or None
    tokenizer_key = tokenizer_digest(tokenizer) if folder else None
    if tokenizer_key is None:
        return tokenize_dataset(task, dataset_dict, tokenizer, *args, **kwargs)
    spec = {f.name: getattr(task, f.name) for f in dataclasses.fields(task) if f.name != "generator"}
    # every setting by name, defaults included, however the caller spelled the call
    bound = SETTINGS.bind(task, dataset_dict, tokenizer, *args, **kwargs)
    bound.apply_defaults()
    # num_proc changes how it is computed, not the result
    settings = {k: v for k, v in bound.arguments.items() if k not in ("task", "dataset_dict", "tokenizer", "num_proc")}
    common = _json([spec, tokenizer_key, settings, _code_digest()])
    out = {}
    for split, dataset in dataset_dict.items():
        entry = os.path.join(folder, _sha256(common + raw_digest(dataset))[:32])
        stored = None if overwrite else _load(entry)
        if stored is not None:
            out[split] = stored
            continue
        out[split] = tokenize_dataset(task, datasets.DatasetDict({split: dataset}), tokenizer, *args, **kwargs)[split]
        _save(out[split], entry, replace=overwrite)
    return datasets.DatasetDict(out)
