"""The offline lm-eval tasks (papa.evaluation.tasks/*.yaml) on the real GLUE files in ../shared/data, with no
network: each document's accuracy against log-likelihoods computed here from the prompt of lm-eval's own GLUE
task; rolling perplexity against the model's own log-likelihoods of short documents; lm-eval's aggregates
against papa.evaluation.sample_metrics' recomputation from the per-document values; the data folder's errors."""

import math

import pytest

from lm_eval_fixtures import T, loglikelihood, logits_alone, needs_lm_eval, reference_model, save_papa_files, tokenizer_of
from papa.errors import PapaError
from papa.evaluation.data import glue_validation, text_documents
from papa.evaluation.sample_metrics import metric_value, paired_change

K, LIMIT = 5, 6
GLUE_TASKS = ["papa_sst2", "papa_cola", "papa_mrpc", "papa_qnli", "papa_wnli"]


@pytest.fixture(scope="module")
def scored(tmp_path_factory, shared_data):
    """The tiny PAPA model's scores on every GLUE task and the QNLI perplexity, first LIMIT documents."""
    from papa.evaluation.harness import PapaLM
    from papa.evaluation.scoring import evaluate_tasks

    files = save_papa_files(tmp_path_factory.mktemp("tasks"))
    lm = PapaLM(pretrained=files[0], static_heads_dir=files[1], sorting_heads_dir=files[2], static_heads_num=K,
                batch_size=4)
    return files, lm, evaluate_tasks(lm, GLUE_TASKS + ["papa_lm_qnli"], shared_data, LIMIT)


@needs_lm_eval
def test_sst2_accuracy_per_document_from_the_prompt_of_lm_evals_task(scored, shared_data):
    files, _, (results, samples, counts) = scored
    model, tok = reference_model(*files, K), tokenizer_of(files[0])
    docs = glue_validation("sst2", str(shared_data))["validation"]
    want = []
    for doc in docs.select(range(LIMIT)):
        prompt = f"{doc['sentence']}\nQuestion: Is this sentence positive or negative?\nAnswer:"
        lls = [loglikelihood(model, tok, prompt, " " + choice)[0] for choice in ("negative", "positive")]
        want.append(float(lls.index(max(lls)) == doc["label"]))
    assert [row["acc"] for row in sorted(samples["papa_sst2"], key=lambda r: r["doc_id"])] == want
    assert results["papa_sst2"]["acc"] == pytest.approx(sum(want) / LIMIT)
    assert counts == {t: LIMIT for t in GLUE_TASKS + ["papa_lm_qnli"]}


@needs_lm_eval
def test_every_task_has_lm_evals_metrics_and_their_recomputation_agrees(scored):
    _, _, (results, samples, _) = scored
    expected = {"papa_sst2": ["acc"], "papa_cola": ["mcc"], "papa_mrpc": ["acc", "f1"], "papa_qnli": ["acc"],
                "papa_wnli": ["acc"], "papa_lm_qnli": ["word_perplexity", "byte_perplexity", "bits_per_byte"]}
    for task, metrics in expected.items():
        for metric in metrics:
            if metric in ("acc", "mcc", "f1"):  # lm-eval gives no standard error for its perplexities
                assert results[task][f"{metric}_stderr"] >= 0, (task, metric)
            per_doc = [row[metric] for row in samples[task]]
            assert metric_value(metric, per_doc) == pytest.approx(results[task][metric], rel=1e-6, abs=1e-9), task
    assert results["papa_lm_qnli"]["word_perplexity"] > 1


@needs_lm_eval
def test_rolling_perplexity_of_short_documents_is_the_models_own(tmp_path):
    from papa.evaluation.harness import PapaLM
    from papa.evaluation.scoring import evaluate_tasks

    files = save_papa_files(tmp_path)
    text = tmp_path / "text.txt"
    text.write_text("the cat of the dog\na house\n\nthe dog is in the house\n")
    lm = PapaLM(pretrained=files[0], static_heads_dir=files[1], sorting_heads_dir=files[2], static_heads_num=K)
    results, samples, _ = evaluate_tasks(lm, ["papa_text"], metadata={"text_file": str(text)})
    model, tok = reference_model(*files, K), tokenizer_of(files[0])
    total_ll = total_words = 0
    for line in ("the cat of the dog", "a house", "the dog is in the house"):
        ids = [tok.eos_token_id] + tok(line, add_special_tokens=False)["input_ids"]  # lm-eval's prefix token first
        assert len(ids) <= T  # one window
        logp = logits_alone(model, ids[:-1], tok.pad_token_id).log_softmax(-1)
        total_ll += float(sum(logp[i, ids[i + 1]] for i in range(len(ids) - 1)))
        total_words += len(line.split())
    assert results["papa_text"]["word_perplexity"] == pytest.approx(math.exp(-total_ll / total_words), rel=1e-4)
    assert len(samples["papa_text"]) == 3


def test_data_folder_errors(shared_data, monkeypatch):
    monkeypatch.delenv("PAPA_DATA_DIR", raising=False)
    with pytest.raises(PapaError, match="--metadata '{\"data_dir\": \"DIR\"}' or the environment variable PAPA_DATA_DIR"):
        glue_validation("sst2")
    with pytest.raises(PapaError, match="not a folder"):
        glue_validation("sst2", data_dir=str(shared_data / "nowhere"))
    with pytest.raises(PapaError, match="no dev_matched.tsv"):  # the shared MNLI folder holds no data
        glue_validation("mnli", data_dir=str(shared_data))
    monkeypatch.setenv("PAPA_DATA_DIR", str(shared_data))
    wnli = glue_validation("wnli")["validation"]
    assert len(wnli) == 71 and set(wnli["label"]) == {0, 1}
    pages = text_documents("lm_qnli")["validation"]["page"]
    assert len(pages) > 10 and all(p.count(". ") >= 1 for p in pages[:-1])


def test_paired_change_of_hand_made_documents():
    values = {0: 1.0, 1: 1.0, 2: 0.0, 3: 1.0}
    reference = {0: 1.0, 1: 0.0, 2: 0.0, 3: 0.0, 4: 1.0}  # doc 4 is not shared
    change, low, high = paired_change("acc", values, reference, samples=200)
    assert change == pytest.approx((0.75 - 0.25) / 0.25)
    assert low <= change <= high
    ppl = paired_change("word_perplexity", {0: (-2.0, 1), 1: (-4.0, 1)}, {0: (-1.0, 1), 1: (-1.0, 1)}, samples=50)
    assert ppl[0] == pytest.approx(-(math.exp(3.0) - math.exp(1.0)) / math.exp(1.0))  # worse: negative
    assert metric_value("mcc", [(0, 0), (1, 1), (1, 0), (0, 0)]) == pytest.approx(0.5773502691896258)


@needs_lm_eval
def test_papa_lm_eval_command_runs_lm_evals_cli_with_the_papa_model(tmp_path, shared_data):
    """`python -m papa lm-eval` (papa-lm-eval): lm-eval's own command line sees the model type and the tasks."""
    import json
    import sys

    from conftest import run_command

    model, avgs, sort = save_papa_files(tmp_path)
    run_command([sys.executable, "-m", "papa", "lm-eval", "--model", "papa", "--model_args",
                 f"pretrained={model},static_heads_dir={avgs},sorting_heads_dir={sort},static_heads_num={K}",
                 "--tasks", "papa_wnli", "--limit", "3", "--metadata", json.dumps({"data_dir": str(shared_data)}),
                 "--device", "cpu", "--output_path", tmp_path / "out"])
    written = list((tmp_path / "out").rglob("results_*.json"))
    assert len(written) == 1
    results = json.loads(written[0].read_text())["results"]["papa_wnli"]
    assert 0 <= results["acc,none"] <= 1 and results["acc_stderr,none"] > 0


@needs_lm_eval
def test_the_retrieval_tasks_score_each_key_as_greedy_decoding_does(tmp_path):
    """papa_passkey, papa_multikey and papa_multivalue (loglikelihood: acc is lm-eval's is_greedy; every RULER-style
    task's documents on a real tokenizer: tests/test_ruler.py) and papa_passkey_generate (decoding, the first
    five-digit number) on the tiny decoder, k = 0: each document's acc against the model's own argmax over the
    answer, and the generated key against greedy decoding read off full forwards."""
    import torch

    from papa.evaluation.data import retrieval_documents
    from papa.evaluation.harness import PapaLM
    from papa.evaluation.scoring import evaluate_tasks

    files = save_papa_files(tmp_path)
    lm = PapaLM(pretrained=files[0], batch_size=1, max_length=512)
    metadata = {"seq_len": 260, "count": 3, "tokenizer": files[0]}
    results, samples, counts = evaluate_tasks(lm, ["papa_passkey", "papa_passkey_generate"], metadata=metadata)
    assert counts == {"papa_passkey": 3, "papa_passkey_generate": 3}
    ruler = ["papa_multikey", "papa_multivalue"]  # papa.data.ruler: longer prompts in this tokenizer (vartrack: 764 tokens)
    longer = dict(metadata, seq_len=500)
    _, ruler_samples, ruler_counts = evaluate_tasks(lm, ruler, metadata=longer)
    assert ruler_counts == {name: 3 for name in ruler}
    samples.update(ruler_samples)
    model, tok = reference_model(*files, 0), tokenizer_of(files[0])
    for name in ["papa_passkey", *ruler]:
        docs = retrieval_documents(name.removeprefix("papa_"), **(longer if name in ruler else metadata))["validation"]
        for row in sorted(samples[name], key=lambda r: r["doc_id"]):
            doc = docs[row["doc_id"]]
            context = tok(doc["context"], add_special_tokens=False)["input_ids"]
            whole = tok(doc["context"] + doc["target"], add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([whole[:-1]])).logits[0]
            answer = torch.tensor(whole[len(context):])
            assert row["acc"] == float(bool((logits[len(context) - 1:].argmax(-1) == answer).all())), name
    assert 0 <= results["papa_passkey_generate"]["exact_match"] <= 1
