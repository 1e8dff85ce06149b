"""papa.data.tasks: the one task registry, and names resolved once."""

import pytest

from papa.errors import PapaError
from papa.runs.metrics import SEQUENCE_METRICS
from papa.data.synthetic import REPEAT_LABELS
from papa.data.tasks import CONLL_CHUNK, CONLL_NER, CONLL_POS, TASKS, VALIDATION, TaskSpec, get_task, task_names


def test_names_accept_glue_spellings():
    assert get_task("SST-2").name == "sst2"
    assert get_task("STS-B").name == "stsb"
    assert get_task("sts_b").name == "stsb"
    assert get_task("CoLA").name == "cola"
    assert get_task("NER", "token").name == "ner"
    spec = get_task("mrpc")
    assert get_task(spec) is spec  # a resolved task passes through
    with pytest.raises(PapaError, match="unknown task 'sst3'.*cola.*wnli"):
        get_task("sst3", "sequence")
    with pytest.raises(PapaError, match="--task_name is required; one of: ner, pos, chunk"):
        get_task(None, "token")


def test_a_task_of_the_other_kind_names_the_right_script():
    with pytest.raises(PapaError, match="ner is a token-classification task; use run_papa_ner.py"):
        get_task("ner", "sequence")
    with pytest.raises(PapaError, match="cola is a sequence-classification task; use run_papa_glue.py"):
        get_task("cola", "token")


def test_registry_lists_the_readme_tasks():
    assert task_names("sequence") == ["cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte", "wnli", "repeat",
                                      "lm", "lm_qnli", "lm_mrpc", "passkey", "passkey_multi", "copy", "multikey",
                                      "multivalue", "vartrack", "common_words"]  # lm runs there
    assert task_names("token") == ["ner", "pos", "chunk"]
    assert get_task("LM", "sequence").kind == "lm"
    assert all(isinstance(spec, TaskSpec) and spec.name == name for name, spec in TASKS.items())


def test_labels_follow_hf_glue_order():
    assert get_task("wnli").labels == ("not_entailment", "entailment")
    assert get_task("MNLI").labels == ("entailment", "neutral", "contradiction")
    assert get_task("stsb").labels is None and get_task("stsb").is_regression and get_task("stsb").num_labels == 1
    assert list(get_task("repeat").labels) == REPEAT_LABELS


def test_conll_labels_are_the_hub_features_order():
    """The hub conll2003 ClassLabel names (9 NER, 47 POS, 23 chunk tags), so label ids equal the original's hub run."""
    assert CONLL_NER == ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
    assert (len(CONLL_POS), len(set(CONLL_POS)), len(CONLL_CHUNK), len(set(CONLL_CHUNK))) == (47, 47, 23, 23)
    assert CONLL_POS[:10] == ('"', "''", "#", "$", "(", ")", ",", ".", ":", "``") and CONLL_POS[-1] == "WRB"
    assert CONLL_POS.index("FW") == 14 and CONLL_POS.index("NN|SYM") == 25
    assert CONLL_CHUNK[0] == "O" and CONLL_CHUNK[11:13] == ("B-NP", "I-NP") and CONLL_CHUNK[-2:] == ("B-VP", "I-VP")
    for name, labels in (("ner", CONLL_NER), ("pos", CONLL_POS), ("chunk", CONLL_CHUNK)):
        assert get_task(name).labels == labels and get_task(name).num_labels == len(labels)


@pytest.mark.parametrize("name", list(TASKS))
def test_every_spec_is_complete(name):
    spec = TASKS[name]
    if spec.kind == "lm":  # the model's own LM head; perplexity, lower is better; no test split
        assert spec.model_class == "AutoModelForCausalLM" and not spec.test_splits and spec.eval_splits == VALIDATION
        assert spec.direction("eval_perplexity") == spec.direction("eval_loss") == -1
        if spec.retrieval:  # papa.data.retrieval: exact match (higher is better) and the answer's loss
            assert spec.retrieval == name and set(spec.main_metrics) <= set(spec.metrics)
            assert spec.direction("eval_exact_match") == spec.direction("eval_token_accuracy") == 1
        else:
            assert spec.main_metrics == ("perplexity",)
        return
    assert spec.direction(f"eval_{spec.main_metrics[0]}") == 1
    assert spec.model_class in ("AutoModelForSequenceClassification", "AutoModelForTokenClassification")
    assert spec.main_metrics and spec.eval_splits[0][0] == "validation" and spec.eval_splits[0][2] == "eval"
    assert spec.test_splits and spec.test_splits[0][:1] == ("test",) and not spec.custom
    if spec.kind == "token":
        assert spec.conll_column in (1, 2, 3) and spec.main_metrics == ("f1",) and spec.labels
        return
    assert 1 <= len(spec.text_columns) <= 2
    assert set(spec.metrics) <= set(SEQUENCE_METRICS)
    # every main metric is reported, on the first evaluation split or under another split's prefix
    prefixes = [prefix[len("eval_"):] + "_" for _, _, prefix in spec.eval_splits[1:]]
    for metric in spec.main_metrics:
        bare = next((metric[len(p):] for p in prefixes if metric.startswith(p)), metric)
        assert bare in spec.metrics, (name, metric)
    # the official TSV layout names every column the task needs
    assert {column for _, column in spec.tsv_columns} == set(spec.text_columns) | {"label"}
    assert spec.tsv_labels in ("names", "ids", "any")
    assert (spec.hub is None) == (spec.generator is not None)
