"""Every encoder family against stock transformers and against an independent numpy computation.

The family-independent checks (fast path = probabilities path, λ limits, exact attention as constants,
padding content) run the decoder families of tests/tiny_decoders.py too; their own checks are in
tests/test_decoders.py.

For each family (BERT, RoBERTa, XLM-R, CamemBERT, ELECTRA, DeBERTa v1, DeBERTa-v2 in two
styles, ModernBERT with sliding-window layers) on tiny random models and padded batches:
0 replaced heads = stock; one layer's probabilities and output recomputed head by head in numpy
from the unpruned stock weights (replace and mix mode); fast path = probabilities path (outputs
and gradients); λ → ±∞ limits; the exact attention of an example as constants reproduces the
stock model on that example; pruned parameter counts; padding content is ignored.
"""

import copy

import numpy as np
import pytest
import torch
from torch.testing import assert_close

import papa
from papa.families import attention_modules, family_for
from papa.errors import PapaError
from layer_reference import expected_probs, patch_and_capture, run
from numpy_attention import np_, reference_layer
from tiny_decoders import DECODER_NAMES, SDPA_DECODERS, family_batch, tiny_family_model
from tiny_encoders import FAMILY_NAMES, HIDDEN, H, L, T, padded_batch, random_constants, tiny_model

D_HEAD = HIDDEN // H
SDPA_FAMILIES = [n for n in FAMILY_NAMES if not n.startswith("deberta")]  # DeBERTa has no sdpa in transformers 5
ALL_FAMILIES = FAMILY_NAMES + DECODER_NAMES  # the tests below that take both run the decoders of tiny_decoders.py too


def all_heads():
    return [[layer, head] for layer in range(L) for head in range(H)]


# ----------------------------------------------------------------------------- numpy references


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_zero_replaced_heads_equals_stock(name):
    ids, mask = padded_batch(name)
    for impl in ["eager"] + (["sdpa"] if name in SDPA_FAMILIES else []):
        stock = tiny_model(name, impl)
        patched = papa.patch_model(copy.deepcopy(stock), random_constants())
        assert_close(run(patched, ids, mask).logits, run(stock, ids, mask).logits, rtol=1e-5, atol=1e-6)
        got = run(patched, ids, mask, output_attentions=True).attentions
        want = run(tiny_model(name, "eager"), ids, mask, output_attentions=True).attentions
        assert len(got) == L
        for g, w in zip(got, want):
            valid_rows = mask[:, None, :, None].expand_as(g) > 0  # padded query rows are implementation-defined
            assert_close(g[valid_rows], w[valid_rows], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", FAMILY_NAMES)
@pytest.mark.parametrize("mode", ["replace", "mix"])
def test_layer_against_independent_numpy(name, mode):
    """One layer's attentions and output, recomputed head by head from the unpruned stock weights."""
    layer_index = 1
    model = tiny_model(name, "eager", head="base")
    stock_attention = copy.deepcopy(attention_modules(model)[layer_index])
    projection = family_for(model).output_projections(model.base_model)[layer_index]  # reads the heads' outputs
    stock_projection = copy.deepcopy(projection)
    constants = random_constants()
    static = {layer_index: [0, 2]}
    lam = np.array([0.5, -1.0, 2.0, 0.0])
    captured = patch_and_capture(model, constants, mode, layer_index, static, lam)
    ids, mask = padded_batch(name)
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask, output_attentions=True)
    output, probs = captured["output"]
    for b in range(ids.shape[0]):
        valid = mask[b].numpy().astype(np.float64)
        stock_probs, v, band = reference_layer(name, stock_attention, np_(captured["x"][b]), valid, captured)
        expected = expected_probs(stock_probs, constants[layer_index], valid, band, mode, static[layer_index], lam)
        real = valid > 0
        if mode == "mix":  # padded query rows keep the stock softmax: compare real rows only
            np.testing.assert_allclose(probs[b][:, real].numpy(), expected[:, real], rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_allclose(probs[b].numpy(), expected, rtol=1e-5, atol=1e-6)
        context = np.einsum("hij,jhd->ihd", expected, v).reshape(T, HIDDEN)  # stock head order
        # the heads' outputs as the next step reads them: through the output projection, whose input
        # columns follow the patched layer's head layout (ModernBERT's module applies it itself)
        got, want = output[b].numpy().astype(np.float64), context @ np_(stock_projection.weight).T
        if name != "modernbert":
            got = got @ np_(projection.weight).T
        np.testing.assert_allclose(got[real], want[real], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ALL_FAMILIES)
@pytest.mark.parametrize("heads", ["some", "all", "mix"])
def test_fast_path_equals_probabilities_path_with_gradients(name, heads):
    impl = "sdpa" if name in SDPA_FAMILIES + SDPA_DECODERS else "eager"
    model = tiny_family_model(name, impl, head="token")
    if heads == "mix":
        papa.patch_model(model, random_constants(), mix_all_heads=True)
        with torch.no_grad():
            for i, module in enumerate(attention_modules(model)):
                module.lambdas.copy_(torch.linspace(-2, 2, H) * (i + 1))
    else:
        static = all_heads() if heads == "all" else [[0, 1], [2, 0], [2, 3], [1, 2], [1, 0], [1, 1]]
        papa.patch_model(model, random_constants(), static_heads=static)
    ids, mask = family_batch(name)
    fast = model(input_ids=ids, attention_mask=mask)  # eval mode: no dropout, autograd on
    slow = model(input_ids=ids, attention_mask=mask, output_attentions=True)
    assert slow.attentions is not None and len(slow.attentions) == L
    real = mask > 0
    assert_close(fast.logits[real], slow.logits[real], rtol=1e-5, atol=1e-5)
    fast.logits[real].sum().backward()
    fast_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    slow.logits[real].sum().backward()
    for n, p in model.named_parameters():
        if p.grad is not None:  # float32 sums of gradients up to ~10³ (Gemma2 scales its embeddings by √hidden)
            assert_close(fast_grads[n], p.grad, rtol=1e-4, atol=1e-5 * max(1.0, p.grad.abs().max().item()))


@pytest.mark.parametrize("name", ALL_FAMILIES)
def test_mix_limits(name):
    ids, mask = family_batch(name)
    stock = tiny_family_model(name)
    mixed = papa.patch_model(copy.deepcopy(stock), random_constants(), mix_all_heads=True)
    constant = papa.patch_model(copy.deepcopy(stock), random_constants(), static_heads=all_heads())
    for big, reference in [(50.0, stock), (-50.0, constant)]:
        with torch.no_grad():
            for module in attention_modules(mixed):
                module.lambdas.fill_(big)
        got, want = run(mixed, ids, mask).logits, run(reference, ids, mask).logits
        if got.dim() == 3:  # per-position logits (a decoder's LM head): real positions
            got, want = got[mask > 0], want[mask > 0]
        assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ALL_FAMILIES)
def test_exact_attention_as_constants_reproduces_the_example(name):
    """With every head constant and C = the stock attention of one example, the model is the stock
    model on that example (padded or not: real positions agree)."""
    stock = tiny_family_model(name, head="token")
    for lengths in [(T,), (8,)]:
        ids, mask = family_batch(name, lengths=lengths)
        reference = run(stock, ids, mask, output_attentions=True)
        exact = torch.stack([a[0] for a in reference.attentions])  # (L, H, T, T)
        patched = papa.patch_model(copy.deepcopy(stock), exact, static_heads=all_heads())
        real = mask > 0
        assert_close(run(patched, ids, mask).logits[real], reference.logits[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ALL_FAMILIES)
def test_padding_content_is_ignored(name):
    for kwargs in [dict(static_heads=[[0, 0], [1, 1], [1, 2]]), dict(mix_all_heads=True), {}]:
        model = papa.patch_model(tiny_family_model(name, head="token"), random_constants(), **kwargs)
        ids, mask = family_batch(name)
        other = ids.clone()
        other[mask == 0] = 7
        assert_close(run(model, ids, mask).logits[mask == 1], run(model, other, mask).logits[mask == 1],
                     rtol=1e-5, atol=1e-6)


def expected_pruned(name, model, static_per_layer):
    """Parameters that replacing `static_per_layer` heads in each layer must remove, by family."""
    d, hidden = D_HEAD, HIDDEN
    total = 0
    for layer, count in enumerate(static_per_layer):
        attention = attention_modules(model)[layer]
        if name in ("bert", "roberta", "xlm-roberta", "camembert", "electra"):
            total += count * 2 * d * (hidden + 1)  # Q and K rows with biases
        elif name == "modernbert":
            total += count * 2 * d * (hidden + (1 if attention.Wqkv.bias is not None else 0))
        elif name == "deberta":
            # in_proj Q, K rows (no bias), q_bias, pos_proj rows (no bias), pos_q_proj rows + bias
            total += count * (2 * d * hidden + d + d * hidden + d * (hidden + 1))
        else:
            total += count * 2 * d * (hidden + 1)
            if not attention.share_att_key:
                total += count * 2 * d * (hidden + 1)  # pos_key_proj and pos_query_proj rows
    return total


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_pruned_parameter_counts_and_all_constant_layers_skip_qk(name):
    stock = tiny_model(name)
    static = {0: [1, 3], 2: [0, 1, 2, 3]}
    patched = papa.patch_model(copy.deepcopy(stock), random_constants(), static_heads=static)
    count = lambda m: sum(p.numel() for n, p in m.named_parameters() if "constant_matrices" not in n)
    assert count(stock) - count(patched) == expected_pruned(name, stock, [2, 0, 4])
    assert attention_modules(patched)[2].constant_matrices.shape == (H, T, T)
    # an all-constant layer computes no query, key or position projection
    module = attention_modules(patched)[2]
    calls = []
    for sub in module.modules():
        if isinstance(sub, torch.nn.Linear) and sub.out_features < HIDDEN:
            sub.register_forward_hook(lambda *a: calls.append(1))
    ids, mask = padded_batch(name)
    run(patched, ids, mask)
    run(patched, ids, mask, output_attentions=True)
    assert calls == []


@pytest.mark.parametrize("name", ALL_FAMILIES)
def test_pruned_projections_keep_their_trainability(name):
    """prune_linear_layer makes every parameter it builds trainable; a frozen encoder's pruned Q/K (and position)
    projections must stay frozen, and a trainable one's trainable (only PAPA's own parameters are new)."""
    for trainable in (False, True):
        model = tiny_family_model(name).requires_grad_(trainable)
        papa.patch_model(model, random_constants(), static_heads=[[0, 1], [2, 0], [2, 1], [2, 2], [2, 3]])
        changed = [n for n, p in model.named_parameters()
                   if p.requires_grad != trainable and "constant_matrices" not in n]
        assert changed == []


def test_a_bert_configured_as_a_decoder_is_a_clear_error():
    """The BERT-like adapters know no causal band: their constant heads would attend to later tokens."""
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=L, num_attention_heads=H,
                                 intermediate_size=16, is_decoder=True))
    with pytest.raises(PapaError, match="is_decoder"):
        papa.patch_model(model, random_constants(), static_heads=[[0, 0]])
    assert not any(isinstance(m, papa.families.PapaAttention) for m in attention_modules(model))  # left as it was


def test_laying_the_heads_out_twice_is_a_clear_error():
    """A second permutation would pair the pruned queries and keys with another head's values."""
    from papa.method.attention import reorder_heads

    model = papa.patch_model(tiny_model("bert"), random_constants(), static_heads=[[0, 0], [0, 2]])
    with pytest.raises(PapaError, match="laid out already"):
        reorder_heads(model)
    with pytest.raises(PapaError, match="not PAPA-patched"):
        reorder_heads(tiny_model("bert"))


def test_modernbert_constant_heads_stay_inside_the_sliding_window():
    model = papa.patch_model(tiny_model("modernbert"), torch.ones(L, H, T, T), static_heads=all_heads())
    ids, mask = padded_batch("modernbert")
    attentions = run(model, ids, mask, output_attentions=True).attentions
    window = model.config.sliding_window
    outside = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).abs() > window
    for layer, module in enumerate(attention_modules(model)):
        if module.sliding_window is not None:
            assert attentions[layer][..., outside].abs().max() == 0
        else:
            assert attentions[layer][0][..., outside].abs().min() > 0  # a global layer spreads everywhere


def test_deberta_talking_head_is_a_clear_error():
    from transformers import DebertaConfig, DebertaModel

    config = DebertaConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=16, talking_head=True)
    with pytest.raises(PapaError, match="talking_head"):
        papa.patch_model(DebertaModel(config), torch.rand(1, 2, 4, 4), static_heads=[[0, 0]])


def test_unsupported_model_lists_the_supported_types():
    from transformers import OPTConfig, OPTModel

    with pytest.raises(PapaError, match="deberta-v2.*modernbert|modernbert.*deberta"):
        papa.patch_model(OPTModel(OPTConfig(num_hidden_layers=1, num_attention_heads=2, hidden_size=8, ffn_dim=8,
                                            word_embed_proj_dim=8)), random_constants())


@pytest.mark.parametrize("name", FAMILY_NAMES)
@pytest.mark.parametrize("probe", ["sequence", "token"])
def test_probe_save_and_reload_give_identical_logits(tmp_path, name, probe):
    """Freeze-extract probe around a patched model (pruned heads), saved and rebuilt from its folder."""
    from papa.models.modeling import build_model, load_papa_model, save_papa_model
    from tiny_encoders import tiny_config

    config = tiny_config(name)
    model_class = type(config).__name__.replace("Config", "ForSequenceClassification" if probe == "sequence"
                                                 else "ForTokenClassification")
    torch.manual_seed(0)
    model = build_model(model_class, config, None, random_constants(), [[0, 1], [2, 0], [2, 3]],
                        freeze_extract_seq_len=T).eval()
    save_papa_model(model, tmp_path)
    reloaded = load_papa_model(str(tmp_path))
    ids, mask = padded_batch(name)
    got, want = run(reloaded, ids, mask).logits, run(model, ids, mask).logits
    if probe == "token":  # logits at padded positions depend on the attention kernel (eager vs sdpa)
        got, want = got[mask == 1], want[mask == 1]
    assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert type(reloaded.base_model) is type(model.base_model)


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_a_folder_saved_in_the_stock_head_layout_reloads(tmp_path, name):
    """Folders written before heads were laid out [dynamic | replaced] (no config.papa["head_layout"])
    hold value rows and output columns in the stock order; they reload to the same model."""
    import json

    from papa.models.modeling import build_model, load_papa_model, save_papa_model
    from tiny_encoders import tiny_config

    config = tiny_config(name)
    model_class = type(config).__name__.replace("Config", "ForSequenceClassification")
    static = [[0, 1], [2, 0], [2, 3]]
    torch.manual_seed(0)
    old = build_model(model_class, copy.deepcopy(config), None, random_constants(), static, reorder=False)
    save_papa_model(old, tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["papa"].pop("head_layout") == "stock"
    (tmp_path / "config.json").write_text(json.dumps(saved))
    torch.manual_seed(0)  # the same weights, laid out by this version
    model = build_model(model_class, copy.deepcopy(config), None, random_constants(), static).eval()
    reloaded = load_papa_model(str(tmp_path))
    ids, mask = padded_batch(name)
    assert_close(run(reloaded, ids, mask).logits, run(model, ids, mask).logits, rtol=1e-6, atol=1e-6)
    assert reloaded.config.papa["head_layout"] == "dynamic_first"
    with pytest.raises(PapaError, match="reorder_heads"):  # the stock layout never runs as if laid out
        run(old, ids, mask)


@pytest.mark.parametrize("name", ["bert", "deberta", "modernbert"])
def test_sequence_probe_dropout_follows_the_family(name):
    from papa.models.poolers import FreezeExtractForSequenceClassification

    probe = FreezeExtractForSequenceClassification(tiny_model(name), T)
    expected = {"bert": 0.1, "deberta": 0.1, "modernbert": 0.0}[name]  # hidden_dropout_prob / classifier_dropout
    assert isinstance(probe.dropout, torch.nn.Dropout) and probe.dropout.p == expected
    roberta_probe = FreezeExtractForSequenceClassification(tiny_model("xlm-roberta"), T)
    assert isinstance(roberta_probe.dropout, torch.nn.Identity)


def test_token_tasks_get_prefix_spaces_with_byte_level_bpe(tmp_path):
    """As the original did for its token tasks: byte-level BPE (DeBERTa v1, RoBERTa) needs a space before each
    pre-split word; WordPiece and SentencePiece tokenizers are left as they are."""
    from papa.runs.run import load_config_and_tokenizer
    from papa.data.tasks import get_task
    from tiny_encoders import save_tiny_pretrained

    deberta = save_tiny_pretrained("deberta", tmp_path / "deberta")
    ner, repeat = get_task("ner"), get_task("repeat")
    tags = ["O", "B-PER", "I-PER"]
    assert load_config_and_tokenizer(deberta, None, ner, tags, 32)[2].add_prefix_space is True
    assert load_config_and_tokenizer(deberta, None, repeat, ["new", "repeated"], 32)[2].add_prefix_space is False
    with_space = load_config_and_tokenizer(deberta, None, ner, tags, 32)[2]
    words = with_space(["EU", "rejects", "German"], is_split_into_words=True)
    assert words.word_ids()[1:4] == [0, 1, 2]  # one piece per word: each was read with its leading space
    bert = load_config_and_tokenizer(None, None, ner, tags, 32)[2]  # WordPiece: words split on their own
    assert bert(["EU", "rejects"], is_split_into_words=True).word_ids()[1:3] == [0, 1]
