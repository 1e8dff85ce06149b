"""The offline tasks' data (papa.evaluation.tasks/*.yaml), read where it lies with papa's own readers.

lm-eval calls a task's `custom_dataset` with the task's `dataset_kwargs` and the run's metadata (`--metadata`,
and the model arguments): the data folder comes from there, `data_dir` (a root holding glue/SST-2/dev.tsv ...
as ../shared/data does, or the glue folder itself), else from the environment variable PAPA_DATA_DIR; nothing is
hard-coded to a machine. The GLUE files are parsed by papa.data.glue (quotes are text, a BOM dropped, CoLA's
header-less file by position), so the documents have the hub `glue` dataset's columns and label ids, which the
YAMLs (adapted from lm-eval's own glue tasks) are written for. Only the dev files are read: the tasks are
zero-shot, and GLUE's test files have no labels.
"""

import os
import re

from datasets import Dataset, DatasetDict

from ..data.glue import read_glue_split
from ..data.lm import glue_sentences, read_text_file
from ..data.task_folders import resolve_data_dir
from ..data.tasks import get_task
from ..errors import PapaError

DATA_ENV = "PAPA_DATA_DIR"
DOCUMENT_SENTENCES = 16  # the perplexity task's documents: this many consecutive held-out sentences, ~400 tokens


def data_root(data_dir=None):
    """The data folder from the task metadata, else $PAPA_DATA_DIR; a PapaError saying how to give it."""
    root = data_dir or os.environ.get(DATA_ENV)
    if not root:
        raise PapaError("the papa_* lm-eval tasks read local files: give the data folder (the one holding glue/SST-2/"
                        f"dev.tsv ...) with --metadata '{{\"data_dir\": \"DIR\"}}' or the environment variable {DATA_ENV}")
    if not os.path.isdir(root):
        raise PapaError(f"the lm-eval tasks' data_dir {root} is not a folder")
    return root


def glue_validation(papa_task, data_dir=None, **_):
    """{"validation": the dev set of GLUE task `papa_task` (sst2, cola, ...)}: its text columns and label ids."""
    task = get_task(papa_task)
    folder = resolve_data_dir(data_root(data_dir), task, True)
    return DatasetDict(validation=read_glue_split(task, folder, "validation"))  # MNLI: dev_matched.tsv alone


def text_documents(papa_task=None, text_file=None, data_dir=None, **_):
    """{"validation": documents in a "page" column} for rolling perplexity: `text_file` (a plain text file, one
    document per line, as the lm task reads it), else the held-out sentences of lm task `papa_task` (lm_qnli:
    the last fifth of QNLI's dev sentences, which its averages never saw), DOCUMENT_SENTENCES to a document."""
    if text_file:
        lines = [line.strip() for line in read_text_file(text_file, "text_file") if line.strip()]
        return DatasetDict(validation=Dataset.from_dict({"page": lines}))
    if papa_task is None:
        raise PapaError("the papa_text task reads text_file: pass --metadata '{\"text_file\": \"FILE\"}'")
    sentences = [s.strip() for s in glue_sentences(get_task(papa_task), data_root(data_dir))["validation"]]
    pages = [" ".join(sentences[i:i + DOCUMENT_SENTENCES]) for i in range(0, len(sentences), DOCUMENT_SENTENCES)]
    return DatasetDict(validation=Dataset.from_dict({"page": pages}))


def retrieval_documents(papa_task, seq_len=2048, count=50, tokenizer=None, pretrained=None, filler="fixed",
                        data_dir=None, **_):
    """{"validation": documents with "context" and "target"}: the retrieval task's examples (papa.data.retrieval),
    `count` of them, each `seq_len` tokens of `tokenizer` (a folder or a bundled name; default: the model's
    `pretrained`), as text: the prompt, and the answer (passkey: " 71432"; copy: the second copy). lm-eval's
    loglikelihood request then scores the answer's log-likelihood and whether greedy decoding gives it (`acc`:
    its is_greedy), as papa's own evaluation does (re-encoding the decoded text may split it a little differently).
    The documents also carry "key" and "depth"."""
    from transformers import AutoTokenizer

    from ..data.retrieval import IGNORE, filler_sentences, make_examples, retrieval_kind
    from ..models.bundled import local_model_path

    name = tokenizer or (pretrained if isinstance(pretrained, str) else None)
    if name is None:
        raise PapaError(f"the {papa_task} lm-eval task makes its examples with the model's tokenizer: give it with "
                        "--metadata '{\"tokenizer\": \"NAME_OR_FOLDER\"}' (or the model argument pretrained=...)")
    tok = AutoTokenizer.from_pretrained(local_model_path(name) or name)
    sentences = filler_sentences(filler, data_root(data_dir) if filler != "fixed" else None, ["validation"])
    examples = make_examples(papa_task, tok, int(seq_len), int(count), "validation", sentences["validation"])
    rows = {"context": [], "target": [], "key": [], "depth": []}
    for e in examples:
        answer = sum(1 for y in e.labels if y != IGNORE)
        start = len(e.input_ids) - answer - retrieval_kind(papa_task).target_before  # copy: the second copy, whole
        first = 1 if e.input_ids[:1] == [tok.bos_token_id] and tok.bos_token_id is not None else 0  # lm-eval adds it
        context, target = tok.decode(e.input_ids[first:start]), tok.decode(e.input_ids[start:])
        bare = context.rstrip()  # a prompt ending in the answer's space: lm-eval puts it before the continuation
        rows["context"].append(bare)
        rows["target"].append(context[len(bare):] + target)
        rows["key"].append(e.key)
        rows["depth"].append(-1.0 if e.depth is None else float(e.depth))
    return DatasetDict(validation=Dataset.from_dict(rows))


def perplexity_results(doc, results):
    """lm-eval's per-document values for its word/byte perplexities and bits per byte (as its wikitext task)."""
    (loglikelihood,) = results
    words, size = len(re.split(r"\s+", doc["page"])), len(doc["page"].encode("utf-8"))
    return {"word_perplexity": (loglikelihood, words), "byte_perplexity": (loglikelihood, size),
            "bits_per_byte": (loglikelihood, size)}
