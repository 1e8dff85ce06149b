"""The optimal_output control (Li & Janson 2024's optimal ablation): the replaced heads' per-position constant outputs
train on the task's loss from their mean outputs. Checked: only they (and the probe) train; their gradient is a
central finite difference of the loss in float64; training lowers the loss below the mean's on the data it trains
on; the sweep's stages and the probing run's flags."""

import numpy as np
import torch
import torch.nn.functional as F
from tiny_encoders import H, L, T, padded_batch, tiny_model
from torch.testing import assert_close

import papa
from papa.models.modeling import set_trainable
from test_ablations import STATIC

D = 8


def model_and_batch():
    model = papa.patch_model(tiny_model("bert", "eager", head="sequence").double(), static_heads=STATIC,
                             mean_outputs=torch.randn(L, H, T, D, generator=torch.Generator().manual_seed(5)))
    ids, mask = padded_batch("bert")
    return model, ids, mask, torch.tensor([0, 2, 1])


def loss_of(model, ids, mask, labels):
    return F.cross_entropy(model(input_ids=ids, attention_mask=mask).logits, labels)


def test_only_the_mean_outputs_and_the_classifier_train():
    model, *_ = model_and_batch()
    trainable = set_trainable(model, "grad_for_classifier_and_static_only")
    assert any(n.endswith("mean_outputs") for n in trainable) and all(
        n.endswith("mean_outputs") or n.startswith(("classifier", "bert.pooler")) for n in trainable)


def test_the_mean_outputs_gradient_is_the_losses_finite_difference():
    model, ids, mask, labels = model_and_batch()
    set_trainable(model, "grad_for_classifier_and_static_only")
    param = papa.families.attention_modules(model)[1].mean_outputs  # layer 1: heads 0, 2, 3
    loss_of(model, ids, mask, labels).backward()
    eps = 1e-6
    # (replaced head, position, dim): the [CLS] position, the only one the classifier reads through layer 2, whose
    # heads are all replaced (so layer 1's other positions get no gradient, and a finite difference of 0 there)
    for index in [(0, 0, 0), (1, 0, 3), (2, 0, 7), (1, 4, 3)]:
        with torch.no_grad():
            param[index] += eps
            up = loss_of(model, ids, mask, labels)
            param[index] -= 2 * eps
            down = loss_of(model, ids, mask, labels)
            param[index] += eps
        assert_close(param.grad[index], (up - down) / (2 * eps), rtol=1e-5, atol=1e-9)
    assert (param.grad[:, 0] != 0).all() and (param.grad[:, 1:] == 0).all()


def test_training_from_the_mean_lowers_the_loss_on_its_data():
    model, ids, mask, labels = model_and_batch()
    set_trainable(model, "grad_for_classifier_and_static_only")
    params = [p for n, p in model.named_parameters() if n.endswith("mean_outputs")]
    start = float(loss_of(model, ids, mask, labels).detach())
    optimizer = torch.optim.SGD(params, lr=0.5)
    for _ in range(20):
        optimizer.zero_grad()
        loss_of(model, ids, mask, labels).backward()
        optimizer.step()
    assert float(loss_of(model, ids, mask, labels).detach()) < start


def test_the_sweeps_optimal_output_stages(tmp_path):
    from papa.runs.arguments import parse_training_args
    from test_controls import flag, heads_setup, plan_and_stages

    plan, stages = plan_and_stages(tmp_path, "--controls", "optimal_output")
    out = plan.output_dir
    assert "--mean_outputs" in stages["avgs"].args and stages["avgs"].outputs == ["avgs.pt", "mean_outputs.pt"]
    optimal = stages["optimal_k_36"]
    model_args, _, _ = parse_training_args(optimal.args)
    assert model_args.replace_heads_with == "mean_output" and model_args.grad_for_classifier_and_static_only
    assert flag(optimal, "--static_heads_dir") == f"{out}/avgs"
    assert optimal.inputs == [f"{out}/avgs/mean_outputs.pt", f"{out}/sort/sorted_heads.json"]
    papa.save_ranking(np.zeros((6, 12)), tmp_path / "sort")
    torch.save(torch.zeros(6, 12, 8, 32), tmp_path / "mean_outputs.pt")
    heads = heads_setup(tmp_path, "--static_heads_dir", str(tmp_path), "--sorting_heads_dir", str(tmp_path / "sort"),
                        "--static_heads_num", "3", "--replace_heads_with", "mean_output",
                        "--grad_for_classifier_and_static_only")
    assert heads.mean_outputs.shape == (6, 12, 8, 32) and heads.static_heads == {0: [0, 1, 2]}
