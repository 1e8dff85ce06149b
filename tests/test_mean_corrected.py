"""The mean_corrected replacement (a head attends with its constant matrix and adds c = E[A V] − Ā·E[V]), against
independent computations on the stock model in float64:

- the forward: the stock model with each replaced head's context (the output projection's input slice) set to
  norm(C·P)·V + c·m, V read off the stock value projection (a hook) and norm(·) written out here, in an encoder
  (BERT), a grouped-K/V decoder (Llama) and GPT-2's fused projection, in every path (fast, probabilities, dropout's
  with p = 0 is the fast one; the probabilities path when attentions are asked for);
- the averaging pass: mean values, mean outputs and corrections from the stock model's attentions
  (output_attentions) and hooked values and contexts, summed by hand;
- what the correction is for: on the averaging data, a decoder layer whose every head is mean-corrected outputs, on
  average, exactly the stock heads' mean output;
- the probing run's flags, the sweep's control and a saved model's reload.
"""

import pytest
import torch
from tiny_decoders import right_padded_batch, tiny_decoder
from tiny_encoders import H, L, T, padded_batch, tiny_model
from torch.testing import assert_close

import papa
from papa.errors import PapaError
from papa.families import PapaAttention, attention_modules
from papa.method.averaging import accumulate_attention
from test_ablations import STATIC, D, projections

tiny = {"bert": lambda: tiny_model("bert", "eager", head="token").double(),
        "llama": lambda: tiny_decoder("llama", "eager").double(),
        "gpt2": lambda: tiny_decoder("gpt2", "eager").double()}


def batch(name):
    return padded_batch(name) if name == "bert" else right_padded_batch()


def value_hooks(model, name, store):
    """Hooks that keep each layer's values (B, T, H, d), every query head's (K/V groups repeated)."""
    handles = []
    for layer, (value, _, group) in enumerate(projections(model, name)):
        def keep(module, args, out, layer=layer, group=group):
            out = out[..., 2 * H * D:] if name == "gpt2" else out
            store[layer] = out.view(*out.shape[:2], -1, D).repeat_interleave(group, dim=2)
        handles.append(value.register_forward_hook(keep))
    return handles


def hand_norm(constant, valid):
    """norm(C·P) for (H, T, T) constants and (B, T) validity: (B, H, T, T)."""
    masked = constant[None] * (valid[:, None, :, None] * valid[:, None, None, :])
    sums = masked.sum(-1, keepdim=True)
    return torch.where(sums > 0, masked / torch.where(sums > 0, sums, torch.ones_like(sums)), torch.zeros_like(masked))


def corrected_stock(model, name, ids, mask, constants, corrections):
    """The stock model's logits with each replaced head's context set to norm(C·P)·V + c·m (hooks)."""
    valid, store = mask.double(), {}
    handles = value_hooks(model, name, store)
    for layer, (_, output, _) in enumerate(projections(model, name)):
        def replace(module, args, layer=layer):
            context = args[0].clone()  # (B, T, H·d)
            for head in STATIC.get(layer, []):
                attention = hand_norm(constants[layer, head][None], valid)[:, 0]  # (B, T, T)
                head_out = attention @ store[layer][:, :, head] + corrections[layer, head][None] * valid[..., None]
                context[..., head * D:(head + 1) * D] = head_out
            return (context,)
        handles.append(output.register_forward_pre_hook(replace))
    try:
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=mask).logits
    finally:
        for handle in handles:
            handle.remove()


@pytest.mark.parametrize("want_probs", [False, True])
@pytest.mark.parametrize("name", ["bert", "llama", "gpt2"])
def test_mean_corrected_forward_equals_the_hand_written_head(name, want_probs):
    ids, mask = batch(name)
    g = torch.Generator().manual_seed(3)
    constants = torch.rand(L, H, T, T, generator=g).double()  # float32 values: patch_model reads them as float32
    if name != "bert":
        constants = constants.tril()  # a decoder's averages: its causal band
    corrections = torch.randn(L, H, T, D, generator=g).double()
    expected = corrected_stock(tiny[name](), name, ids, mask, constants, corrections)
    patched = papa.patch_model(tiny[name](), constants, static_heads=STATIC, output_corrections=corrections)
    with torch.no_grad():
        got = patched(input_ids=ids, attention_mask=mask, output_attentions=want_probs).logits
    real = mask.bool()
    # Llama's rotary tables are float32 even in a float64 model: PAPA's own heads differ from stock by ~3e-8 there
    assert_close(got[real], expected[real], rtol=1e-6 if name == "llama" else 1e-10, atol=1e-7 if name == "llama" else 1e-10)
    uncorrected = corrected_stock(tiny[name](), name, ids, mask, constants, torch.zeros_like(corrections))
    assert not torch.allclose(got[real], uncorrected[real], atol=1e-3)  # the correction is there to be seen


@pytest.mark.parametrize("name", ["bert", "llama"])
def test_averaging_records_mean_values_outputs_and_corrections(name):
    model = tiny[name]()
    ids, mask = batch(name)
    valid = mask.double()
    store, contexts = {}, {}
    handles = value_hooks(model, name, store)
    for layer, (_, output, _) in enumerate(projections(model, name)):
        handles.append(output.register_forward_pre_hook(
            lambda m, args, layer=layer: contexts.__setitem__(layer, args[0].view(*args[0].shape[:2], H, D))))
    with torch.no_grad():
        probs = model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    for handle in handles:
        handle.remove()
    pattern = valid[:, :, None] * valid[:, None, :]  # (B, T, T)
    counts = valid.sum(0)[:, None]  # (T, 1)
    averager = accumulate_attention(model, [{"input_ids": ids, "attention_mask": mask}], T, value_means=True,
                                    sum_dtype=torch.float64)
    for layer in range(L):
        mean_values = (store[layer] * valid[:, :, None, None]).sum(0).transpose(0, 1) / counts  # (H, T, d)
        mean_outputs = (contexts[layer] * valid[:, :, None, None]).sum(0).transpose(0, 1) / counts
        averages = (probs[layer] * pattern[:, None]).sum(0) / pattern.sum(0).clamp_min(1)  # (H, T, T)
        averages = averages.float().double()  # the run reads the stored float32 averages
        assert_close(averager.mean_values()[layer].double(), mean_values, rtol=1e-6, atol=1e-6)
        assert_close(averager.mean_outputs()[layer].double(), mean_outputs, rtol=1e-6, atol=1e-6)
        assert_close(averager.output_corrections()[layer].double(), mean_outputs - averages @ mean_values,
                     rtol=1e-5, atol=1e-6)
    assert not any(isinstance(m, PapaAttention) for m in attention_modules(model))  # a copy was patched


def test_a_mean_corrected_decoder_layer_outputs_the_stock_mean_on_the_averaging_data():
    """E[norm(Ā·P)·V + c] = Ā·E[V] + E[A V] − Ā·E[V] = E[A V] on unpadded data (an lm task's blocks: every mean is
    over the same examples); layer 0's values do not depend on its own replacement, so its mean output is the
    stock one."""
    model = tiny["llama"]()
    ids, mask = right_padded_batch(lengths=(T,) * 6)
    data = [{"input_ids": ids, "attention_mask": mask}]
    stock = accumulate_attention(model, data, T, value_means=True)
    constants = stock.averages()
    patched = papa.patch_model(tiny["llama"](), constants, static_heads={0: list(range(H))},
                               output_corrections=stock.output_corrections())
    replaced = accumulate_attention(patched, data, T, mean_outputs=True)
    assert_close(replaced.mean_outputs()[0], stock.mean_outputs()[0], rtol=1e-5, atol=1e-6)
    plain = papa.patch_model(tiny["llama"](), constants, static_heads={0: list(range(H))})
    uncorrected = accumulate_attention(plain, data, T, mean_outputs=True).mean_outputs()[0]
    assert_close(uncorrected, stock.mean_outputs()[0] - stock.output_corrections()[0], rtol=1e-5, atol=1e-6)


def test_output_corrections_are_refused_without_constant_heads():
    corrections = torch.zeros(L, H, T, D)
    with pytest.raises(PapaError, match="output_corrections correct constant heads"):
        papa.patch_model(tiny["bert"](), mean_outputs=torch.zeros(L, H, T, D), static_heads=STATIC,
                         output_corrections=corrections)
    with pytest.raises(PapaError, match="T = 5"):
        papa.patch_model(tiny["bert"](), torch.rand(L, H, T, T), static_heads=STATIC,
                         output_corrections=torch.zeros(L, H, 5, D))


def test_a_saved_mean_corrected_model_reloads_with_its_corrections(tmp_path):
    from papa.models.modeling import load_papa_model, save_papa_model

    ids, mask = batch("llama")
    g = torch.Generator().manual_seed(4)
    model = papa.patch_model(tiny_decoder("llama", "eager"), torch.rand(L, H, T, T, generator=g).tril(),
                             static_heads=STATIC, output_corrections=torch.randn(L, H, T, D, generator=g))
    save_papa_model(model, tmp_path / "saved")
    again = load_papa_model(tmp_path / "saved")
    with torch.no_grad():
        assert_close(again(input_ids=ids, attention_mask=mask).logits, model(input_ids=ids, attention_mask=mask).logits)


def test_the_sweeps_mean_corrected_control_stages_and_probing_flags(tmp_path):
    import numpy as np

    from papa.runs.arguments import parse_training_args
    from papa.runs.averaging_arguments import parse_averaging_args
    from test_controls import flag, heads_setup, plan_and_stages

    plan, stages = plan_and_stages(tmp_path, "--controls", "mean_corrected", "mean_output")
    out = plan.output_dir
    assert [s for s in stages if s.startswith("corrected")] == ["corrected_k_36", "corrected_k_72"]
    avgs = stages["avgs"]
    assert "--mean_corrections" in avgs.args and "--mean_outputs" not in avgs.args  # one pass writes both
    assert avgs.outputs == ["avgs.pt", "mean_outputs.pt", "mean_values.pt", "output_corrections.pt"]
    assert parse_averaging_args(avgs.args).mean_corrections
    corrected = stages["corrected_k_36"]
    assert flag(corrected, "--replace_heads_with") == "mean_corrected"
    assert corrected.inputs == [f"{out}/avgs/avgs.pt", f"{out}/avgs/output_corrections.pt", f"{out}/sort/sorted_heads.json"]
    assert parse_training_args(corrected.args)[0].replace_heads_with == "mean_corrected"

    papa.save_ranking(np.zeros((6, 12)), tmp_path / "sort")
    torch.save(torch.rand(6, 12, 8, 8), tmp_path / "avgs.pt")  # MiniLM's shape at T = 8
    common = ["--static_heads_dir", str(tmp_path), "--sorting_heads_dir", str(tmp_path / "sort"),
              "--static_heads_num", "3", "--replace_heads_with", "mean_corrected"]
    with pytest.raises(PapaError, match="output corrections not found.*--mean_corrections"):
        heads_setup(tmp_path, *common)
    torch.save(torch.ones(6, 12, 8, 32), tmp_path / "output_corrections.pt")
    heads = heads_setup(tmp_path, *common)
    assert heads.static_heads == {0: [0, 1, 2]} and heads.output_corrections.shape == (6, 12, 8, 32)
    assert heads.constant_matrices.shape == (6, 12, 8, 8)
