"""The lm tasks read off GLUE folders (lm_qnli, lm_mrpc; papa.data.lm.glue_sentences): which sentences, which
split, found from a root or the folder, the clear errors, and the real shared files."""

import pytest

from papa.data import lm as lm_data
from papa.data.tasks import get_task
from papa.errors import PapaError


def written_glue(folder, name, header, rows):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("\n".join(["\t".join(header)] + ["\t".join(r) for r in rows]) + "\n")


def test_lm_qnli_and_lm_mrpc_read_the_sentences_of_glue_folders(tmp_path):
    """lm_mrpc: MRPC's first sentence of each pair, train.tsv → train, dev.tsv → validation (a sentence already in
    train dropped there); lm_qnli, a folder with dev.tsv only: its distinct sentences, the first 80% train, the
    rest validation, in file order. One line per sentence, found from a root as from the folder."""
    mrpc = tmp_path / "glue" / "MRPC"
    header = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
    written_glue(mrpc, "train.tsv", header, [["1", "1", "2", "A b.", "A paraphrase."], ["0", "3", "4", "C d.", "X"]])
    written_glue(mrpc, "dev.tsv", header, [["1", "5", "6", "C d.", "Y"], ["1", "7", "8", "E f.", "Z"]])
    got = lm_data.glue_sentences(get_task("lm_mrpc"), tmp_path)
    assert got == {"train": ["A b.\n", "C d.\n"], "validation": ["E f.\n"]}
    assert lm_data.glue_sentences(get_task("lm_mrpc"), mrpc) == got
    qnli = tmp_path / "glue" / "QNLI"
    rows = [[str(i), f"q{i}?", f"S{i // 2}.", "entailment"] for i in range(20)]  # each sentence twice: 10 distinct
    written_glue(qnli, "dev.tsv", ["index", "question", "sentence", "label"], rows)
    got = lm_data.glue_sentences(get_task("lm_qnli"), tmp_path)
    assert got == {"train": [f"S{i}.\n" for i in range(8)], "validation": ["S8.\n", "S9.\n"]}
    texts = lm_data.load_lm_texts(get_task("lm_qnli"), ["train", "validation"], data_dir=qnli)
    assert texts["validation"]["text"] == ["S8.\n", "S9.\n"]


def test_lm_qnli_without_data_dir_is_a_clear_error(tmp_path):
    with pytest.raises(PapaError, match=r"lm_qnli reads the sentences of GLUE's QNLI TSVs: pass --data_dir"):
        lm_data.load_lm_texts(get_task("lm_qnli"), ["train"])
    with pytest.raises(PapaError, match="has no dev.tsv"):
        lm_data.glue_sentences(get_task("lm_qnli"), tmp_path)


def test_the_shared_qnli_and_mrpc_text(shared_data):
    """The real files: no sentence on both sides, and the amounts this project's results were made from."""
    for name, sizes in (("lm_qnli", (3130, 783)), ("lm_mrpc", (3668, 408))):
        got = lm_data.glue_sentences(get_task(name), shared_data)
        assert (len(got["train"]), len(got["validation"])) == sizes
        assert not set(got["train"]) & set(got["validation"])


def test_lm_qnli_with_its_own_files_needs_no_data_dir(tmp_path):
    """Both splits given as files: the GLUE folder is not read, so no --data_dir is needed."""
    train, validation = tmp_path / "t.txt", tmp_path / "v.txt"
    train.write_text("a b\n")
    validation.write_text("c d\n")
    texts = lm_data.load_lm_texts(get_task("lm_qnli"), ["train", "validation"], train_file=train,
                                  validation_file=validation)
    assert texts["train"]["text"] == ["a b\n"] and texts["validation"]["text"] == ["c d\n"]
