"""The long-context retrieval tasks (papa.data.retrieval) and their scoring (papa.families.lm_head): the generator is
deterministic for a seed, the key sits where the depth says, every example is exactly T tokens with only the answer
labelled; the scores are checked against a direct computation from the model's full logits and against greedy
`generate`."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from lm_fixtures import make_tokenizer, save_tiny_lm, scored_and_generated

from papa.data.retrieval import (ANSWER, DEPTHS, FIXED_FILLER, INTRO, IGNORE, KEYS, NEEDLE, QUESTION,
                                 check_retrieval_flags, filler_sentences, make_examples, word_tokens)
from papa.data.tasks import get_task
from papa.errors import PapaError
from papa.families.lm_head import example_losses, example_scores, final_hidden, output_logits
from papa.runs.metrics import compute_lm_metrics
from papa.reporting.intervals import resampled_metric


@pytest.fixture(scope="module")
def tokenizer():
    return make_tokenizer()


def encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def find(sequence, part):
    """The start of the first occurrence of `part` in `sequence`, or -1."""
    for i in range(len(sequence) - len(part) + 1):
        if sequence[i:i + len(part)] == part:
            return i
    return -1


@pytest.mark.parametrize("kind", ["passkey", "passkey_multi", "copy"])
def test_the_generator_is_deterministic_and_each_example_is_the_same_at_every_length(tokenizer, kind):
    first = make_examples(kind, tokenizer, 1024, 6, "validation")
    assert first == make_examples(kind, tokenizer, 1024, 6, "validation")  # the same seed: the same examples
    assert first[:3] == make_examples(kind, tokenizer, 1024, 3, "validation")  # example i does not depend on count
    assert first != make_examples(kind, tokenizer, 1024, 6, "validation", seed=1)
    assert first != make_examples(kind, tokenizer, 1024, 6, "train")  # the splits are other draws
    if kind != "copy":  # the same key and depth at another length
        shorter = make_examples(kind, tokenizer, 700, 6, "validation")
        assert [e.key for e in shorter] == [e.key for e in first]
        assert [round(e.depth * 4) for e in shorter] == [round(e.depth * 4) for e in first]


@pytest.mark.parametrize("seq_len", [400, 1000])
def test_a_passkey_example_is_t_tokens_with_the_key_where_the_depth_says(tokenizer, seq_len):
    examples = make_examples("passkey", tokenizer, seq_len, 10, "validation")
    intro = encode(tokenizer, INTRO)
    sentence = max(len(encode(tokenizer, s)) for s in FIXED_FILLER)
    for i, e in enumerate(examples):
        question = encode(tokenizer, QUESTION)
        assert len(e.input_ids) == len(e.labels) == seq_len
        answer = encode(tokenizer, ANSWER.format(key=e.key))
        assert tokenizer.decode(answer[:1]) == " "  # this tokenizer writes the space as a token: the prompt's last
        question, answer = question + answer[:1], answer[1:]
        assert tokenizer.decode(answer) == e.key and e.key.isdigit() and len(e.key) == 5 and e.key[0] != "0"
        # only the answer is labelled, and it ends the example
        assert e.labels[:-len(answer)] == [IGNORE] * (seq_len - len(answer)) and e.labels[-len(answer):] == answer
        assert e.input_ids[-len(answer):] == answer
        assert e.input_ids[-len(answer) - len(question):-len(answer)] == question
        assert e.input_ids[:len(intro)] == intro  # no BOS: this tokenizer adds none
        needle = encode(tokenizer, NEEDLE.format(key=e.key))
        start = find(e.input_ids, needle)
        assert start >= len(intro) and tuple(e.needle) == (start, start + len(needle))  # the span the answer copies
        # the needle starts at the filler position the depth names, to within a sentence
        budget = seq_len - len(intro) - len(needle) - len(question) - len(answer)
        assert abs((start - len(intro)) - DEPTHS[i % len(DEPTHS)] * budget) <= sentence
        assert e.depth == pytest.approx((start - len(intro)) / budget)
    assert [e.depth for e in examples][0] == 0.0 and examples[4].depth == 1.0  # right after the intro; before the question
    assert find(examples[0].input_ids, encode(tokenizer, NEEDLE.format(key=examples[0].key))) == len(intro)


def test_passkey_multi_hides_distinct_keys_and_asks_for_one(tokenizer):
    for e in make_examples("passkey_multi", tokenizer, 1200, 5, "validation"):
        text = tokenizer.decode(e.input_ids)
        keys = [word.strip(".") for word in text.split() if word.strip(".").isdigit()]
        distinct = list(dict.fromkeys(keys))
        assert len(distinct) == KEYS and e.key in distinct and keys[-1] == e.key  # the answer is the asked key
        asked = text.split("What is the pass key of the ")[1].split(" door")[0]
        assert f"The pass key of the {asked} door is {e.key}." in text


def test_copy_repeats_random_word_tokens_and_scores_the_second_copy(tokenizer):
    vocabulary = set(word_tokens(tokenizer))
    for seq_len in (101, 100):  # an odd remainder gets one more random token first
        for e in make_examples("copy", tokenizer, seq_len, 3, "validation"):
            half = seq_len // 2
            assert len(e.input_ids) == seq_len and set(e.input_ids) <= vocabulary
            assert e.input_ids[-half:] == e.input_ids[-2 * half:-half] and e.needle == (seq_len - 2 * half, seq_len - half)
            scored = [i for i, y in enumerate(e.labels) if y != IGNORE]
            assert scored == list(range(seq_len - half + 1, seq_len))  # the second copy but its first token
            assert [e.labels[i] for i in scored] == e.input_ids[seq_len - half + 1:]


def test_natural_filler_reads_each_splits_own_sentences(tokenizer, shared_data):
    sentences = filler_sentences("qnli", str(shared_data), ["train", "validation"])
    assert not set(sentences["train"]) & set(sentences["validation"]) and len(sentences["validation"]) > 100
    examples = make_examples("passkey", tokenizer, 600, 3, "validation", sentences["validation"])
    text = tokenizer.decode(examples[1].input_ids)
    assert "The grass is green" not in text and f"The pass key is {examples[1].key}." in text
    with pytest.raises(PapaError, match="--filler qnli reads .* pass --data_dir"):
        filler_sentences("qnli", None, ["train"])


def test_bad_retrieval_flags_are_refused(tokenizer):
    with pytest.raises(PapaError, match="too short for this task"):
        make_examples("passkey", tokenizer, 40, 1, "train")
    with pytest.raises(PapaError, match="--filler shapes the retrieval tasks' data"):
        check_retrieval_flags(get_task("lm_qnli"), "qnli", None)
    with pytest.raises(PapaError, match="copy task has no filler"):
        check_retrieval_flags(get_task("copy"), "fixed", [0.5])
    with pytest.raises(PapaError, match="0 to 1"):
        check_retrieval_flags(get_task("passkey"), "fixed", [1.5])
    check_retrieval_flags(get_task("passkey"), "mrpc", [0.1, 0.9])


# ----------------------------------------------------------------------------- scoring


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    folder = save_tiny_lm("llama", tmp_path_factory.mktemp("lm"))
    return AutoModelForCausalLM.from_pretrained(folder).eval()


def by_hand(logits, labels):
    """Per example (nll sum, scored tokens, argmax hits), by loops over the model's full (B, T, V) logits."""
    out = []
    for b in range(labels.shape[0]):
        nll = count = hits = 0.0
        for t in range(1, labels.shape[1]):
            y = int(labels[b, t])
            if y == IGNORE:
                continue
            row = logits[b, t - 1].double()
            nll -= float(row.log_softmax(-1)[y])
            count += 1
            hits += float(int(row.argmax()) == y)
        out.append((nll, count, hits))
    return torch.tensor(out, dtype=torch.float64)


def test_scores_equal_a_direct_computation_from_the_full_logits(tiny_lm):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, tiny_lm.config.vocab_size, (3, 20), generator=g)
    labels = torch.full_like(ids, IGNORE)
    labels[0, -4:] = ids[0, -4:]  # an answer at the end
    labels[1, 5:9] = ids[1, 5:9]  # one in the middle
    labels[2, 1:] = ids[2, 1:]  # every position, as plain lm
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    with torch.no_grad():
        logits = tiny_lm(**inputs).logits
        scores = example_scores(tiny_lm, inputs, labels, chunk_bytes=8 * tiny_lm.config.vocab_size * 3)  # chunks of 3
    torch.testing.assert_close(scores, by_hand(logits, labels), rtol=1e-12, atol=1e-12)  # float64 both
    # the ranker's loss: the mean over each example's scored tokens, with autograd, the model's own loss per example
    losses = example_losses(tiny_lm, inputs, labels)
    for b in range(3):
        own = tiny_lm(input_ids=ids[b:b + 1], labels=labels[b:b + 1]).loss
        torch.testing.assert_close(losses[b], own, rtol=1e-5, atol=1e-6)
    losses.sum().backward()
    assert tiny_lm.model.embed_tokens.weight.grad is not None
    tiny_lm.zero_grad()


def test_exact_match_is_greedy_decoding_giving_the_answer(tiny_lm):
    """The answer is the model's own greedy continuation (exact match 1), or that with its last token changed
    (every token but the last is the argmax): as `generate` decides."""
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(3, tiny_lm.config.vocab_size, (1, 12), generator=g)
    generated = tiny_lm.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=5, do_sample=False,
                                 pad_token_id=0)
    wrong = generated.clone()
    wrong[0, -1] = (wrong[0, -1] + 1) % tiny_lm.config.vocab_size
    for ids, hits in ((generated, 5), (wrong, 4)):
        labels = torch.full_like(ids, IGNORE)
        labels[:, 12:] = ids[:, 12:]
        with torch.no_grad():
            scores = example_scores(tiny_lm, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, labels)
        assert scores[0, 1:].tolist() == [5, hits]
    metrics = compute_lm_metrics([1.0, 2.0], [5, 5], correct=[5, 4])
    assert metrics["exact_match"] == 0.5 and metrics["token_accuracy"] == 0.9 and metrics["loss"] == 0.3


def test_the_bootstrap_recomputes_exact_match_and_token_accuracy():
    tokens, nll, correct = [6, 6, 6, 6], [0.1, 3.0, 0.2, 9.0], [6, 2, 6, 5]
    task = get_task("passkey")
    every = np.arange(4)[None]  # one resample: every example once
    assert resampled_metric(task, "exact_match", tokens, nll, correct)(every) == pytest.approx([0.5])
    assert resampled_metric(task, "token_accuracy", tokens, nll, correct)(every) == pytest.approx([19 / 24])
    assert resampled_metric(task, "loss", tokens, nll, correct)(np.array([[0, 0, 2, 2]])) == pytest.approx([0.6 / 24])
    assert math.isclose(resampled_metric(task, "perplexity", tokens, nll)(every)[0], math.exp(12.3 / 24))


def test_output_logits_is_the_models_own_head_for_every_decoder_family():
    from tiny_decoders import DECODER_NAMES, tiny_decoder

    ids = torch.randint(3, 120, (2, 9), generator=torch.Generator().manual_seed(3))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    for name in DECODER_NAMES:
        model = tiny_decoder(name)
        if name == "gemma3_text":  # a soft-capped head, as Gemma 2's checkpoints have
            model.config.final_logit_softcapping = 3.0
        with torch.no_grad():
            torch.testing.assert_close(output_logits(model, final_hidden(model, inputs)), model(**inputs).logits,
                                       msg=lambda m: f"{name}: {m}")


# ----------------------------------------------------------------------------- lm-eval's documents


def test_lm_eval_documents_are_the_examples_as_text(tokenizer, tmp_path):
    """papa_passkey / papa_passkey_multi / papa_copy read these: the prompt and the answer of each example, in the
    tokenizer the metadata names, and an error that says how to name one."""
    from papa.evaluation.data import retrieval_documents

    tokenizer.save_pretrained(tmp_path / "tok")
    docs = retrieval_documents("passkey", seq_len=300, count=4, tokenizer=str(tmp_path / "tok"))["validation"]
    examples = make_examples("passkey", tokenizer, 300, 4, "validation")
    assert docs["key"] == [e.key for e in examples] and docs["depth"] == [e.depth for e in examples]
    for doc, e in zip(docs, examples):
        assert doc["target"] == " " + e.key and doc["context"].endswith("What is the pass key? The pass key is")
        assert tokenizer(doc["context"] + doc["target"])["input_ids"] == e.input_ids  # this tokenizer: a round trip
    copies = retrieval_documents("copy", seq_len=60, count=2, pretrained=str(tmp_path / "tok"))["validation"]
    for doc, e in zip(copies, make_examples("copy", tokenizer, 60, 2, "validation")):
        assert (doc["context"], doc["target"]) == (tokenizer.decode(e.input_ids[:30]), tokenizer.decode(e.input_ids[30:]))
    with pytest.raises(PapaError, match="tokenizer.*--metadata"):
        retrieval_documents("passkey")


# ----------------------------------------------------------------------------- the retrieval-head ranker


@pytest.mark.parametrize("name", ["llama", "gemma3_text", "gemma2"])  # grouped K/V; windows and q/k norms; soft-capping
def test_retrieval_scores_equal_a_count_over_the_stock_models_attentions(name):
    """Wu et al.'s score from the patched model's answer rows against the stock eager model's full attention
    matrices: per head, the fraction of answer tokens whose strongest key is in the needle and holds that token."""
    import copy

    from tiny_decoders import H, L, tiny_decoder

    from papa.method.attention import patch_model
    from papa.method.rankers import rank
    from papa.method.scorers import Objective, make_units
    from papa.method.retrieval_heads import retrieval_scores

    stock = tiny_decoder(name).float()
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(3, 12, (2, 12), generator=g)  # a small vocabulary: answer tokens recur in the needle
    labels = torch.full_like(ids, IGNORE)
    labels[:, -3:] = ids[:, -3:]
    needle = torch.tensor([[1, 6], [2, 9]])
    ids[0, 1:6], ids[1, 2:9] = ids[0, -3:].repeat(2)[:5], ids[1, -3:].repeat(3)[:7]  # the answer's tokens inside it
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels, "needle": needle}
    with torch.no_grad():
        attentions = stock(input_ids=ids, attention_mask=batch["attention_mask"], output_attentions=True).attentions
    hard, soft = torch.zeros(L, H, dtype=torch.float64), torch.zeros(L, H, dtype=torch.float64)
    count = 0
    for b in range(2):
        for t in range(ids.shape[1] - 1):
            y = int(labels[b, t + 1])
            if y == IGNORE:
                continue
            count += 1
            for layer in range(L):
                for head in range(H):
                    row = attentions[layer][b, head, t].double()
                    source = [j for j in range(needle[b, 0], needle[b, 1]) if ids[b, j] == y]
                    hard[layer, head] += float(int(row.argmax()) in source)
                    soft[layer, head] += float(sum(row[j] for j in source))
    mixed = patch_model(copy.deepcopy(stock), torch.rand(L, H, 12, 12, generator=g), mix_all_heads=True)
    objective = Objective(mixed, [batch], "lm", scored_only=True)
    got_hard, got_soft = retrieval_scores(objective)
    assert hard.sum() > 0  # some head retrieves: the test can fail
    torch.testing.assert_close(got_hard, hard / count)
    torch.testing.assert_close(got_soft, soft / count, rtol=1e-4, atol=1e-5)
    scored = rank("retrieval", objective, make_units(L, H))
    assert scored.scores == sorted(scored.scores)  # least retrieving first
    flat_hard, flat_soft = got_hard.flatten().tolist(), got_soft.flatten().tolist()
    best = max(range(L * H), key=lambda u: (flat_hard[u], flat_soft[u], u))
    assert scored.units[-1] == [divmod(best, H)] and scored.extra["soft"][-1] == flat_soft[best]


# ----------------------------------------------------------------------------- the bundled decoders


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_on_the_bundled_decoders_exact_match_is_what_greedy_generate_gives(name):
    """The answer is the key's five digits (the prompt ends with the space before them, as the tokenizer writes
    the text), and an example counts as found exactly when `generate` (greedy) continues the prompt with them."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from papa.models.bundled import local_model_path

    try:
        path = local_model_path(name)
    except PapaError as err:
        pytest.skip(f"the bundled {name} cannot be had here: {err}")
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    examples = make_examples("passkey", tok, 320, 5, "validation") + make_examples("passkey_multi", tok, 320, 5,
                                                                                     "validation")
    found = []
    for e in examples:
        scored, generated, answer = scored_and_generated(model, e, tok.eos_token_id)
        assert tok.decode(answer) == e.key and tok.decode(e.input_ids[-len(answer) - 1:-len(answer)]).isspace()
        found.append(generated == answer)
        assert (scored == len(answer)) == found[-1], (name, e.key, tok.decode(generated))
    assert any(found)  # the stock model finds keys at this length: the comparison is not vacuous
