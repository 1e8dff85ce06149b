"""The RULER-style tasks (papa.data.ruler): deterministic for a seed, exactly T tokens with only the answer labelled,
the answer the one an independent reading of the example's text gives (regular expressions over the decoded prompt:
the asked key's value, every value of the key in text order, the chain resolved from the asked value, the ten words
counted most often), the needles where the depth says, and the scoring (papa.families.lm_head) against greedy
`generate` on the bundled SmolLM2. The real tokenizers (SmolLM2's, Gemma-3's) come from papa.models.bundled; where
one cannot be had its tests skip."""

import re
from collections import Counter

import pytest
import torch

from papa.data.retrieval import IGNORE, check_retrieval_flags, make_examples
from papa.data.ruler import COMMON, CWE_HEAD, HOPS, NEEDLES, VT_HEAD, list_words
from papa.data.tasks import get_task
from papa.errors import PapaError

TASKS = ("multikey", "multivalue", "vartrack", "common_words")
NEEDLE = re.compile(r"One of the special magic numbers for ([a-z]+-[a-z]+) is: (\d{7})\.")


def bundled_tokenizer(name):
    from transformers import AutoTokenizer

    from papa.models.bundled import local_model_path

    try:
        return AutoTokenizer.from_pretrained(local_model_path(name))
    except PapaError as err:
        pytest.skip(f"the bundled {name} cannot be had here: {err}")


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def tokenizer(request):
    return bundled_tokenizer(request.param)


def answer_text(tokenizer, example):
    return tokenizer.decode([y for y in example.labels if y != IGNORE])


def prompt_text(tokenizer, example):
    answer = sum(1 for y in example.labels if y != IGNORE)
    return tokenizer.decode(example.input_ids[:-answer], skip_special_tokens=True)


@pytest.mark.parametrize("kind", TASKS)
def test_each_task_is_deterministic_and_t_tokens_with_only_its_answer_labelled(tokenizer, kind):
    for seq_len in (900, 4096):
        first = make_examples(kind, tokenizer, seq_len, 4, "validation")
        assert first == make_examples(kind, tokenizer, seq_len, 4, "validation")
        assert first[:2] == make_examples(kind, tokenizer, seq_len, 2, "validation")  # example i: not count's
        assert first != make_examples(kind, tokenizer, seq_len, 4, "validation", seed=1)
        assert first != make_examples(kind, tokenizer, seq_len, 4, "train")
        for e in first:
            assert len(e.input_ids) == len(e.labels) == seq_len
            scored = [i for i, y in enumerate(e.labels) if y != IGNORE]
            assert scored == list(range(seq_len - len(scored), seq_len))  # the answer ends the example
            assert [e.labels[i] for i in scored] == e.input_ids[-len(scored):]


def test_multikey_asks_one_of_four_keys_and_the_answer_is_its_value(tokenizer):
    for i, e in enumerate(make_examples("multikey", tokenizer, 1500, 5, "validation")):
        prompt = prompt_text(tokenizer, e)
        needles = NEEDLE.findall(prompt)
        assert len(needles) == NEEDLES and len({k for k, _ in needles}) == NEEDLES
        asked = re.search(r"What is the special magic number for (\S+) mentioned", prompt).group(1)
        assert asked == e.key and prompt.rstrip().endswith(f"The special magic number for {asked} mentioned in the provided "
                                                  "text is")
        assert answer_text(tokenizer, e).strip() == dict(needles)[asked]
        span = tokenizer.decode(e.input_ids[e.needle[0]:e.needle[1]])
        assert NEEDLE.search(span).groups() == (asked, dict(needles)[asked])


def test_multivalue_asks_every_value_in_text_order(tokenizer):
    for e in make_examples("multivalue", tokenizer, 1500, 5, "validation"):
        prompt = prompt_text(tokenizer, e)
        needles = NEEDLE.findall(prompt)
        assert len(needles) == NEEDLES and len({k for k, _ in needles}) == 1
        assert f"What are all the special magic numbers for {needles[0][0]} mentioned" in prompt
        assert answer_text(tokenizer, e).strip() == ", ".join(v for _, v in needles)


def resolve_chain(text, value):
    """Every variable bound to `value`, in the order the assignments resolve, read from the text's VAR lines."""
    bound, names = {value}, []
    assignments = re.findall(r"VAR ([A-Z]+) = (?:VAR )?([A-Z]+|\d+)", text)
    changed = True
    while changed:
        changed = False
        for name, source in assignments:
            if source in bound and name not in bound:
                bound.add(name)
                names.append(name)
                changed = True
    return names


def test_vartrack_asks_every_name_bound_to_the_value_in_chain_order(tokenizer):
    for i, e in enumerate(make_examples("vartrack", tokenizer, 1500, 5, "validation")):
        prompt = prompt_text(tokenizer, e)
        task = prompt[prompt.rindex(VT_HEAD.strip()):]  # after the worked example
        value = re.search(r"assigned the value (\d+) in the text above", task).group(1)
        names = resolve_chain(task, value)
        assert len(names) == HOPS + 1 and all(len(n) == 5 for n in names)
        assert answer_text(tokenizer, e).split() == names
        worked = prompt[:prompt.rindex(VT_HEAD.strip())]  # the one-shot: its own chain, answered
        shot_value = re.search(r"assigned the value (\d+) in the text above", worked).group(1)
        assert worked.rstrip().endswith(" ".join(resolve_chain(worked, shot_value)))
        # the first assignment where the depth says, the others after it
        first = tokenizer.decode(e.input_ids[e.needle[0]:e.needle[1]])
        assert first.strip() == f"VAR {names[0]} = {value}." and 0 <= e.depth <= 1
        assert e.depth == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0][i], abs=0.05)


def test_common_words_asks_the_ten_most_frequent_words_in_order_of_appearance(tokenizer):
    vocabulary = set(list_words(tokenizer))
    for seq_len in (1500, 4096):  # below 4 096: 6 and 1 repeats; from it on: 30 and 3 (RULER's)
        for e in make_examples("common_words", tokenizer, seq_len, 3, "validation"):
            prompt = prompt_text(tokenizer, e)
            listed = prompt[prompt.rindex(CWE_HEAD.strip()):].split("\n", 1)[1].rsplit("\nQuestion:", 1)[0]
            # every word of the list (the words are single tokens: the first item may have lost its number, never
            # a piece of its word)
            words = re.findall(r"[a-z]+", listed)
            counts = Counter(words)
            top = [w for w, _ in counts.most_common(COMMON)]
            assert counts.most_common()[COMMON - 1][1] > counts.most_common()[COMMON][1]  # ten stand out
            expected = [w for w in dict.fromkeys(words) if w in top]
            answer = re.findall(r"(\d+)\. ([a-z]+)", answer_text(tokenizer, e))
            assert [int(n) for n, _ in answer] == list(range(1, COMMON + 1))
            assert [w for _, w in answer] == expected and set(expected) <= vocabulary
            assert e.depth is None


def test_flags_and_lengths_the_tasks_refuse(tokenizer):
    with pytest.raises(PapaError, match="too short for this task"):
        make_examples("vartrack", tokenizer, 200, 1, "train")
    with pytest.raises(PapaError, match="common_words task has no filler"):
        check_retrieval_flags(get_task("common_words"), "qnli", None)
    check_retrieval_flags(get_task("multikey"), "mrpc", [0.5])


def test_lm_eval_documents_of_each_task_are_its_examples_as_text(tmp_path):
    from papa.evaluation.data import retrieval_documents

    tokenizer = bundled_tokenizer("smollm2")
    tokenizer.save_pretrained(tmp_path / "tok")
    for kind in TASKS:
        docs = retrieval_documents(kind, seq_len=1200, count=2, tokenizer=str(tmp_path / "tok"))["validation"]
        for doc, e in zip(docs, make_examples(kind, tokenizer, 1200, 2, "validation")):
            assert doc["target"].strip() == answer_text(tokenizer, e).strip()
            assert doc["context"] + doc["target"] == tokenizer.decode(e.input_ids)


def test_the_scores_are_greedy_decoding_on_smollm2():
    """Each task's exact match from one teacher-forced forward against `generate`'s greedy answer, on the real
    model, a few examples each (papa.families.lm_head.example_scores)."""
    from transformers import AutoModelForCausalLM

    from lm_fixtures import scored_and_generated

    from papa.models.bundled import local_model_path

    tokenizer = bundled_tokenizer("smollm2")
    model = AutoModelForCausalLM.from_pretrained(local_model_path("smollm2"), dtype=torch.float32).eval()
    outcomes = []
    for kind in TASKS:
        for e in make_examples(kind, tokenizer, 700, 3, "validation"):
            scored, generated, answer = scored_and_generated(model, e, tokenizer.eos_token_id)
            outcomes.append(generated == answer)
            assert (scored == len(answer)) == outcomes[-1], (kind, tokenizer.decode(generated))
    assert any(outcomes) and not all(outcomes)  # both outcomes occur: the comparison is not vacuous


@pytest.mark.slow
def test_the_sweep_runs_a_ruler_task_end_to_end(tmp_path):
    """The sweep (the four scripts' stages: Toeplitz averages, a taylor ranking of K/V groups, k = 0 and all groups)
    on multikey with a tiny Llama: each k's eval_results.json holds the retrieval metrics, its predictions each
    example's answer."""
    import json

    from conftest import run_command, script
    from lm_fixtures import save_tiny_lm

    model = save_tiny_lm("llama", tmp_path / "llama")
    config = json.loads((tmp_path / "llama" / "config.json").read_text())
    (tmp_path / "llama" / "config.json").write_text(json.dumps(dict(config, max_position_embeddings=1024)))  # rotary
    out = tmp_path / "sweep"
    run_command(script("run_papa_sweep.py") + [
        "--task_name", "multikey", "--model_name_or_path", model, "--max_seq_length", "600", "--rank_kv_groups",
        "--constants", "toeplitz", "--max_train_samples", "2", "--max_eval_samples", "3", "--static_heads_nums", "0",
        "12", "--bootstrap_samples", "50", "--output_dir", out])
    for k in (0, 12):
        results = json.loads((out / f"k_{k}" / "eval_results.json").read_text())
        assert {"eval_exact_match", "eval_token_accuracy", "eval_loss"} <= set(results)
        assert 0 <= results["eval_exact_match"] <= 1
        predictions = [json.loads(line) for line in (out / f"k_{k}" / "eval_predictions.jsonl").read_text().splitlines()]
        assert len(predictions) == 3
    assert "multikey" in (out / "results.md").read_text()


def test_a_ranking_draws_its_examples_from_several_tasks_and_lengths(tmp_path, monkeypatch):
    """--ranker_tasks and --ranker_lengths: the ranking run's objective gets the first --ranker_max_samples training
    examples of each task at each length, one per batch, as papa.data.retrieval makes them, scored on the answer
    alone; the ranking is written as any other's."""
    import json

    from cli_fixtures import run_command
    from lm_fixtures import save_tiny_lm
    from transformers import AutoTokenizer

    import papa.runs.ranking as ranking

    model = save_tiny_lm("llama", tmp_path / "llama")
    config = json.loads((tmp_path / "llama" / "config.json").read_text())
    (tmp_path / "llama" / "config.json").write_text(json.dumps(dict(config, max_position_embeddings=1024)))
    seen = []
    real = ranking.Objective
    monkeypatch.setattr(ranking, "Objective", lambda *a, **k: seen.append((a, k)) or real(*a, **k))
    run_command("glue_avgs", ["--model_name_or_path", model, "--task_name", "passkey", "--max_length", "600",
                              "--max_train_samples", "2", "--constants", "toeplitz", "--output_dir", tmp_path / "avgs"])
    run_command("glue", ["--model_name_or_path", model, "--task_name", "passkey", "--do_train", "--max_seq_length",
                         "500", "--sort_calculating", "True", "--ranker", "taylor", "--constants", "toeplitz",
                         "--ranker_tasks", "passkey", "passkey_multi", "--ranker_lengths", "500", "600",
                         "--ranker_max_samples", "2", "--static_heads_dir", tmp_path / "avgs", "--report_to", "none",
                         "--output_dir", tmp_path / "sort"])
    (args, kwargs), = seen
    batches = args[1]
    tokenizer = AutoTokenizer.from_pretrained(model)
    expected = [e for kind in ("passkey", "passkey_multi") for length in (500, 600)
                for e in make_examples(kind, tokenizer, length, 2, "train")]
    assert [b["input_ids"].tolist() for b in batches] == [[e.input_ids] for e in expected]
    assert [b["labels"].tolist() for b in batches] == [[e.labels] for e in expected]
    assert kwargs["scored_only"] and len(json.loads((tmp_path / "sort" / "sorted_heads.json").read_text())) == 12
