"""lm-eval's own `lm_eval` command with `--model papa`, as a user runs it after `pip install -e '.[lm-eval]'`: a
subprocess of the installed script, the tiny PAPA decoder, and tasks given as the project's YAML files (the way
`lm_eval` itself finds the model type: papa.evaluation.tasks/papa_tasks.py), on files made here: an MNLI dev file
in GLUE's 16-column layout (../shared/data has none) and a text for the rolling perplexity. Each MNLI document's
three log-likelihoods are checked against the patched model's own (lm_eval_fixtures.loglikelihood), so the
command scored the model with the first K heads constant, the prompt of lm-eval's MNLI task and its label order."""

import json
import shutil
import sys
from pathlib import Path

import pytest

from conftest import run_command
from lm_eval_fixtures import loglikelihood, needs_lm_eval, reference_model, save_papa_files, tokenizer_of
from papa.evaluation import TASKS_DIR

K = 5
MNLI_HEADER = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
               "sentence1_parse", "sentence2_parse", "sentence1", "sentence2", "label1", "label2", "label3", "label4",
               "label5", "gold_label"]
MNLI_ROWS = [("The cat sat on the mat.", "A cat is sitting", "entailment"),
             ("Nobody came to the party.", "The party was crowded.", "contradiction"),
             ("He bought a car.", "The car is red.", "neutral")]
CHOICES = {"entailment": 0, "neutral": 1, "contradiction": 2}  # True, Neither, False: lm-eval's glue/mnli order


def lm_eval_script():
    """The `lm_eval` console script of this interpreter's environment, or None."""
    script = Path(sys.executable).parent / "lm_eval"
    return str(script) if script.is_file() else shutil.which("lm_eval")


def write_mnli(root):
    """root/glue/MNLI/dev_matched.tsv with MNLI_ROWS, every other column filled as GLUE's file has them."""
    folder = root / "glue" / "MNLI"
    folder.mkdir(parents=True)
    lines = ["\t".join(MNLI_HEADER)]
    for i, (premise, hypothesis, label) in enumerate(MNLI_ROWS):
        fields = [str(i), str(100 + i), f"{100 + i}e", "fiction", "( x )", "( y )", "(ROOT x)", "(ROOT y)",
                  premise, hypothesis, label, label, label, label, label, label]
        lines.append("\t".join(fields))
    (folder / "dev_matched.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def samples_of(out, task):
    """The per-document lines lm-eval wrote with --log_samples for `task`, by doc_id."""
    (path,) = out.rglob(f"samples_{task}_*.jsonl")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {row["doc_id"]: row for row in rows}


@pytest.mark.slow
@needs_lm_eval
@pytest.mark.skipif(lm_eval_script() is None, reason="lm-eval's lm_eval command is not on this environment's path")
def test_lm_evals_own_command_runs_the_papa_model_on_task_files(tmp_path):
    model, avgs, sort = save_papa_files(tmp_path)
    write_mnli(tmp_path / "data")
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog\nsome other words to score here\n")
    out = tmp_path / "out"
    tasks = ",".join(f"{TASKS_DIR}/{name}.yaml" for name in ("papa_mnli", "papa_text"))
    run_command([lm_eval_script(), "--model", "papa", "--model_args",
                 f"pretrained={model},static_heads_dir={avgs},sorting_heads_dir={sort},static_heads_num={K}",
                 "--tasks", tasks, "--device", "cpu", "--batch_size", "2", "--log_samples", "--output_path", out,
                 "--metadata", json.dumps({"data_dir": str(tmp_path / "data"), "text_file": str(text)})])
    (written,) = out.rglob("results_*.json")
    results = json.loads(written.read_text())["results"]
    assert results["papa_text"]["word_perplexity,none"] > 1

    ref, tok = reference_model(model, avgs, sort, K), tokenizer_of(model)
    stock = reference_model(model, avgs, sort, 0)
    samples, correct, differs = samples_of(out, "papa_mnli"), [], False
    assert sorted(samples) == list(range(len(MNLI_ROWS)))
    for doc_id, (premise, hypothesis, label) in enumerate(MNLI_ROWS):
        prompt = f"{premise}\nQuestion: {hypothesis.strip()}{'' if hypothesis.endswith('.') else '.'} " \
                 "True, False or Neither?\nAnswer:"
        want = [loglikelihood(ref, tok, prompt, " " + choice)[0] for choice in ("True", "Neither", "False")]
        got = [float(resp[0]) for resp in samples[doc_id]["filtered_resps"]]
        assert got == pytest.approx(want, abs=1e-4), doc_id
        differs |= abs(loglikelihood(stock, tok, prompt, " True")[0] - got[0]) > 1e-3
        correct.append(float(want.index(max(want)) == CHOICES[label]))
    assert differs, "the K constant heads changed no log-likelihood: the command ran the stock model"
    assert results["papa_mnli"]["acc,none"] == pytest.approx(sum(correct) / len(correct))
