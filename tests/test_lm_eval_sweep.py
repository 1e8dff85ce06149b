"""The sweep's --lm_eval_tasks end to end on a tiny decoder: every k and every control scored by lm-eval in its
probing run, its values and standard errors in results.csv and results.md, the changes against k = 0 recomputed
from the runs' per-document files, lm_eval.png; and the clear error for a task without an LM head."""

import csv
import json

import pytest

from conftest import run_command, script
from lm_eval_fixtures import needs_lm_eval
from lm_fixtures import save_tiny_lm
from papa.evaluation.sample_metrics import metric_value, relative

T = 16


@needs_lm_eval
@pytest.mark.slow
def test_sweep_scores_every_k_and_control_with_lm_eval_tasks(tmp_path, shared_data):
    model = save_tiny_lm("llama", tmp_path / "llama")
    out = tmp_path / "sweep"
    run_command(script("run_papa_sweep.py") + [
        "--task_name", "lm_mrpc", "--model_name_or_path", model, "--data_dir", shared_data,
        "--max_train_samples", "8", "--max_eval_samples", "4", "--max_seq_length", str(T),
        "--static_heads_nums", "0", "6", "--controls", "uniform", "--bootstrap_samples", "50",
        "--lm_eval_tasks", "papa_wnli", "papa_lm_qnli", "--lm_eval_limit", "5", "--output_dir", out])
    scores = {}
    for run in ("k_0", "k_6", "uniform_k_6"):
        scores[run] = json.loads((out / run / "lm_eval_results.json").read_text())
        assert scores[run]["documents"] == {"papa_wnli": 5, "papa_lm_qnli": 5}
    rows = {row["k"]: row for row in csv.DictReader(open(out / "results.csv"))}
    for run, prefix in (("k_6", ""), ("uniform_k_6", "uniform_")):
        for task, metric in (("papa_wnli", "acc"), ("papa_lm_qnli", "word_perplexity")):
            column = f"{prefix}lmeval_{task}_{metric}"
            assert float(rows["6"][column]) == pytest.approx(scores[run]["results"][task][metric])
            if metric == "acc":
                stderr = scores[run]["results"][task][f"{metric}_stderr"]
                assert float(rows["6"][column + "_stderr"]) == pytest.approx(stderr)
            # the change against k = 0 from the per-document files, as lm-eval aggregates them
            per_doc = {}
            for name in (run, "k_0"):
                lines = (out / name / "lm_eval_samples.jsonl").read_text().splitlines()
                per_doc[name] = [json.loads(x)[metric] for x in lines if json.loads(x)["task"] == task]
            want = relative(metric_value(metric, per_doc[run]), metric_value(metric, per_doc["k_0"]), metric)
            got = rows["6"][f"rel_change_{column}"]
            if want is None:
                assert got == ""
            else:
                assert float(got) == pytest.approx(want)
    ppl0, ppl6 = (scores[r]["results"]["papa_lm_qnli"]["word_perplexity"] for r in ("k_0", "k_6"))
    assert ppl0 != ppl6  # the constant heads change what lm-eval measures
    md = (out / "results.md").read_text()
    assert "## lm-eval tasks" in md and "| uniform | 6 |" in md and "| PAPA | 0 |" in md
    assert (out / "lm_eval.png").read_bytes()[:4] == b"\x89PNG"


@needs_lm_eval
def test_lm_eval_tasks_need_an_lm_task(tmp_path):
    proc = run_command(script("run_papa_sweep.py") + ["--task_name", "repeat", "--lm_eval_tasks", "papa_sst2",
                                                      "--output_dir", tmp_path / "out"], check=False)
    assert proc.returncode != 0 and "--lm_eval_tasks scores a decoder's own LM head" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()
