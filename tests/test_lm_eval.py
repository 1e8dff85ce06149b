"""lm-eval's model type `papa` (papa.evaluation.harness) against the patched model's own logits, computed here one
request at a time (lm_eval_fixtures): log-likelihoods and greedy flags, requests longer than T (cut to their last
T tokens, as lm-eval cuts them for any model), generation from left-padded batches (each prompt at its real
positions), a model patched in memory, and the clear errors (lm-eval absent, a plain HFLM, bad arguments)."""

import sys

import pytest
import torch

from lm_eval_fixtures import T, greedy, loglikelihood, needs_lm_eval, reference_model, save_papa_files, tokenizer_of
from papa.errors import PapaError

K = 7  # of 12 heads: every layer has constant heads, some layers dynamic ones too

REQUESTS = [("the cat of the", " dog"), ("a dog", " is in the house and"), ("the", " a of"),
            ("house of the dog and the cat", " is"), ("a", " cat")]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return save_papa_files(tmp_path_factory.mktemp("papa_lm"))


def instances(kind, arguments):
    from lm_eval.api.instance import Instance

    return [Instance(request_type=kind, doc={}, arguments=args, idx=i) for i, args in enumerate(arguments)]


def test_lm_eval_absent_says_how_to_install(monkeypatch):
    from papa.evaluation import lm_eval_model, require_lm_eval

    monkeypatch.setitem(sys.modules, "lm_eval", None)  # import lm_eval now raises ImportError
    for call in (require_lm_eval, lambda: lm_eval_model("smollm2")):
        with pytest.raises(PapaError, match=r"not installed: pip install -e '\.\[lm-eval\]'"):
            call()


@needs_lm_eval
@pytest.mark.parametrize("k", [0, K])
def test_loglikelihoods_are_the_patched_models_own(files, k):
    from papa.evaluation.harness import PapaLM

    model_dir, avgs, sort = files
    lm = PapaLM(pretrained=model_dir, static_heads_dir=avgs, sorting_heads_dir=sort, static_heads_num=k,
                batch_size=3)
    assert lm.max_length == T
    got = lm.loglikelihood(instances("loglikelihood", REQUESTS))
    ref_model, tok = reference_model(model_dir, avgs, sort, k), tokenizer_of(model_dir)
    want = [loglikelihood(ref_model, tok, c, x) for c, x in REQUESTS]
    for (ll, greedy_flag), (ref_ll, ref_greedy) in zip(got, want):
        assert ll == pytest.approx(ref_ll, abs=1e-4)
        assert greedy_flag == ref_greedy
    if k:  # the constants matter: the stock model scores the same requests differently
        stock = [loglikelihood(reference_model(model_dir, avgs, sort, 0), tok, c, x)[0] for c, x in REQUESTS]
        assert max(abs(a - b) for a, b in zip(stock, [w[0] for w in want])) > 1e-2


@needs_lm_eval
def test_a_request_longer_than_T_is_cut_to_its_last_T_tokens(files):
    from papa.evaluation.harness import PapaLM

    model_dir, avgs, sort = files
    tok = tokenizer_of(model_dir)
    context = " ".join(["the cat of the dog and the house"] * 4)
    assert len(tok(context)["input_ids"]) > T + 1
    lm = PapaLM(pretrained=model_dir, static_heads_dir=avgs, sorting_heads_dir=sort, static_heads_num=K)
    (ll, _), = lm.loglikelihood(instances("loglikelihood", [(context, " is")]))
    ref_model = reference_model(model_dir, avgs, sort, K)
    assert ll == pytest.approx(loglikelihood(ref_model, tok, context, " is")[0], abs=1e-4)
    # the forward itself refuses what is longer than the constants
    with pytest.raises(PapaError, match=f"constants are {T} long"):
        lm._model_call(torch.zeros(1, T + 1, dtype=torch.long))


@needs_lm_eval
def test_generation_from_left_padded_batches_keeps_each_prompt_at_its_positions(files):
    from papa.evaluation.harness import PapaLM

    model_dir, avgs, sort = files
    lm = PapaLM(pretrained=model_dir, static_heads_dir=avgs, sorting_heads_dir=sort, static_heads_num=K,
                batch_size=3)
    prompts = ["the cat of the dog and", "a", "house of the"]  # one batch, lm-eval pads the shorter ones on the left
    got = lm.generate_until(instances("generate_until", [(p, {"until": [], "max_gen_toks": 5}) for p in prompts]))
    ref_model, tok = reference_model(model_dir, avgs, sort, K), tokenizer_of(model_dir)
    want = [tok.decode(greedy(ref_model, tok, p, 5), skip_special_tokens=True) for p in prompts]
    assert got == want
    # what the alignment guards against: a shorter prompt read at shifted positions predicts something else
    ids = tok("house of the", add_special_tokens=False)["input_ids"]
    shifted = torch.full((1, T), tok.pad_token_id)
    shifted[0, T - len(ids):] = torch.tensor(ids)
    mask = (torch.arange(T) >= T - len(ids)).long()[None]
    with torch.no_grad():
        left = ref_model(input_ids=shifted, attention_mask=mask, use_cache=False).logits[0, -1]
    from lm_eval_fixtures import logits_alone

    assert not torch.allclose(left, logits_alone(ref_model, ids, tok.pad_token_id)[-1], atol=1e-3)


@needs_lm_eval
def test_a_model_patched_in_memory(files):
    from lm_eval.models.huggingface import HFLM

    from papa.evaluation import lm_eval_model

    model_dir, avgs, sort = files
    model, tok = reference_model(model_dir, avgs, sort, K), tokenizer_of(model_dir)
    lm = lm_eval_model(model, tokenizer=tok, batch_size=2)
    assert lm.max_length == T  # the constants' length
    got = [ll for ll, _ in lm.loglikelihood(instances("loglikelihood", REQUESTS))]
    assert got == pytest.approx([loglikelihood(model, tok, c, x)[0] for c, x in REQUESTS], abs=1e-4)
    # lm-eval's plain HFLM feeds rows unpadded: the patched model says what it needs
    plain = HFLM(pretrained=model, tokenizer=tok, max_length=T, batch_size=2)
    with pytest.raises(PapaError, match=f"constant matrices are {T}x{T}"):
        plain.loglikelihood(instances("loglikelihood", REQUESTS))


@needs_lm_eval
def test_bad_arguments(files, tmp_path):
    from papa.evaluation.harness import PapaLM

    model_dir, avgs, sort = files
    with pytest.raises(PapaError, match="needs static_heads_dir"):
        PapaLM(pretrained=model_dir, static_heads_num=3)
    with pytest.raises(PapaError, match=f"the constants in .* are {T}x{T}"):
        PapaLM(pretrained=model_dir, static_heads_dir=avgs, sorting_heads_dir=sort, static_heads_num=3,
               max_length=T + 4)
    with pytest.raises(PapaError, match="head ranking not found"):
        PapaLM(pretrained=model_dir, static_heads_dir=avgs, sorting_heads_dir=str(tmp_path), static_heads_num=3)
    with pytest.raises(PapaError, match="needs its tokenizer"):
        PapaLM(pretrained=reference_model(model_dir, avgs, sort, K))
