"""The GPU check's tests (`pytest -m cuda`, run by benchmarks/gpu_check.sh): parity and precision on a CUDA device.

Skipped without one. On the GPU: every family's patched model in every precision within 3x the stock model's own
error (as tests/test_precision.py checks on the CPU), one training step's gradients in every mode for six families,
0 replaced heads equal to stock, and the fast path under each SDPA backend that takes a padded batch's mask equal to
the probabilities path.
"""

import pytest
import torch
from torch.testing import assert_close

import papa
from test_precision import CASES, MIXED, PRECISIONS, check_forward_error, constants_with_zero_rows
from test_precision_backward import check_backward_error
from tiny_decoders import family_batch
from tiny_decoders import tiny_family_model as family_model
from tiny_encoders import T, padded_batch, tiny_model

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (run on a GPU machine)")]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("name,impl", CASES)
def test_cuda_forward_error_within_the_stock_models_own(name, impl, precision):
    check_forward_error(name, impl, precision, device="cuda")


@pytest.mark.parametrize("name", ["bert", "deberta-v2", "modernbert", "llama", "gemma3_text", "gpt2"])
def test_cuda_backward_error_within_the_stock_models_own(name):
    """One training step's gradients in every mode on the GPU (where `--fp16` is autocast with a GradScaler), as
    tests/test_precision_backward.py checks them on the CPU, but in eval mode: the fast and probabilities paths under autograd,
    without dropout, so the comparison does not hang on whether CUDA draws the same masks in every dtype."""
    check_backward_error(name, ["mix"], lengths=(T - 4, 7, 3), device="cuda", train=False)
    check_backward_error(name, ["replace", "mean_output"], lengths=(T, 7, 3), device="cuda", train=False)


@pytest.mark.parametrize("name,impl", CASES)
def test_cuda_no_replaced_heads_is_stock(name, impl):
    ids, mask = (t.cuda() for t in family_batch(name))
    stock = family_model(name, impl).cuda()
    model = papa.patch_model(family_model(name, impl), constants_with_zero_rows(), static_heads=[]).cuda()
    with torch.no_grad():
        assert_close(model(input_ids=ids, attention_mask=mask).logits, stock(input_ids=ids, attention_mask=mask).logits,
                     atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["MATH", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cuda_sdpa_backends_agree_with_the_probabilities_path(backend, dtype):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    ids, mask = (t.cuda() for t in padded_batch("bert"))
    model = papa.patch_model(tiny_model("bert", "sdpa"), constants_with_zero_rows(), static_heads=MIXED)
    model = model.cuda().to(dtype)
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask, output_attentions=True).logits.float()
        try:
            with sdpa_kernel(getattr(SDPBackend, backend)):
                got = model(input_ids=ids, attention_mask=mask).logits.float()
        except RuntimeError as err:  # a backend this GPU, dtype or mask does not support
            pytest.skip(f"{backend} unavailable for {dtype}: {str(err).splitlines()[0]}")
    tol = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 3e-2}[dtype]
    assert_close(got, want, atol=tol, rtol=tol)
