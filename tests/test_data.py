"""papa.data.glue: GLUE TSV/CSV/JSON and CoNLL readers on the real files and on small broken ones."""

import json
from collections import Counter

import datasets
import pytest

from papa.data.conll import load_token_task, read_conll
from papa.data.glue import load_sequence_task, read_glue_tsv
from papa.errors import PapaError
from papa.data.tasks import get_task

NER_LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]  # the hub's order


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- real GLUE files

def test_cola_counts_balance_and_raw_quotes(shared_data):
    train = read_glue_tsv(shared_data / "glue/CoLA/train.tsv", "cola")
    dev = read_glue_tsv(shared_data / "glue/CoLA/dev.tsv", "cola")  # no final newline
    assert set(train) == {"sentence", "label"}
    assert len(train["sentence"]) == len(train["label"]) == 8551
    assert len(dev["label"]) == 1043
    assert Counter(train["label"]) == {1: 6023, 0: 2528}  # 1 = acceptable
    assert Counter(dev["label"]) == {1: 721, 0: 322}
    # line 3057: quote characters are data, not csv quoting
    assert train["sentence"][3056] == 'Susan whispered "Shut up".'
    assert train["sentence"][3057] == 'Susan whispered "Shut up" at them.'


def test_mrpc_counts_and_bom(shared_data):
    train = read_glue_tsv(shared_data / "glue/MRPC/train.tsv", "mrpc")  # header starts with a BOM
    dev = read_glue_tsv(shared_data / "glue/MRPC/dev.tsv", "mrpc")
    assert list(train) == ["sentence1", "sentence2", "label"]
    assert len(train["label"]) == 3668 and len(dev["label"]) == 408
    assert Counter(train["label"]) == {1: 2474, 0: 1194}
    assert train["sentence1"][0].startswith("Amrozi accused his brother")
    assert not any("\ufeff" in s for s in train["sentence1"] + train["sentence2"])


def test_sst2_wnli_qnli(shared_data):
    sst2 = read_glue_tsv(shared_data / "glue/SST-2/dev.tsv", "sst2")
    assert len(sst2["label"]) == 872 and Counter(sst2["label"]) == {1: 444, 0: 428}
    assert sst2["sentence"][0] == "it 's a charming and often affecting journey . "  # trailing space kept
    wnli = {s: read_glue_tsv(shared_data / f"glue/WNLI/{s}.tsv", "wnli") for s in ("train", "dev")}
    assert len(wnli["train"]["label"]) == 635 and len(wnli["dev"]["label"]) == 71
    assert Counter(wnli["train"]["label"]) == {0: 323, 1: 312}
    qnli = read_glue_tsv(shared_data / "glue/QNLI/dev.tsv", "qnli")
    assert list(qnli) == ["question", "sentence", "label"]
    assert len(qnli["label"]) == 5463
    assert Counter(qnli["label"]) == {0: 2702, 1: 2761}  # entailment = 0 in HF glue order


def test_load_sequence_task_from_data_dir(shared_data):
    ds = load_sequence_task("CoLA", data_dir=shared_data / "glue/CoLA", cache_dir=None)
    assert set(ds) == {"train", "validation"}
    assert ds["train"].column_names == ["sentence", "label"]
    assert ds["train"].features["label"].names == ["unacceptable", "acceptable"]
    assert ds["validation"].num_rows == 1043
    only_dev = load_sequence_task("qnli", data_dir=shared_data / "glue/QNLI", splits=("validation",))
    assert list(only_dev) == ["validation"] and only_dev["validation"].num_rows == 5463


def test_data_dir_pointing_at_glue_root_suggests_task_folder(shared_data):
    with pytest.raises(PapaError, match=r"no train\.tsv.*did you mean --data_dir .*CoLA"):
        load_sequence_task("cola", data_dir=shared_data / "glue")


# ----------------------------------------------------------------------------- broken and synthetic GLUE files

def test_wrong_field_count_names_file_and_line(tmp_path):
    path = write(tmp_path / "train.tsv", "index\tsentence1\tsentence2\tlabel\n0\ta\tb\t1\n1\ta\tb\n")
    with pytest.raises(PapaError, match=r"train\.tsv:3: expected 4 tab-separated fields, found 3"):
        read_glue_tsv(path, "wnli")
    cola = write(tmp_path / "cola.tsv", "src\t1\t\tFine.\nsrc\t1\tFine too.\n")
    with pytest.raises(PapaError, match=r"cola\.tsv:2: expected 4"):
        read_glue_tsv(cola, "cola")


def test_label_outside_task_labels(tmp_path):
    path = write(tmp_path / "dev.tsv", "sentence\tlabel\ngood \t1\nbad \t2\n")
    with pytest.raises(PapaError, match=r"dev\.tsv:3: label '2' is not a sst2 label; valid: 0, 1"):
        read_glue_tsv(path, "sst2")
    qnli = write(tmp_path / "qnli.tsv", "index\tquestion\tsentence\tlabel\n0\tq?\ts.\tneutral\n")
    with pytest.raises(PapaError, match=r"qnli\.tsv:2: label 'neutral'.*entailment, not_entailment"):
        read_glue_tsv(qnli, "qnli")


def test_empty_and_header_only_files(tmp_path):
    with pytest.raises(PapaError, match="is empty"):
        read_glue_tsv(write(tmp_path / "empty.tsv", ""), "sst2")
    with pytest.raises(PapaError, match="no data rows"):
        read_glue_tsv(write(tmp_path / "header.tsv", "sentence\tlabel\n"), "sst2")
    with pytest.raises(PapaError, match="no data rows"):
        read_glue_tsv(write(tmp_path / "cola.tsv", ""), "cola")


def test_missing_file_and_folder_name_the_flag(tmp_path):
    with pytest.raises(PapaError, match=r"--data_dir .*nowhere is not a folder"):
        load_sequence_task("sst2", data_dir=tmp_path / "nowhere")
    write(tmp_path / "train.tsv", "sentence\tlabel\nfine \t1\n")
    with pytest.raises(PapaError, match=r"--data_dir .* has no dev\.tsv .*validation.*--validation_file"):
        load_sequence_task("sst2", data_dir=tmp_path)
    assert load_sequence_task("sst2", data_dir=tmp_path, splits=("train",))["train"].num_rows == 1
    with pytest.raises(PapaError, match=r"--validation_file .*gone\.tsv does not exist"):
        load_sequence_task("sst2", train_file=tmp_path / "train.tsv", validation_file=tmp_path / "gone.tsv")
    with pytest.raises(PapaError, match="header lacks column.*label"):
        read_glue_tsv(write(tmp_path / "bad_header.tsv", "sentence\tlab\nx\t1\n"), "sst2")


MNLI_DEV_HEADER = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
                   "sentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label")
MNLI_TRAIN_HEADER = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
                     "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label")


def mnli_row(i, premise, hypothesis, gold, num_fields):
    parses = ["( x )"] * 4
    votes = [gold] * (num_fields - 11)
    return "\t".join([str(i), "1", f"{i}e", "fiction", *parses, premise, hypothesis, *votes, gold])


def test_mnli_layout_train_12_dev_16_columns(tmp_path):
    write(tmp_path / "train.tsv", MNLI_TRAIN_HEADER + "\n" + mnli_row(0, "P0.", "H0.", "neutral", 12) + "\n")
    write(tmp_path / "dev_matched.tsv", MNLI_DEV_HEADER + "\n" + "\n".join(
        [mnli_row(0, "Pm0.", "Hm0.", "contradiction", 16), mnli_row(1, "Pm1.", "Hm1.", "entailment", 16)]) + "\n")
    write(tmp_path / "dev_mismatched.tsv", MNLI_DEV_HEADER + "\n" + mnli_row(0, "Px.", "Hx.", "neutral", 16) + "\n")
    ds = load_sequence_task("mnli", data_dir=tmp_path)
    assert list(ds) == ["train", "validation", "validation_mismatched"]
    assert ds["train"].column_names == ["premise", "hypothesis", "label"]
    assert ds["train"][0] == {"premise": "P0.", "hypothesis": "H0.", "label": 1}
    assert ds["validation"]["premise"] == ["Pm0.", "Pm1."]
    assert ds["validation"]["label"] == [2, 0]
    assert ds["validation_mismatched"][0] == {"premise": "Px.", "hypothesis": "Hx.", "label": 1}
    # one --validation_file is one split: no mismatched split is added (or required)
    files = load_sequence_task("mnli", train_file=tmp_path / "train.tsv", validation_file=tmp_path / "dev_matched.tsv")
    assert list(files) == ["train", "validation"] and files["validation"].num_rows == 2


def test_stsb_float_labels(tmp_path):
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
    rows = ["0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane is taking off.\tAn air plane is "
            "taking off.\t5.000", "1\tmain-news\theadlines\t2015\t0002\tnone\tnone\tA man.\tA dog.\t0.25"]
    data = read_glue_tsv(write(tmp_path / "train.tsv", header + "\n" + "\n".join(rows) + "\n"), "sts-b")
    assert data == {"sentence1": ["A plane is taking off.", "A man."],
                    "sentence2": ["An air plane is taking off.", "A dog."], "label": [5.0, 0.25]}
    ds = load_sequence_task("stsb", data_dir=tmp_path, splits=("train",))
    assert ds["train"].features["label"] == datasets.Value("float32")
    bad = write(tmp_path / "bad.tsv", header + "\n" + rows[1].replace("0.25", "high") + "\n")
    with pytest.raises(PapaError, match=r"bad\.tsv:2: label 'high' is not a number"):
        read_glue_tsv(bad, "stsb")


def test_csv_and_json_inputs_with_string_labels(tmp_path):
    cache = tmp_path / "cache"
    csv_text = 'sentence,label,extra\n"Fine, really.",acceptable,x\nBad it.,unacceptable,y\n'  # quoted comma
    train = write(tmp_path / "train.csv", csv_text)
    rows = [{"sentence": "One.", "label": "acceptable"}, {"sentence": "Two.", "label": 0}]
    dev = write(tmp_path / "dev.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    ds = load_sequence_task("cola", train_file=train, validation_file=dev, cache_dir=cache)
    assert ds["train"].column_names == ["sentence", "label"]  # "extra" dropped
    assert ds["train"]["sentence"] == ["Fine, really.", "Bad it."]
    assert ds["train"]["label"] == [1, 0]
    assert ds["validation"]["label"] == [1, 0]

    qnli = write(tmp_path / "qnli.json", json.dumps({"question": "q?", "sentence": "s.", "label": "not_entailment"}))
    assert load_sequence_task("qnli", validation_file=qnli, splits=("validation",),
                              cache_dir=cache)["validation"]["label"] == [1]

    out_of_range = write(tmp_path / "range.csv", "sentence,label\nA.,1\nB.,3\n")
    with pytest.raises(PapaError, match=r"range\.csv row 2: label 3 is not a cola label"):
        load_sequence_task("cola", train_file=out_of_range, splits=("train",), cache_dir=cache)
    unknown_name = write(tmp_path / "name.csv", "sentence,label\nA.,maybe\n")
    with pytest.raises(PapaError, match=r"name\.csv row 1: label 'maybe'"):
        load_sequence_task("cola", train_file=unknown_name, splits=("train",), cache_dir=cache)
    no_label = write(tmp_path / "nolabel.csv", "sentence,gold\nA.,1\n")
    with pytest.raises(PapaError, match=r"nolabel\.csv lacks column\(s\) label"):
        load_sequence_task("cola", train_file=no_label, splits=("train",), cache_dir=cache)
    with pytest.raises(PapaError, match="unsupported file type '.parquet'"):
        load_sequence_task("cola", train_file=write(tmp_path / "t.parquet", "x"), splits=("train",))


def test_offline_without_files_says_pass_data_dir(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(PapaError, match="offline.*--data_dir.*--train_file/--validation_file"):
        load_sequence_task("sst2")
    with pytest.raises(PapaError, match="offline.*--data_dir"):
        load_token_task("ner")


def test_hub_fallback_renames_and_wraps_failures(monkeypatch):
    """Online path without a network: a fake load_dataset stands in for the hub."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
    calls = []

    def fake_hub(path, name=None, cache_dir=None):
        calls.append((path, name))
        features = datasets.Features({"premise": datasets.Value("string"), "hypothesis": datasets.Value("string"),
                                      "label": datasets.ClassLabel(names=list(get_task("mnli").labels)),
                                      "idx": datasets.Value("int32")})
        split = datasets.Dataset.from_dict({"premise": ["p"], "hypothesis": ["h"], "label": [2], "idx": [0]},
                                           features=features)
        return datasets.DatasetDict({"train": split, "validation_matched": split, "validation_mismatched": split})

    monkeypatch.setattr(datasets, "load_dataset", fake_hub)
    ds = load_sequence_task("mnli")
    assert calls == [("nyu-mll/glue", "mnli")]
    assert list(ds) == ["train", "validation", "validation_mismatched"]
    assert ds["validation"].column_names == ["premise", "hypothesis", "label"]  # idx dropped

    def no_network(*args, **kwargs):
        raise ConnectionError("name resolution failed")

    monkeypatch.setattr(datasets, "load_dataset", no_network)
    with pytest.raises(PapaError, match=r"could not load nyu-mll/glue \(sst2\) from the Hugging Face hub.*ConnectionError"):
        load_sequence_task("sst2")


def test_unknown_split():
    with pytest.raises(PapaError, match="unknown split 'dev'"):
        load_sequence_task("sst2", data_dir=".", splits=("dev",))


def test_repeat_uses_the_synthetic_generator():
    pytest.importorskip("papa.data.synthetic")
    ds = load_sequence_task("repeat", data_dir="/ignored", splits=("train",))
    assert list(ds) == ["train"]
    assert ds["train"].column_names == ["sentence", "label"]
    assert ds["train"].features["label"].names == ["new", "repeated"]
    assert ds["train"].num_rows > 0


# ----------------------------------------------------------------------------- CoNLL

def test_conll_real_files(shared_data):
    tokens, tags = read_conll(shared_data / "conll2003/train.txt", 3)
    assert len(tokens) == 14041 and sum(map(len, tokens)) == 203621
    assert tokens[0] == ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."]
    assert tags[0] == ["B-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O", "O"]
    assert not any("-DOCSTART-" in sentence for sentence in tokens)
    assert all(len(s) == len(t) > 0 for s, t in zip(tokens, tags))
    valid_tokens, _ = read_conll(shared_data / "conll2003/valid.txt", 1)
    assert len(valid_tokens) == 3250 and sum(map(len, valid_tokens)) == 51362

    ds, labels = load_token_task("NER", data_dir=shared_data / "conll2003")
    assert labels == NER_LABELS
    assert ds["train"].num_rows == 14041 and ds["validation"].num_rows == 3250
    assert [labels[i] for i in ds["train"][0]["tags"]] == tags[0]
    # the label list is the task's, whatever is read
    only_dev, dev_labels = load_token_task("ner", data_dir=shared_data / "conll2003", splits=("validation",))
    assert list(only_dev) == ["validation"] and dev_labels == NER_LABELS


CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER
"""  # last sentence without a final blank line


def test_conll_columns_docstart_and_trailing_sentence(tmp_path):
    path = write(tmp_path / "train.txt", CONLL)
    assert read_conll(path, 3) == ([["EU", "rejects"], ["Peter", "Blackburn"]], [["B-ORG", "O"], ["B-PER", "I-PER"]])
    assert read_conll(path, 1)[1] == [["NNP", "VBZ"], ["NNP", "NNP"]]
    assert read_conll(path, 2)[1] == [["B-NP", "B-VP"], ["B-NP", "I-NP"]]
    write(tmp_path / "dev.conll", "Peter NNP B-NP B-PER\n\n")
    ds, labels = load_token_task("chunk", data_dir=tmp_path)
    assert labels == list(get_task("chunk").labels) and len(labels) == 23
    assert ds["validation"]["tags"] == [[labels.index("B-NP")]] == [[11]]


def test_conll_bad_line_names_file_and_line(tmp_path):
    path = write(tmp_path / "bad.txt", "EU NNP B-NP B-ORG\nrejects VBZ O\n")
    with pytest.raises(PapaError, match=r"bad\.txt:2: expected 4 space-separated fields"):
        read_conll(path, 3)
    with pytest.raises(PapaError, match="no sentences"):
        read_conll(write(tmp_path / "empty.txt", "-DOCSTART- -X- -X- O\n\n"), 3)


def test_validation_tag_missing_in_train(tmp_path):
    """CoNLL tasks have the canonical tags: a validation tag the training slice lacks still has its id."""
    train = write(tmp_path / "train.txt", "EU NNP B-NP B-ORG\n")
    valid = write(tmp_path / "valid.txt", "Peter NNP B-NP B-PER\nhere FW B-NP O\n")
    ds, labels = load_token_task("ner", train_file=train, validation_file=valid)
    assert [labels[i] for i in ds["validation"]["tags"][0]] == ["B-PER", "O"]
    assert load_token_task("pos", train_file=train, validation_file=valid)[0]["validation"]["tags"] == [[22, 14]]
    bad = write(tmp_path / "bad.txt", "Peter NNP B-NP B-PERSON\n")
    with pytest.raises(PapaError, match=r"bad\.txt: B-PERSON is not a CoNLL-2003 ner tag.*--task_name my_tags"):
        load_token_task("ner", train_file=train, validation_file=bad)
    only_train = tmp_path / "only_train"
    only_train.mkdir()
    write(only_train / "train.txt", "EU NNP B-NP B-ORG\n")
    with pytest.raises(PapaError, match=r"--data_dir .*only_train has no \{valid,validation,dev\}"):
        load_token_task("ner", data_dir=only_train)


# ----------------------------------------------------------------------------- custom tasks (papa.data.custom)

def test_custom_sequence_task_follows_run_glue():
    from papa.data.custom import custom_sequence_task

    table = datasets.Dataset.from_dict
    pair = custom_sequence_task(table({"idx": [0], "sentence2": ["b"], "sentence1": ["a"], "label": [10]}), "f")
    assert pair.text_columns == ("sentence1", "sentence2") and pair.labels == ("10",) and pair.metrics == ("accuracy",)
    first_two = custom_sequence_task(table({"q": ["a"], "label": [2], "p": ["b"], "r": ["c"]}), "f")
    assert first_two.text_columns == ("q", "p")
    ints = custom_sequence_task(table({"text": ["a", "b", "c"], "label": [10, 2, 2]}), "f")
    assert ints.text_columns == ("text",) and ints.labels == ("2", "10")  # sorted as numbers, like run_glue
    regression = custom_sequence_task(table({"text": ["a"], "label": [0.5]}), "f")
    assert regression.is_regression and regression.metrics == ("mse", "pearson")
    # a rise in the mean squared error is a loss: the sweep's change column must say -50% for 1.0 -> 1.5
    from papa.reporting.results import build_results
    assert regression.direction("eval_mse") == -1 and regression.direction("eval_pearson") == 1
    _, rows = build_results({0: {"eval_mse": 1.0, "eval_pearson": 0.8}, 4: {"eval_mse": 1.5, "eval_pearson": 0.6}},
                            regression, total_heads=8)
    assert rows[1]["rel_change_eval_mse"] == pytest.approx(-0.5)
    assert rows[1]["rel_change_eval_pearson"] == pytest.approx(-0.25)
    with pytest.raises(PapaError, match="f has no 'label' column"):
        custom_sequence_task(table({"text": ["a"], "gold": [1]}), "f")


def test_custom_labels_match_by_value(tmp_path):
    from papa.data.custom import resolve_task

    train = write(tmp_path / "train.csv", "text,label\na,pos\nb,neg\nc,pos\n")
    task = resolve_task("sequence", None, train_file=train)
    assert task.name == "custom" and task.labels == ("neg", "pos")
    ds = load_sequence_task(task, train_file=train, validation_file=write(tmp_path / "dev.csv", "text,label\nd,neg\n"))
    assert ds["train"]["label"] == [1, 0, 1] and ds["validation"]["label"] == [0]
    with pytest.raises(PapaError, match=r"bad\.csv row 1: label 'meh' does not occur in the training data"):
        load_sequence_task(task, train_file=train, validation_file=write(tmp_path / "bad.csv", "text,label\nd,meh\n"))
    test = load_sequence_task(task, test_file=write(tmp_path / "test.csv", "text\nx\n"), splits=("test",))
    assert test["test"].column_names == ["text"]  # test splits carry no labels


def test_token_hub_data_maps_tags_by_name(monkeypatch):
    """--dataset_name for a CoNLL task: the hub's ClassLabel ids are read by name into the canonical ids."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
    shuffled = ["I-PER", "O", "B-PER"]  # a source whose ids follow another order

    def fake_hub(path, name=None, cache_dir=None):
        features = datasets.Features({"words": datasets.List(datasets.Value("string")),
                                      "ner_tags": datasets.List(datasets.ClassLabel(names=shuffled))})
        split = datasets.Dataset.from_dict({"words": [["Peter", "Blackburn", "said"]], "ner_tags": [[2, 0, 1]]},
                                           features=features)
        return datasets.DatasetDict(train=split, validation=split)

    monkeypatch.setattr(datasets, "load_dataset", fake_hub)
    ds, labels = load_token_task("ner", dataset_name="someone/conll", splits=("validation",), text_column_name="words")
    assert [labels[i] for i in ds["validation"]["tags"][0]] == ["B-PER", "I-PER", "O"]
    assert ds["validation"]["tokens"] == [["Peter", "Blackburn", "said"]]
