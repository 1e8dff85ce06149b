"""Structured (sink + relative-position profile) constants: their matrix, their FFT product against the
materialised T × T product, and their streaming averages against a least-squares fit of the full averages."""

import pytest
import torch
from torch.testing import assert_close

from papa.families import attention_modules
from papa.families.structured import causal_convolution, dense, structured_output
from papa.method.averaging import accumulate_attention
from papa.method.structured_averaging import (StructuredAverager, causal_pair_counts, diagonal_sums,
                                              fit_full_averages)
from tiny_decoders import H, L, T, right_padded_batch, tiny_decoder


def loop_matrix(sink, profile, seq_len):
    """C entry by entry, from the definition."""
    heads, S = sink.shape
    C = torch.zeros(heads, seq_len, seq_len, dtype=sink.dtype)
    for h in range(heads):
        for i in range(seq_len):
            for j in range(i + 1):
                if j < S:
                    C[h, i, j] = sink[h, j]
                elif i - j < profile.shape[1]:
                    C[h, i, j] = profile[h, i - j]
    return C


@pytest.mark.parametrize("S, D, seq_len", [(1, 20, 13), (3, 5, 13), (2, 30, 13), (4, 3, 3), (1, 1, 1)])
def test_dense_matches_the_definition(S, D, seq_len):
    g = torch.Generator().manual_seed(S * 100 + D)
    sink, profile = torch.rand(3, S, generator=g, dtype=torch.float64), torch.rand(3, D, generator=g, dtype=torch.float64)
    assert_close(dense(sink, profile, seq_len), loop_matrix(sink, profile, seq_len), rtol=0, atol=0)


def test_causal_convolution_against_a_loop():
    g = torch.Generator().manual_seed(0)
    kernel, signal = torch.randn(2, 1, 7, generator=g, dtype=torch.float64), torch.randn(1, 3, 19, generator=g, dtype=torch.float64)
    expected = torch.zeros(2, 3, 19, dtype=torch.float64)
    for i in range(19):
        for t in range(min(i, 6) + 1):
            expected[..., i] += kernel[..., t] * signal[..., i - t]
    assert_close(causal_convolution(kernel, signal), expected, rtol=1e-12, atol=1e-12)


def reference_output(C, values, valid, groups):
    """norm(C·P)·V with the (B, H, T, T) probabilities built by hand, V repeated over each group's query heads."""
    P = valid[:, None, :, None] * valid[:, None, None, :]
    weights = C[None] * P
    probs = weights / weights.sum(-1, keepdim=True).clamp_min(1e-12)
    return torch.einsum("bhij,bjhd->bihd", probs, values.repeat_interleave(groups, dim=2))


@pytest.mark.parametrize("window", [None, 3, 11])  # a sliding-window layer's: row i reads keys j > i − window
@pytest.mark.parametrize("S, D", [(1, 40), (1, 6), (4, 9), (2, 1)])
@pytest.mark.parametrize("padding", ["none", "right", "left", "both"])
def test_fft_product_equals_the_materialised_product(S, D, padding, window):
    B, seq_len, G, heads, d = 3, 29, 2, 6, 5
    g = torch.Generator().manual_seed(7)
    sink = torch.rand(heads, S, generator=g, dtype=torch.float64)
    profile = torch.rand(heads, D, generator=g, dtype=torch.float64)
    profile[1, :] = 0  # a head whose rows past the sink are all sink
    values = torch.randn(B, seq_len, G, d, generator=g, dtype=torch.float64)
    valid = torch.ones(B, seq_len, dtype=torch.float64)
    if padding in ("right", "both"):
        valid[1, -9:] = 0
    if padding in ("left", "both"):
        valid[2, :6] = 0  # the sink positions themselves padded: those rows lean on the profile alone
    C = loop_matrix(sink, profile, seq_len)
    if window is not None:
        i = torch.arange(seq_len)
        C = C * ((i[:, None] - i[None, :]) < window)
    expected = reference_output(C, values, valid, heads // G)
    got = structured_output(sink, profile, values, None if padding == "none" else valid, window)
    assert_close(got, expected, rtol=1e-10, atol=1e-12)
    assert (got[valid == 0] == 0).all()


def test_fft_product_in_float32_and_bfloat16():
    g = torch.Generator().manual_seed(1)
    sink, profile = torch.rand(4, 1, generator=g), torch.rand(4, 64, generator=g)
    values = torch.randn(2, 64, 2, 8, generator=g)
    expected = reference_output(loop_matrix(sink.double(), profile.double(), 64), values.double(),
                                torch.ones(2, 64, dtype=torch.float64), 2)
    # float32 FFT: errors of order 1e-7 of the largest term, not of each output
    assert_close(structured_output(sink, profile, values, None).double(), expected, rtol=1e-5, atol=1e-5)
    low = structured_output(sink, profile, values.bfloat16(), None)
    assert low.dtype == torch.bfloat16
    assert_close(low.double(), expected, rtol=2e-2, atol=2e-2)


def test_pair_counts_by_brute_force():
    mask = torch.tensor([[1, 1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1, 1], [1, 1, 0, 1, 1, 1, 0]])
    for S in (1, 2, 4):
        sink, profile = causal_pair_counts(mask, S)
        want_sink, want_profile = torch.zeros(S, dtype=torch.float64), torch.zeros(7, dtype=torch.float64)
        for m in mask.tolist():
            for i in range(7):
                for j in range(i + 1):
                    if m[i] and m[j]:
                        if j < S:
                            want_sink[j] += 1
                        else:
                            want_profile[i - j] += 1
        assert_close(sink, want_sink, rtol=0, atol=0)
        assert_close(profile, want_profile, rtol=0, atol=0)


def test_diagonal_sums():
    X = torch.arange(16.0).view(4, 4)
    assert diagonal_sums(X, 0).tolist() == [0 + 5 + 10 + 15, 4 + 9 + 14, 8 + 13, 12]
    assert diagonal_sums(X, 1).tolist() == [5 + 10 + 15, 9 + 14, 13, 0]


def least_squares_fit(averages, counts, S):
    """The weighted least-squares fit of every head's lower triangle by a sink-plus-profile matrix, solved as a
    linear system (torch.linalg.lstsq): the fit the streaming averages must equal."""
    seq_len = averages.shape[-1]
    pairs = [(i, j) for i in range(seq_len) for j in range(i + 1)]
    design = torch.zeros(len(pairs), S + seq_len, dtype=torch.float64)  # unknowns: sink[0..S), profile[0..T)
    for row, (i, j) in enumerate(pairs):
        design[row, j if j < S else S + i - j] = 1
    w = torch.tensor([counts[i, j].item() for i, j in pairs], dtype=torch.float64).sqrt()
    seen = design[w > 0].sum(0) > 0  # unknowns no weighted pair touches stay 0
    sinks, profiles = [], []
    for head in averages.reshape(-1, seq_len, seq_len):
        target = torch.tensor([head[i, j].item() for i, j in pairs], dtype=torch.float64)
        solution = torch.zeros(S + seq_len, dtype=torch.float64)
        solution[seen] = torch.linalg.lstsq((design * w[:, None])[:, seen], target * w).solution
        sinks.append(solution[:S])
        profiles.append(solution[S:])
    shape = averages.shape[:-2]
    return torch.stack(sinks).view(*shape, S), torch.stack(profiles).view(*shape, seq_len)


@pytest.mark.parametrize("S", [1, 3])
def test_streaming_averages_are_the_least_squares_fit_of_the_full_averages(S):
    """A tiny Llama over right- and left-padded batches: the streaming pass (no T × T sums) against lstsq on the
    full pass's averages and pair counts, and against fit_full_averages."""
    model = tiny_decoder("llama")
    ids, mask = right_padded_batch(lengths=(T, 7, 3, 10))
    mask[3] = torch.cat([torch.zeros(2, dtype=torch.long), torch.ones(T - 2, dtype=torch.long)])  # left-padded
    batches = [{"input_ids": ids[:2], "attention_mask": mask[:2]}, {"input_ids": ids[2:], "attention_mask": mask[2:]}]
    full = accumulate_attention(model, batches, T)
    averages, counts = full.averages().double(), full.pattern_sums
    streaming = accumulate_attention(model, batches, T, averager=StructuredAverager(L, H, T, sink_len=S))
    sink, profile = streaming.constants()
    want_sink, want_profile = least_squares_fit(averages, counts, S)
    assert_close(sink.double(), want_sink, rtol=1e-5, atol=1e-6)
    assert_close(profile.double(), want_profile, rtol=1e-5, atol=1e-6)
    fitted = fit_full_averages(averages, counts, S)
    assert_close(fitted[0], sink, rtol=1e-5, atol=1e-6)
    assert_close(fitted[1], profile, rtol=1e-5, atol=1e-6)
    assert streaming.num_examples == 4


def test_a_fitted_constant_applies_at_any_length():
    """Constants averaged at T apply at 3T (farther distances than seen get 0) and at T/2 (the profile cut)."""
    g = torch.Generator().manual_seed(3)
    sink, profile = torch.rand(2, 1, generator=g, dtype=torch.float64), torch.rand(2, 8, generator=g, dtype=torch.float64)
    for seq_len in (4, 24):
        values = torch.randn(1, seq_len, 1, 3, generator=g, dtype=torch.float64)
        expected = reference_output(loop_matrix(sink, profile, seq_len), values, torch.ones(1, seq_len,
                                    dtype=torch.float64), 2)
        assert_close(structured_output(sink, profile, values, None), expected, rtol=1e-10, atol=1e-12)
    assert (dense(sink, profile, 24)[:, 20, 1:12] == 0).all()  # distances 9..19 lie beyond the profile


# ---------------------------------------------------------------- patched decoders with structured constants

from papa.errors import PapaError  # noqa: E402
from papa.method.attention import patch_model  # noqa: E402
from papa.method.structured_averaging import STRUCTURED_NAME, read_structured, save_structured, sink_window  # noqa: E402
from papa.models.modeling import load_papa_model, save_papa_model  # noqa: E402
from tiny_decoders import tiny_decoder_config  # noqa: E402

STATIC = {0: [1, 2], 1: [0, 1, 2, 3], 2: [3]}


def random_structured(S=2, D=9, seed=5):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(L, H, S, generator=g), torch.rand(L, H, D, generator=g)


def full_at(sink, profile, seq_len):
    """The same constants as [L, H, T, T] full matrices at one length: what `avgs.pt` would hold."""
    return torch.stack([dense(sink[layer], profile[layer], seq_len) for layer in range(L)])


@pytest.mark.parametrize("fft_from", [1, 1 << 30])  # the FFT product at every length, or never
@pytest.mark.parametrize("name", ["llama", "mistral", "gemma3_text", "gpt2"])
@pytest.mark.parametrize("seq_len", [T, 7])
def test_structured_heads_equal_full_constants_at_every_length(name, seq_len, fft_from, monkeypatch):
    """A decoder with structured constants against the same decoder with their full matrices at that length: the
    FFT path (or the matrices materialised per call), the probabilities path and the dropout path, with padding
    and grouped K/V (Mistral and Gemma 3: sliding windows; GPT-2: its own adapter)."""
    import copy

    from papa.families import structured as structured_module

    monkeypatch.setattr(structured_module, "FFT_MIN_LENGTH", fft_from)
    products = []  # which layers ran the FFT product
    fft_product = structured_module.structured_output
    monkeypatch.setattr(structured_module, "structured_output",
                        lambda *args, **kwargs: products.append(args) or fft_product(*args, **kwargs))

    sink, profile = random_structured()
    stock = tiny_decoder(name)
    structured = patch_model(copy.deepcopy(stock), static_heads=STATIC, structured=(sink, profile))
    # the FFT covers every layer with constant heads, windowed ones too, when forced on at every length
    replaced = [layer for layer in range(len(attention_modules(structured))) if layer in STATIC]
    full = patch_model(copy.deepcopy(stock), full_at(sink, profile, seq_len), static_heads=STATIC)
    ids, mask = right_padded_batch(lengths=(seq_len, 5, 3))
    ids, mask = ids[:, :seq_len], mask[:, :seq_len]
    with torch.no_grad():
        assert_close(structured(ids, attention_mask=mask).logits, full(ids, attention_mask=mask).logits,
                     rtol=1e-4, atol=1e-5)
        assert len(products) == (len(replaced) if fft_from == 1 else 0)
        a = structured(ids, attention_mask=mask, output_attentions=True)
        b = full(ids, attention_mask=mask, output_attentions=True)
        assert_close(a.logits, b.logits, rtol=1e-4, atol=1e-5)
        for x, y in zip(a.attentions, b.attentions):
            assert_close(x, y, rtol=1e-5, atol=1e-6)
    structured.train(), full.train()
    torch.manual_seed(0)
    dropped = structured(ids, attention_mask=mask).logits
    torch.manual_seed(0)
    assert_close(dropped, full(ids, attention_mask=mask).logits, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("fft_from", [1, 1 << 30])  # the ranking run's constant share by FFT, or materialised
@pytest.mark.parametrize("name", ["llama", "gemma3_text", "gpt2"])
def test_structured_mix_mode_equals_full_mix_mode(name, fft_from, monkeypatch):
    import copy

    from papa.families import structured as structured_module

    monkeypatch.setattr(structured_module, "FFT_MIN_LENGTH", fft_from)
    sink, profile = random_structured(S=1, D=T)
    stock = tiny_decoder(name)
    a = patch_model(copy.deepcopy(stock), structured=(sink, profile), mix_all_heads=True)
    b = patch_model(copy.deepcopy(stock), full_at(sink, profile, T), mix_all_heads=True)
    ids, mask = right_padded_batch()
    with torch.no_grad():
        for model in (a, b):
            for module in attention_modules(model):
                module.lambdas.fill_(0.3)
        assert_close(a(ids, attention_mask=mask).logits, b(ids, attention_mask=mask).logits, rtol=1e-4, atol=1e-5)


def test_rankers_with_structured_constants_match_single_head_models():
    """loo, with and without the prefix cache, against single-head patched models' losses computed from scratch, at
    a length other than the profiles'; taylor's signed score against a central difference of one head's gate."""
    import copy

    from papa.method.example_losses import task_losses
    from papa.method.gates import gated
    from papa.method.scorers import Objective, loo_scores, make_units, taylor_scores

    sink, profile = random_structured(S=2, D=T + 3)
    stock = tiny_decoder("gpt2").double()  # float64 throughout (Llama's RMS norms drop to float32)
    mixed = patch_model(copy.deepcopy(stock), structured=(sink, profile), mix_all_heads=True)
    ids, mask = right_padded_batch(lengths=(T - 1, 5, 3))
    batches = [{"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}]

    def mean_loss(model):
        with torch.no_grad():
            return float(task_losses("lm", model(ids, attention_mask=mask).logits, batches[0]["labels"]).mean())

    units = make_units(L, H)
    base = mean_loss(stock)
    for reuse in (True, False):
        deltas = loo_scores(Objective(mixed, batches, "lm"), units, reuse_prefix=reuse)
        for u in (0, 5, len(units) - 1):
            single = patch_model(copy.deepcopy(stock), static_heads=[list(units[u][0])], structured=(sink, profile))
            assert float(deltas[u]) == pytest.approx(mean_loss(single) - base, rel=1e-8, abs=1e-10)
    _, signed = taylor_scores(Objective(mixed, batches, "lm"), units)
    (layer, head), eps = units[6][0], 1e-5
    losses = []
    for g in (eps, -eps):
        gate = torch.zeros(H, dtype=torch.float64)
        gate[head] = g
        with gated(mixed, {layer: gate}):
            losses.append(mean_loss(mixed))
    assert float(signed[6]) == pytest.approx((losses[0] - losses[1]) / (2 * eps), rel=1e-5, abs=1e-9)


def test_structured_model_saves_and_loads(tmp_path):
    sink, profile = random_structured()
    model = patch_model(tiny_decoder("llama"), static_heads=STATIC, structured=(sink, profile))
    ids, mask = right_padded_batch()
    save_papa_model(model, tmp_path / "saved")
    with torch.no_grad():
        assert_close(load_papa_model(tmp_path / "saved")(ids, attention_mask=mask).logits,
                     model(ids, attention_mask=mask).logits, rtol=0, atol=0)


def test_structured_file_round_trip_and_clear_errors(tmp_path):
    sink, profile = sink_window(L, H, sinks=2, window=3)
    save_structured(tmp_path / STRUCTURED_NAME, sink, profile, "sink_window", T, 0)
    record = read_structured(tmp_path / STRUCTURED_NAME)
    assert record["kind"] == "sink_window" and record["seq_len"] == T
    model = patch_model(tiny_decoder("llama"), static_heads=STATIC, structured=tmp_path)
    assert model.model.layers[1].self_attn.structured_profile.shape == (4, 3)
    with pytest.raises(PapaError, match="does not exist"):
        read_structured(tmp_path / "absent.pt")
    torch.save(torch.zeros(2), tmp_path / "foreign.pt")
    with pytest.raises(PapaError, match="not a structured-constants file"):
        read_structured(tmp_path / "foreign.pt")
    with pytest.raises(PapaError, match="2 layers x"):
        patch_model(tiny_decoder("llama"), static_heads=STATIC, structured=(sink[:2], profile[:2]))


def test_structured_constants_refuse_an_encoder():
    from tiny_encoders import tiny_model

    with pytest.raises(PapaError, match="encoder"):
        patch_model(tiny_model("bert"), static_heads={0: [0]}, structured=random_structured())


def test_sink_window_is_streaming_llms_pattern():
    sink, profile = sink_window(1, 1, sinks=2, window=3)
    C = dense(sink[0], profile[0], 8)[0]
    for i in range(8):
        for j in range(8):
            assert C[i, j] == float(j <= i and (j < 2 or i - j < 3)), (i, j)
