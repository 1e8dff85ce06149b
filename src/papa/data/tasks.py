"""The task registry: everything PAPA knows about a task, in one frozen `TaskSpec` per task.

A command resolves `--task_name` once, with `get_task` (case-insensitive, `-`/`_` ignored, so
`COLA`, `SST-2` and `sts_b` work), and passes the spec down: the readers (papa.data.glue, papa.data.conll),
the tokenisation (papa.data.preprocessing), the metrics (papa.runs.metrics), the model class and the sweep's
results table all read it. Adding a task is one entry in `TASKS`.

Three kinds of task exist, and what differs between them beyond a spec's fields is in `KINDS`:
"sequence" (GLUE-style sentence or sentence-pair classification, or regression), "token"
(CoNLL-2003 tagging) and "lm" (language modelling with a decoder's own LM head, papa.data.lm; run by
the sequence scripts). A metric in a spec's `lower_is_better` (perplexity) is a loss: the sweep's
relative changes are changes in performance, negative = worse, for every metric (`TaskSpec.direction`).
"""

from dataclasses import dataclass

from ..errors import PapaError

KINDS = {
    "sequence": {"model_class": "AutoModelForSequenceClassification", "cli": ("glue_avgs", "glue"),
                 "scripts": ("run_papa_glue_avgs_creator.py", "run_papa_glue.py")},
    "token": {"model_class": "AutoModelForTokenClassification", "cli": ("ner_avgs", "ner"),
              "scripts": ("run_papa_ner_avgs_creator.py", "run_papa_ner.py")},
    "lm": {"model_class": "AutoModelForCausalLM", "cli": ("glue_avgs", "glue"),
           "scripts": ("run_papa_glue_avgs_creator.py", "run_papa_glue.py")},
}

VALIDATION = (("validation", "dev.tsv", "eval"),)
TEST = (("test", "test.tsv", ""),)

# The CoNLL-2003 tag sets in the order of the hub `conll2003` dataset's ClassLabel features (typed in from
# the features of huggingface/datasets' datasets/conll2003/conll2003.py), so label ids are the ones the
# original's hub runs used, and a tag that a small training slice lacks still has its id.
CONLL_NER = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
CONLL_POS = ('"', "''", "#", "$", "(", ")", ",", ".", ":", "``", "CC", "CD", "DT", "EX", "FW", "IN", "JJ", "JJR",
             "JJS", "LS", "MD", "NN", "NNP", "NNPS", "NNS", "NN|SYM", "PDT", "POS", "PRP", "PRP$", "RB", "RBR", "RBS",
             "RP", "SYM", "TO", "UH", "VB", "VBD", "VBG", "VBN", "VBP", "VBZ", "WDT", "WP", "WP$", "WRB")
CONLL_CHUNK = ("O", "B-ADJP", "I-ADJP", "B-ADVP", "I-ADVP", "B-CONJP", "I-CONJP", "B-INTJ", "I-INTJ", "B-LST",
               "I-LST", "B-NP", "I-NP", "B-PP", "I-PP", "B-PRT", "I-PRT", "B-SBAR", "I-SBAR", "B-UCP", "I-UCP",
               "B-VP", "I-VP")


@dataclass(frozen=True)
class TaskSpec:
    """One task. Label ids are indices into `labels` (HF `glue` order for GLUE tasks)."""

    name: str  # canonical name, e.g. "sst2"
    kind: str  # a key of KINDS
    text_columns: tuple[str, ...] = ()  # sequence tasks: the one or two text columns, HF `glue` names
    labels: tuple[str, ...] | None = None  # None: regression (stsb)
    metrics: tuple[str, ...] = ("accuracy",)  # sequence tasks: keys of papa.runs.metrics.SEQUENCE_METRICS
    main_metrics: tuple[str, ...] = ("accuracy",)  # the sweep's table columns (no "eval_"); the first is plotted
    chance: float | None = None  # the first main metric for a guess that ignores the input, where known
    # official GLUE TSV: {header name or position: column}; positions mean a header-less file of tsv_fields fields
    tsv_columns: tuple[tuple[str | int, str], ...] = ()
    tsv_fields: int | None = None
    tsv_labels: str = "names"  # how the TSV writes labels: "names", "ids" ("0"/"1") or "any"
    glue_folder: str | None = None  # the task's folder in the GLUE download (hints at a wrong --data_dir)
    # evaluation splits: (split, its file in a GLUE folder, metric key prefix)
    eval_splits: tuple[tuple[str, str, str], ...] = VALIDATION
    # test splits (--do_predict): (split, its file in a GLUE folder, suffix of predict_results_<task><suffix>.txt)
    test_splits: tuple[tuple[str, str, str], ...] = TEST
    hub: tuple[str, str | None] | None = None  # (dataset, config) on the HF hub, used only when online
    conll_column: int | None = None  # token tasks: the tag's column in `TOKEN POS CHUNK NER` lines
    generator: object = None  # synthetic tasks: a function returning the DatasetDict (no files, no hub)
    quick_sweep: bool = False  # the sweep's defaults: papa.sweep.defaults.REPEAT_DEFAULTS, not the original README's
    custom: bool = False  # built from the user's files (papa.data.custom): labels matched by value, no combined_score
    lower_is_better: tuple[str, ...] = ()  # metrics (no "eval_") whose rise is a loss, e.g. perplexity
    retrieval: str | None = None  # lm tasks generated for any T, only the answer scored (papa.data.retrieval.KINDS)

    def direction(self, metric):
        """+1 when a rise in `metric` (an eval_results key or a bare name) is a gain, -1 when it is a loss."""
        name = metric[len("eval_"):] if metric.startswith("eval_") else metric
        return -1 if name in self.lower_is_better else 1

    @property
    def num_labels(self):
        return 1 if self.labels is None else len(self.labels)

    @property
    def model_class(self):
        """The transformers Auto class name the probing run builds."""
        return KINDS[self.kind]["model_class"]

    @property
    def is_regression(self):
        return self.kind == "sequence" and self.labels is None


def _repeat_dataset():
    from .synthetic import make_repeat_dataset  # lazy: it imports `datasets`

    return make_repeat_dataset()


def _glue(name, text_columns, labels, folder, tsv_columns, **more):
    return TaskSpec(name, "sequence", text_columns, labels, glue_folder=folder, tsv_columns=tsv_columns,
                    hub=("nyu-mll/glue", name), **more)


def _conll(name, column, labels):
    return TaskSpec(name, "token", labels=labels, metrics=("precision", "recall", "f1", "accuracy"),
                    main_metrics=("f1",), hub=("eriktks/conll2003", None), conll_column=column)


PAIR = ("sentence1", "sentence2")
LM = dict(metrics=("perplexity",), main_metrics=("perplexity",), test_splits=(), lower_is_better=("perplexity", "loss"))
# exact_match: greedy decoding reproduces the answer; token_accuracy: its tokens that are the argmax; loss: nats per
# answer token (papa.families.lm_head)
PASSKEY = dict(metrics=("exact_match", "token_accuracy", "loss", "perplexity"), main_metrics=("exact_match", "loss"),
               test_splits=(), lower_is_better=("perplexity", "loss"))
BINARY_IDS = dict(tsv_labels="ids")
F1_FIRST = dict(metrics=("accuracy", "f1"), main_metrics=("f1", "accuracy"))

TASKS = {spec.name: spec for spec in (
    _glue("cola", ("sentence",), ("unacceptable", "acceptable"), "CoLA", ((3, "sentence"), (1, "label")),
          tsv_fields=4, metrics=("matthews_correlation",), main_metrics=("matthews_correlation",), chance=0.0,
          **BINARY_IDS),
    _glue("sst2", ("sentence",), ("negative", "positive"), "SST-2", (("sentence", "sentence"), ("label", "label")),
          **BINARY_IDS),
    _glue("mrpc", PAIR, ("not_equivalent", "equivalent"), "MRPC",
          (("#1 String", "sentence1"), ("#2 String", "sentence2"), ("Quality", "label")), **BINARY_IDS, **F1_FIRST),
    _glue("qqp", ("question1", "question2"), ("not_duplicate", "duplicate"), "QQP",
          (("question1", "question1"), ("question2", "question2"), ("is_duplicate", "label")), **BINARY_IDS,
          **F1_FIRST),
    _glue("stsb", PAIR, None, "STS-B", (("sentence1", "sentence1"), ("sentence2", "sentence2"), ("score", "label")),
          metrics=("pearson", "spearmanr"), main_metrics=("pearson", "spearmanr")),
    _glue("mnli", ("premise", "hypothesis"), ("entailment", "neutral", "contradiction"), "MNLI",
          (("sentence1", "premise"), ("sentence2", "hypothesis"), ("gold_label", "label")),
          main_metrics=("accuracy", "mnli-mm_accuracy"),
          eval_splits=(("validation", "dev_matched.tsv", "eval"),
                       ("validation_mismatched", "dev_mismatched.tsv", "eval_mnli-mm")),
          test_splits=(("test", "test_matched.tsv", ""), ("test_mismatched", "test_mismatched.tsv", "-mm"))),
    _glue("qnli", ("question", "sentence"), ("entailment", "not_entailment"), "QNLI",
          (("question", "question"), ("sentence", "sentence"), ("label", "label"))),
    _glue("rte", PAIR, ("entailment", "not_entailment"), "RTE",
          (("sentence1", "sentence1"), ("sentence2", "sentence2"), ("label", "label"))),
    _glue("wnli", PAIR, ("not_entailment", "entailment"), "WNLI",
          (("sentence1", "sentence1"), ("sentence2", "sentence2"), ("label", "label")), **BINARY_IDS),
    # built-in synthetic task (papa.data.synthetic); labels = REPEAT_LABELS, balanced, so chance is 1/2
    TaskSpec("repeat", "sequence", ("sentence",), ("new", "repeated"), chance=0.5,
             tsv_columns=(("sentence", "sentence"), ("label", "label")), tsv_labels="any", generator=_repeat_dataset,
             quick_sweep=True),
    _conll("ner", 3, CONLL_NER),
    _conll("pos", 1, CONLL_POS),
    _conll("chunk", 2, CONLL_CHUNK),
    # language modelling (papa.data.lm): plain text chunked into blocks of T tokens, scored by the model's LM head
    TaskSpec("lm", "lm", ("text",), **LM),
    # the same on real text already on disk: the sentences of a GLUE folder's TSVs, one per line (papa.data.lm)
    TaskSpec("lm_qnli", "lm", ("sentence",), glue_folder="QNLI", tsv_columns=(("sentence", "sentence"),), **LM),
    # MRPC's first sentence of each pair only: the second paraphrases it, and would make the text a copying task
    TaskSpec("lm_mrpc", "lm", ("sentence",), glue_folder="MRPC", tsv_columns=(("#1 String", "sentence"),), **LM),
    # long-context retrieval (papa.data.retrieval): generated at --max_seq_length, scored on the answer alone
    TaskSpec("passkey", "lm", retrieval="passkey", **PASSKEY),
    TaskSpec("passkey_multi", "lm", retrieval="passkey_multi", **PASSKEY),
    TaskSpec("copy", "lm", retrieval="copy", **dict(PASSKEY, main_metrics=("loss", "token_accuracy"))),
    # RULER-style (papa.data.ruler): several look-ups, the same scoring
    TaskSpec("multikey", "lm", retrieval="multikey", **PASSKEY),
    TaskSpec("multivalue", "lm", retrieval="multivalue", **PASSKEY),
    TaskSpec("vartrack", "lm", retrieval="vartrack", **PASSKEY),
    TaskSpec("common_words", "lm", retrieval="common_words", **PASSKEY),
)}


def same_scripts(kind, other):
    """True when tasks of the two kinds run under the same scripts (lm runs under the sequence scripts)."""
    return KINDS[kind]["scripts"] == KINDS[other]["scripts"]


def task_names(kind=None):
    """The registered task names (that the scripts of `kind` run), in registry order."""
    return [name for name, spec in TASKS.items() if kind is None or same_scripts(spec.kind, kind)]


def _squash(name):
    return str(name).lower().replace("-", "").replace("_", "")


def get_task(name, kind=None):
    """The `TaskSpec` for a task name ('SST-2', 'CoLA', 'sts_b' ...), or a PapaError listing the valid ones.

    With `kind`, a task that other scripts run is an error that names the right command. A TaskSpec is
    returned as it is.
    """
    if isinstance(name, TaskSpec):
        spec = name
    else:
        valid = ", ".join(task_names(kind))
        if name is None:
            raise PapaError(f"--task_name is required; one of: {valid}")
        spec = {_squash(n): s for n, s in TASKS.items()}.get(_squash(name))
        if spec is None:
            raise PapaError(f"unknown task {name!r}; valid tasks: {valid}")
    if kind is not None and not same_scripts(spec.kind, kind):
        avgs_script, script = KINDS[spec.kind]["scripts"]
        raise PapaError(f"{spec.name} is a {spec.kind}-classification task; use {script} / {avgs_script} "
                        f"(valid tasks here: {', '.join(task_names(kind))})")
    return spec
