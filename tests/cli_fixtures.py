"""Small hand-made data files and an in-process command runner for the CLI tests (test_cli_*.py).

The runs use a tiny random BERT (tests/tiny_encoders.py: 3 layers x 4 heads, hidden 32, the bundled
MiniLM's tokenizer) at T = 16, so each command takes a few seconds in-process.
"""

import json

import pytest
import torch
from tiny_encoders import save_tiny_pretrained

from papa.cli import glue, glue_avgs, ner, ner_avgs

T, LAYERS, HEADS = 16, 3, 4
COMMANDS = {"glue": glue.main, "glue_avgs": glue_avgs.main, "ner": ner.main, "ner_avgs": ner_avgs.main}

COLA_ROWS = [("1", "the cat sat on the mat ."), ("0", "cat the on sat mat the ."), ("1", "a dog barks ."),
             ("0", "barks dog a ."), ("1", "she reads books ."), ("0", "books she reads reads ."),
             ("1", "we like tea ."), ("0", "tea tea like we .")]
CONLL_SENTENCES = [
    [("EU", "NNP", "B-NP", "B-ORG"), ("rejects", "VBZ", "B-VP", "O"), ("German", "JJ", "B-NP", "B-MISC")],
    [("Peter", "NNP", "B-NP", "B-PER"), ("Blackburn", "NNP", "I-NP", "I-PER")],
    [("BRUSSELS", "NNP", "B-NP", "B-LOC"), ("1996-08-22", "CD", "I-NP", "O")],
    [("The", "DT", "B-NP", "O"), ("lamb", "NN", "I-NP", "O"), ("is", "VBZ", "B-VP", "O"), ("British", "JJ", "B-NP", "B-MISC")],
]


def run_command(name, argv):
    """Run a PAPA command in-process; a clean error exit fails the test with its message."""
    try:
        COMMANDS[name]([str(a) for a in argv])
    except SystemExit as exit_:
        pytest.fail(f"{name} exited with status {exit_.code}")


def command_error(name, argv, capsys):
    """The one `error:` line of a command that must fail cleanly (status 2, no traceback)."""
    with pytest.raises(SystemExit) as exit_:
        COMMANDS[name]([str(a) for a in argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


def write_cola(folder, test=True):
    """CoLA-layout train.tsv/dev.tsv (no header, 4 fields) and test.tsv (header `index sentence`)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = "".join(f"src\t{label}\t\t{text}\n" for label, text in COLA_ROWS)
    (folder / "train.tsv").write_text(rows)
    (folder / "dev.tsv").write_text(rows)
    if test:
        (folder / "test.tsv").write_text("index\tsentence\n" + "".join(f"{i}\t{text}\n" for i, (_, text)
                                                                       in enumerate(COLA_ROWS[:7])))
    return folder


def write_conll(folder, splits=("train", "valid", "test")):
    folder.mkdir(parents=True, exist_ok=True)
    text = "-DOCSTART- -X- -X- O\n\n" + "\n".join("".join(" ".join(t) + "\n" for t in s) for s in CONLL_SENTENCES)
    for split in splits:
        (folder / f"{split}.txt").write_text(text)
    return folder


def write_papa_inputs(folder, layers=LAYERS, heads=HEADS, seq_len=T):
    """avgs/avgs.pt (random row-stochastic matrices) and sort/sorted_heads.json (layer-major order)."""
    (folder / "avgs").mkdir(parents=True, exist_ok=True)
    (folder / "sort").mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    avgs = torch.rand(layers, heads, seq_len, seq_len)
    torch.save(avgs / avgs.sum(-1, keepdim=True), folder / "avgs" / "avgs.pt")
    ranking = [[layer, head] for layer in range(layers) for head in range(heads)]
    (folder / "sort" / "sorted_heads.json").write_text(json.dumps(ranking))
    return folder / "avgs", folder / "sort"


def papa_flags(avgs, sort, k=6):
    """The original README's probing flags at T, with k constant heads."""
    return ["--max_seq_length", T, "--use_papa_preprocess", "--use_freeze_extract_pooler", "true",
            "--grad_for_classifier_only", "true", "--static_heads_dir", avgs, "--sorting_heads_dir", sort,
            "--static_heads_num", k, "--report_to", "none", "--per_device_train_batch_size", 4,
            "--per_device_eval_batch_size", 4, "--learning_rate", "1e-3", "--seed", 3]


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory):
    """A tiny random BERT with the bundled MiniLM's tokenizer, saved to a folder."""
    return save_tiny_pretrained("bert", tmp_path_factory.mktemp("tiny_bert"))
